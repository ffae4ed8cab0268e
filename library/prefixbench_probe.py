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
  - With I(wait) > 0 it polls on the host, every I(poll) seconds, until the server
    answers 200, the unit is no longer starting (failed, inactive) or restarted, or
    I(wait) seconds passed, then returns the last observation: one round trip covers
    I(wait) seconds of waiting.
  - Also returns how long ago the unit's main process started, on the host's monotonic
    clock (systemd's ExecMainStartTimestampMonotonic is CLOCK_MONOTONIC, as is Python's
    time.monotonic on Linux), so a wait that begins after the start still measures the
    whole start-up.
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
  wait:
    description: Seconds to keep polling on the host before returning (0 - one look).
    type: int
    default: 0
  poll:
    description: Seconds between two looks while waiting.
    type: float
    default: 0.5
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
since_start_s:
  description: >-
    Seconds since the unit's main process started, at the last look; null when systemd
    gives no start time (the unit never ran).
  type: float
  returned: always
journal:
  description: The last journal lines of the unit.
  type: list
  elements: str
  returned: always
"""

import time
import urllib.error
import urllib.request
from typing import Any

from ansible.module_utils.basic import AnsibleModule


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback URL from settings
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _look(module: AnsibleModule, unit: str, url: str) -> dict[str, Any]:
    rc, out, err = module.run_command(
        ["systemctl", "show", unit,
         "--property=ActiveState,NRestarts,ExecMainStartTimestampMonotonic"])
    if rc != 0:
        module.fail_json(msg=f"systemctl show {unit} failed: {err.strip()}")
    now = time.monotonic()
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    started_us = props.get("ExecMainStartTimestampMonotonic", "0") or "0"
    since = round(now - int(started_us) / 1e6, 2) if started_us.isdigit() and int(
        started_us) > 0 else None
    return {"http_status": _http_status(url),
            "active_state": props.get("ActiveState", "unknown"),
            "n_restarts": int(props.get("NRestarts", "0") or 0),
            "since_start_s": since}


def _settled(look: dict[str, Any], first: dict[str, Any]) -> bool:
    """Whether the controller must see this look now (healthy, or no longer starting)."""
    return ((look["http_status"] == 200 and look["active_state"] == "active")
            or look["active_state"] in ("failed", "inactive")
            or look["n_restarts"] != first["n_restarts"])


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "journal_lines": {"type": "int", "default": 1},
            "wait": {"type": "int", "default": 0},
            "poll": {"type": "float", "default": 0.5},
        },
        supports_check_mode=True,
    )
    unit, url = module.params["unit"], module.params["url"]
    deadline = time.monotonic() + max(0, module.params["wait"])
    first = look = _look(module, unit, url)
    while not _settled(look, first) and time.monotonic() < deadline:
        time.sleep(max(0.1, module.params["poll"]))
        look = _look(module, unit, url)
    _, journal, _ = module.run_command(
        ["journalctl", "--unit", unit, "--lines", str(module.params["journal_lines"]),
         "--no-pager", "--output", "cat"])
    module.exit_json(changed=False, journal=journal.splitlines(), **look)


if __name__ == "__main__":
    main()
