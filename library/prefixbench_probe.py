#!/usr/bin/python
"""Module: observe a vLLM unit on its host in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_probe
short_description: Observe a vLLM server unit (health endpoint, systemd state, journal)
description:
  - Reads the unit's ActiveState and NRestarts, requests the health URL, and returns the
    last journal line, or the last I(journal_lines) lines when I(journal_lines) > 1.
  - Changes nothing; used by the prefixbench_wait_healthy action.
options:
  unit:
    description: The systemd unit.
    type: str
    required: true
  url:
    description: Health URL on the host (a 200 answer means healthy).
    type: str
    required: true
  journal_lines:
    description: How many journal lines to return.
    type: int
    default: 1
author: prefixbench
"""

EXAMPLES = r"""
- name: Probe the cached server
  prefixbench_probe:
    unit: vllm-cached.service
    url: http://127.0.0.1:8000/health
"""

RETURN = r"""
http_status:
  description: HTTP status of the health URL, or null when nothing answered.
  type: int
  returned: always
active_state:
  description: systemd ActiveState of the unit.
  type: str
  returned: always
n_restarts:
  description: systemd NRestarts of the unit.
  type: int
  returned: always
journal:
  description: The last journal lines of the unit.
  type: list
  elements: str
  returned: always
"""

import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback URL from settings
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "journal_lines": {"type": "int", "default": 1},
        },
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    rc, out, err = module.run_command(
        ["systemctl", "show", unit, "--property=ActiveState,NRestarts"])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    _, journal, _ = module.run_command(
        ["journalctl", "--unit", unit, "--lines", str(module.params["journal_lines"]),
         "--no-pager", "--output", "cat"])
    module.exit_json(
        changed=False,
        http_status=_http_status(module.params["url"]),
        active_state=props.get("ActiveState", "unknown"),
        n_restarts=int(props.get("NRestarts", "0") or 0),
        journal=journal.splitlines(),
    )


if __name__ == "__main__":
    main()
