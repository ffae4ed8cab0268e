"""Action plugin: open (or resume) the run directory on the controller, or close it.

Thin adapter over prefixbench.bench.runmeta; runs on the controller only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from prefixbench.bench import runmeta

ARGUMENT_SPEC = {
    "state": {"type": "str", "default": "open", "choices": ["open", "closed"]},
    "results_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "default": ""},
    "settings": {"type": "dict", "default": {}},
    "hosts": {"type": "list", "elements": "str", "default": []},
    "inventory": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(ActionBase):
    """Open or close a run directory."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        results_dir = Path(args["results_dir"]).resolve()
        run_id = args["run_id"] or runmeta.new_run_id()
        run_dir = results_dir / run_id
        if args["state"] == "closed":
            if not self._play_context.check_mode:
                runmeta.close_run(run_dir)
            result.update(changed=not self._play_context.check_mode, run_dir=str(run_dir))
            return result
        if self._play_context.check_mode:
            result.update(changed=False, run_id=run_id, run_dir=str(run_dir), resumed=False,
                          msg=f"check mode: would write {run_dir}/run.json")
            return result
        try:
            run_dir, resumed = runmeta.open_run(results_dir, run_id, args["settings"],
                                                args["hosts"], args["inventory"])
        except runmeta.NoRoom as exc:  # before any server starts
            raise AnsibleActionFail(str(exc)) from None
        except OSError as exc:  # the results disk: full, read-only, not ours
            raise AnsibleActionFail(
                f"cannot open the run directory {run_dir}: {exc.strerror or exc}; fix that "
                f"and rerun (with prefixbench_run_id={run_id} to resume it)") from None
        result.update(changed=not resumed, run_id=run_id, run_dir=str(run_dir),
                      resumed=resumed, attempt=runmeta.attempt_id(run_id),
                      msg=f"{'resuming' if resumed else 'new'} run {run_id} in {run_dir}")
        return result
