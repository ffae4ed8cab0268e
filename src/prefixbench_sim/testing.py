"""Test glue for the simulated fleet: a handle for tests and a session that always ends.

``tests/integration/conftest.py`` builds its ``sim_fleet`` fixture on
:func:`fleet_session`; other test suites can import the same pieces.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final

from prefixbench_sim.fleet import Fleet
from prefixbench_sim.layout import FleetPaths, SimHost

#: trn2-sim-1 (bare), trn2-sim-2 (the 2026-07-20 vLLM 0.21 DLAMI), trn2-sim-3 (today's 2.32
#: DLAMI) and trn3-sim-1 (bare): every host flavour, two bare hosts sharing compile keys.
FLEET_SIZE: Final = 4


@dataclass
class SimFleetHandle:
    """What the tests get: the fleet, its inventory and its hosts."""

    fleet: Fleet
    inventory: Path
    hosts: list[SimHost]

    @property
    def paths(self) -> FleetPaths:
        return self.fleet.paths

    def host(self, name: str) -> SimHost:
        return next(h for h in self.hosts if h.name == name)

    def ssh(self, host: SimHost, argv: Sequence[str], timeout: float = 120) -> str:
        """Run ``argv`` on ``host`` over real SSH; raise AssertionError on a non-zero exit."""
        proc: subprocess.CompletedProcess[str] = self.fleet.ssh(host, argv, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(
                f"{host.name}: {' '.join(argv)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout

    def sh(self, host: SimHost, script: str, timeout: float = 120) -> str:
        """Run a ``sh -eu`` script on ``host`` over SSH."""
        return self.ssh(host, ["sh", "-euc", script], timeout=timeout)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def fleet_session(fleet: Fleet, count: int = FLEET_SIZE) -> Iterator[SimFleetHandle]:
    """``up count`` on entry; ``down`` on exit, however the block ends.

    SIGTERM is turned into KeyboardInterrupt for the duration, and ``down`` is also
    registered with :mod:`atexit` in case the interpreter is leaving without unwinding.
    With ``PREFIXBENCH_SIM_KEEP=1`` the fleet is left up (a maintainer's loop over one
    integration test on provisioned hosts; ``make sim-down`` ends it).
    """
    done = os.environ.get("PREFIXBENCH_SIM_KEEP") == "1"

    def teardown() -> None:
        nonlocal done
        if not done:
            done = True
            fleet.down()

    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    atexit.register(teardown)
    try:
        hosts = fleet.up(count)
        yield SimFleetHandle(fleet, fleet.paths.inventory, hosts)
    finally:
        try:
            teardown()
        finally:
            atexit.unregister(teardown)
            signal.signal(signal.SIGTERM, previous)


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str],
                 timeout: float = 10) -> None:
    """Stop a process the caller started, by its PID: SIGTERM, then SIGKILL after
    ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


RECAP: Final = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE)


def run_playbook(root: Path, env: Mapping[str, str], *args: str, inventory: str = "inventories/sim",
                 timeout: float = 1500) -> tuple[subprocess.CompletedProcess[str], float]:
    """``ansible-playbook -i <inventory> ARGS`` from the repository root; (result, seconds)."""
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", inventory, *args], cwd=root,
                          env=dict(env), capture_output=True, text=True, timeout=timeout,
                          check=False)
    return proc, time.monotonic() - start


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of an ansible-playbook run: per host ok/changed/unreachable/failed."""
    return {m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)),
                         "unreachable": int(m.group(4)), "failed": int(m.group(5))}
            for m in RECAP.finditer(output)}
