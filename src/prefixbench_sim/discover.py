"""Find the fleet on the machine: the harness's namespaces, the processes in them, each
host's systemd, and which names are the harness's hosts.

Only the harness's own ``pbsim-*`` network namespaces are listed, and a name that is not
one of its hosts (:func:`maybe_host` gives ``None``) is never touched: what ``up`` and
``down`` may stop or remove is found here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prefixbench_sim import layout
from prefixbench_sim.layout import NETNS_PREFIX, SimHost
from prefixbench_sim.system import ProcRef, ns_pid1, run

__all__ = ["host_pid1", "list_netns", "maybe_host", "netns_pids", "netns_refs", "sorted_hosts"]


def list_netns() -> list[str]:
    """Names of the harness's own network namespaces (``pbsim-*``)."""
    proc = run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(NETNS_PREFIX))


def netns_pids(ns: str) -> list[int]:
    """Host-side PIDs of the processes in the namespace ``ns``."""
    proc = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def netns_refs(ns: str) -> list[ProcRef]:
    """Every process in the namespace ``ns`` (none when it does not exist)."""
    if not Path(f"/run/netns/{ns}").exists():
        return []
    refs = (ProcRef.of(pid) for pid in netns_pids(ns))
    return [r for r in refs if r is not None]


def host_pid1(host: SimHost) -> int | None:
    """Host-side PID of the host's systemd (PID 1 inside it), if it is running."""
    if not Path(f"/run/netns/{host.netns}").exists():
        return None
    for pid in netns_pids(host.netns):
        if ns_pid1(pid):
            return pid
    return None


def sorted_hosts(hosts: Iterable[SimHost | None]) -> list[SimHost]:
    """The hosts in plan order (family, then index), strangers (``None``) left out."""
    return sorted((h for h in hosts if h is not None), key=lambda h: (h.family, h.index))


def maybe_host(name: str) -> SimHost | None:
    """The host called ``name``, or None for a stranger (never touched)."""
    try:
        return layout.parse_host_name(name)
    except layout.LayoutError:
        return None
