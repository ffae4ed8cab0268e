"""Action plugin: wait for a starting vLLM unit to become healthy, showing progress.

Polls the host with the prefixbench_probe module; the decisions and the progress line
come from prefixbench.servers.health. On failure the unit's journal tail comes back to the
controller in the result (and into ``log_file`` when given).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from prefixbench.measure.atomic import write_json_atomic, write_text_atomic
from prefixbench.servers import health

display = Display()

ARGUMENT_SPEC = {
    "unit": {"type": "str", "required": True},
    "url": {"type": "str", "required": True},
    "timeout": {"type": "int", "default": 1800},
    # Seconds of waiting one probe covers on the host (it returns at once when the
    # server answers or the unit stops starting): few round trips, quick detection.
    "interval": {"type": "int", "default": 15},
    "progress_every": {"type": "int", "default": 30},
    "journal_lines": {"type": "int", "default": 200},
    "log_file": {"type": "path", "required": False},
    "record_file": {"type": "path", "required": False},
    # The task before started the unit (other tasks ran since): count the start-up from
    # the unit's start, not from this wait's.
    "from_unit_start": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    """Wait for health; fail with the journal tail on a timeout, failure or crash loop."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True

    def _probe(self, args: dict[str, Any], task_vars: dict[str, Any],
               lines: int = 1, wait: int = 0) -> dict[str, Any]:
        out = self._execute_module(
            module_name="prefixbench_probe",
            module_args={"unit": args["unit"], "url": args["url"], "journal_lines": lines,
                         "wait": wait},
            task_vars=task_vars)
        if out.get("failed"):
            raise AnsibleActionFail(f"probing {args['unit']} failed: {out.get('msg')}")
        return out

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = str(task_vars.get("inventory_hostname", "?"))
        if self._play_context.check_mode:
            result.update(changed=False, skipped=True,
                          msg=f"check mode: would wait up to {args['timeout']} s for "
                              f"{args['unit']} at {args['url']}")
            return result

        outcome = health.wait(
            lambda lines, wait: self._probe(args, task_vars, lines=lines, wait=wait),
            host=host, unit=args["unit"], timeout=args["timeout"], interval=args["interval"],
            progress_every=args["progress_every"], journal_lines=args["journal_lines"],
            progress=display.display, from_unit_start=args["from_unit_start"])
        elapsed = round(outcome.elapsed, 1)
        if outcome.healthy:
            if args.get("record_file"):
                write_json_atomic(Path(args["record_file"]),
                                  {"unit": args["unit"], "elapsed_s": elapsed,
                                   "healthy_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime())})
            result.update(changed=False, elapsed=elapsed, msg=outcome.reason)
            return result
        if args.get("log_file"):
            write_text_atomic(Path(args["log_file"]), "\n".join(outcome.journal) + "\n")
        result.update(failed=True, changed=False, elapsed=elapsed,
                      journal_tail=list(outcome.journal),
                      msg=f"{host}: {args['unit']}: {outcome.reason}; last log: "
                          f"{outcome.last_log_line or '(none)'}")
        return result
