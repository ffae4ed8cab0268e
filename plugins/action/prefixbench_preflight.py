"""Action plugin: validate one host's settings on the controller, before anything runs.

A thin adapter over :func:`prefixbench.config.settings.validate`. It never connects to the host
(no module is executed), so it works for unreachable hosts and in check mode, and it
changes nothing anywhere. It fails with one line per problem; warnings (a configuration
AWS publishes no recipe for, a tight model fit) are shown and the run goes on.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from prefixbench.config import settings as pb_settings

display = Display()


class ActionModule(ActionBase):
    """Validate the catalogued settings of the current host."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        self.validate_argument_spec(argument_spec={})

        values: dict[str, Any] = {}
        for name in pb_settings.owned_names(task_vars):
            if name in pb_settings.SECRETS:  # never decrypt a vaulted value here
                values[name] = pb_settings.REDACTED
                continue
            raw = task_vars[name]
            try:
                values[name] = self._templar.template(raw)
            except Exception as exc:  # noqa: BLE001 - any templating error is a setting problem
                raise AnsibleActionFail(f"{name}: cannot be templated: {exc}") from None

        host = str(task_vars.get("inventory_hostname", "?"))
        checked = pb_settings.validate(values, host=host, extra_names=values.keys())
        result["changed"] = False
        if checked.problems:
            # Only the problems: one line each, nothing else to scroll past.
            result["failed"] = True
            result["msg"] = (f"{len(checked.problems)} invalid setting(s), nothing was "
                             "changed:\n" + "\n".join(checked.problems))
        else:
            result["settings"] = checked.settings
            result["preflight_warnings"] = checked.warnings
            result["msg"] = f"{host}: {len(checked.settings)} settings valid"
            for line in checked.warnings:
                display.warning(line)
        return result
