"""Make one simulated host slower than the others: a CPU quota on its whole container.

For measurements only (``make bench-overhead ARGS="fleet --slow HOST=0.3"``): a fleet
whose hosts differ, as a Trn2 and a Trn3 do, or a host compiling what the others restore.
Every process of the host's container (its systemd, and so everything systemd starts
after: sshd, the vLLM server, the bench client) moves into a cgroup of this machine's
cgroup-v1 ``cpu`` hierarchy with ``cpu.cfs_quota_us`` set to the fraction of one core;
children inherit the group. On leaving, the processes go back to the hierarchy's root and
the group is removed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from prefixbench_sim import cmdlines
from prefixbench_sim.layout import SimHost
from prefixbench_sim.system import cgroup_mounts

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def host_pids(host: SimHost, mounts: list[Path] | None = None) -> set[int]:
    """Every process of ``host``'s container, from the cgroups the fleet keeps it in."""
    pids: set[int] = set()
    for top in cmdlines.cgroup_dirs(mounts if mounts is not None else cgroup_mounts(), host):
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(x) for x in procs.read_text().split())
    return pids


def _move(pids: set[int], into: Path) -> int:
    moved = 0
    for pid in sorted(pids):
        try:
            (into / "cgroup.procs").write_text(f"{pid}\n")
            moved += 1
        except OSError:  # the process ended meanwhile
            continue
    return moved


@contextlib.contextmanager
def throttled(host: SimHost, fraction: float, root: Path = CPU_ROOT) -> Iterator[int]:
    """Hold ``host``'s container to ``fraction`` of one core; yields how many processes
    moved."""
    if not 0.01 <= fraction <= 64:
        raise ValueError(f"a CPU quota of {fraction} cores is not between 0.01 and 64")
    if not (root / "cpu.cfs_quota_us").exists():
        raise RuntimeError(f"no cgroup-v1 cpu hierarchy at {root}: cannot throttle a host")
    group = root / f"pbsim-slow-{host.name}"
    group.mkdir(exist_ok=True)
    try:
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{int(fraction * PERIOD_US)}\n")
        moved = _move(host_pids(host), group)
        if not moved:
            raise RuntimeError(f"{host.name} has no processes: is the fleet up?")
        yield moved
    finally:
        with contextlib.suppress(OSError):
            _move({int(x) for x in (group / "cgroup.procs").read_text().split()}, root)
        with contextlib.suppress(OSError):
            group.rmdir()
