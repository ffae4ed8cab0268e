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

        start = time.monotonic()
        first = self._probe(args, task_vars)
        restarts_at_start = int(first.get("n_restarts", 0))
        last_progress = start
        raw = first
        while True:
            probe = health.Probe(
                http_status=raw.get("http_status"),
                active_state=str(raw.get("active_state", "unknown")),
                n_restarts=int(raw.get("n_restarts", 0)),
                last_log_line=(raw.get("journal") or [""])[-1])
            elapsed = time.monotonic() - start
            decision = health.decide(probe, elapsed, args["timeout"], restarts_at_start)
            if decision.verdict == "healthy":
                if args.get("record_file"):
                    write_json_atomic(Path(args["record_file"]),
                                      {"unit": args["unit"], "elapsed_s": round(elapsed, 1),
                                       "healthy_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime())})
                result.update(changed=False, elapsed=round(elapsed, 1), msg=decision.reason)
                return result
            if decision.verdict == "failed":
                tail = self._probe(args, task_vars, lines=args["journal_lines"])
                journal = tail.get("journal") or []
                if args.get("log_file"):
                    write_text_atomic(Path(args["log_file"]), "\n".join(journal) + "\n")
                result.update(failed=True, changed=False, elapsed=round(elapsed, 1),
                              journal_tail=journal,
                              msg=f"{host}: {args['unit']}: {decision.reason}; last log: "
                                  f"{probe.last_log_line.strip() or '(none)'}")
                return result
            now = time.monotonic()
            if now - last_progress >= args["progress_every"]:
                display.display(health.progress_line(host, args["unit"], elapsed, probe))
                last_progress = now
            left = args["timeout"] - (time.monotonic() - start)
            raw = self._probe(args, task_vars, wait=max(1, min(args["interval"], int(left) + 1)))
