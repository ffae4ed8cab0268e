"""Action plugin: write summary.json, report.md, report.html and results.csv of a run.

Thin adapter over prefixbench.report; runs on the controller only. Failed verdicts are
reported, not raised: the run's outcome is in summary.json (and in `prefixbench run`'s
exit code); only an unreadable run directory fails the task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from prefixbench.report.build import ReportInputError
from prefixbench.report.phase import report_run

ARGUMENT_SPEC = {"run_dir": {"type": "path", "required": True},
                 "junit": {"type": "str", "default": ""}}


class ActionModule(ActionBase):
    """Report a run directory."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        run_dir = Path(args["run_dir"])
        if self._play_context.check_mode:
            result.update(changed=False, msg=f"check mode: would write the report of {run_dir}")
            return result
        try:
            shown = report_run(run_dir, junit=args.get("junit") or "")
        except ReportInputError as exc:
            raise AnsibleActionFail(f"cannot report {run_dir}: {exc}") from None
        except OSError as exc:  # the results disk: full, read-only, gone
            raise AnsibleActionFail(
                f"cannot write the report of {run_dir}: {exc.strerror or exc}; free space "
                f"there and rerun `prefixbench report {run_dir}` (the records are intact)"
            ) from None
        result.update(changed=True, **shown, msg=shown["lines"])
        return result
