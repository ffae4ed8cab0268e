#!/usr/bin/python
"""Start or stop the preloaded bench client of one server (prefixbench.bench.warm_client)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_bench_client
short_description: Start or stop the preloaded vllm bench client of one server
description:
  - C(started) runs C(python -I SCRIPT serve SOCKET) as a transient systemd unit
    (C(systemd-run --collect)): it imports what C(vllm bench serve) imports, then forks
    each bench of the server from that state. Returns at once; the import goes on while
    the server starts. A unit of the same name left from an earlier run is stopped first.
  - C(stopped) stops the unit (nothing to do when it is not there) and removes its socket.
  - Benches find the client through the launcher in their argv; without a running
    client they run the usual way, so a client that fails to start costs only its time.
options:
  state:
    description: started or stopped.
    type: str
    choices: [started, stopped]
    required: true
  unit:
    description: Name of the transient unit.
    type: str
    required: true
  socket:
    description: The client's Unix socket.
    type: path
    required: true
  script:
    description: The warm_client.py script on the host (started only).
    type: path
  python:
    description: The vLLM virtualenv's Python (started only).
    type: path
  environment:
    description: >-
      Variables set in the client's environment; they must be those the benches run
      with (a bench whose import-time variables differ runs the usual way).
    type: dict
    default: {}
author: prefixbench
"""

EXAMPLES = r"""
- name: Preload the bench client while the server starts
  prefixbench_bench_client:
    state: started
    unit: prefixbench-bench-client-cached.service
    socket: /run/prefixbench-bench-client-cached.sock
    script: /var/lib/prefixbench/warm_client.py
    python: /opt/vllm-prefixbench/venv/bin/python
    environment: {HF_HUB_OFFLINE: "1"}
"""

RETURN = r"""
argv:
  description: The systemd-run command (started only).
  type: list
  returned: always
"""

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def _stop(module: AnsibleModule, unit: str, socket: str) -> bool:
    """Stop ``unit`` if it is loaded; True when something was there."""
    rc, out, _ = module.run_command(["systemctl", "show", unit, "--property=LoadState",
                                     "--value"])
    loaded = rc == 0 and out.strip() not in ("", "not-found")
    if loaded:
        module.run_command(["systemctl", "stop", unit])
        module.run_command(["systemctl", "reset-failed", unit])
    for path in (Path(socket), Path(f"{socket}.starting")):
        path.unlink(missing_ok=True)
    return loaded


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["started", "stopped"], "required": True},
            "unit": {"type": "str", "required": True},
            "socket": {"type": "path", "required": True},
            "script": {"type": "path"},
            "python": {"type": "path"},
            "environment": {"type": "dict", "default": {}},
        },
        required_if=[("state", "started", ("script", "python"))],
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=p["state"] == "started", argv=[])
    was_there = _stop(module, p["unit"], p["socket"])
    if p["state"] == "stopped":
        module.exit_json(changed=was_there, argv=[])
    # The launcher waits while this marker exists (the client then writes its pid in).
    Path(f"{p['socket']}.starting").write_text("", encoding="ascii")
    argv = ["systemd-run", f"--unit={p['unit']}", "--collect", "--quiet",
            "--property=KillMode=control-group",
            *(f"--setenv={k}={v}" for k, v in sorted(p["environment"].items())),
            p["python"], "-I", p["script"], "serve", p["socket"]]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        Path(f"{p['socket']}.starting").unlink(missing_ok=True)
        module.fail_json(msg=f"systemd-run failed ({rc}): {(err or out).strip()}", argv=argv)
    _mark_pid(module, p["unit"], f"{p['socket']}.starting")
    module.exit_json(changed=True, argv=argv)


def _mark_pid(module: AnsibleModule, unit: str, marker: str) -> None:
    """Put the client's pid into its still-empty marker: a client that dies before it
    writes the pid itself (a missing script) then sends launchers cold at once."""
    rc, out, _ = module.run_command(["systemctl", "show", unit, "--property=MainPID",
                                     "--value"])
    pid = out.strip()
    if rc != 0 or not pid.isdigit() or pid == "0":
        return
    try:
        fd = os.open(marker, os.O_WRONLY)  # never re-creates a marker the client removed
    except OSError:
        return
    with os.fdopen(fd, "w") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            handle.write(pid)


if __name__ == "__main__":
    main()
