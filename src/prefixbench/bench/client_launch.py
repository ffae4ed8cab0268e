"""Where the preloaded bench client (:mod:`prefixbench.bench.warm_client`) lives on a
host, and the commands that start it and go through it."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Final

from prefixbench.servers.server import BENCH_CLIENT_SCRIPT, CONFIGURATIONS

__all__ = ["HOST_SCRIPT", "SCRIPT_SOURCE", "launcher", "plan", "socket_path", "unit"]

#: The script on the controller (copied to the host by the prefix_bench role).
SCRIPT_SOURCE: Final = Path(__file__).with_name("warm_client.py")
#: Where it is put on the host.
HOST_SCRIPT: Final = BENCH_CLIENT_SCRIPT


def _check(configuration: str) -> str:
    if configuration not in CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}")
    return configuration


def unit(configuration: str) -> str:
    """The transient systemd unit of the preloaded client of ``configuration``'s server."""
    return f"prefixbench-bench-client-{_check(configuration)}.service"


def socket_path(configuration: str) -> str:
    return f"/run/prefixbench-bench-client-{_check(configuration)}.sock"


def python_of(vllm_executable: str) -> str:
    """The virtualenv's Python beside its ``vllm`` script."""
    return posixpath.join(posixpath.dirname(vllm_executable), "python")


def launcher(vllm_executable: str, configuration: str) -> tuple[str, ...]:
    """What goes before ``vllm`` in a bench argv to run it through the preloaded client
    (the launcher needs only the standard library: ``-S`` skips site-packages)."""
    return (python_of(vllm_executable), "-I", "-S", HOST_SCRIPT, "run",
            socket_path(configuration), "--")


def plan(vllm_executable: str, configuration: str) -> dict[str, str]:
    """What the role's tasks need: the unit, socket, script and Python."""
    return {"unit": unit(configuration), "socket": socket_path(configuration),
            "script": HOST_SCRIPT, "source": str(SCRIPT_SOURCE),
            "python": python_of(vllm_executable)}
