"""Remove the fleet from the machine: power hosts off, then clear what is left of them.

:func:`stop_hosts` asks each host's systemd to power off, then kills what did not stop,
but only processes the harness recorded or that live in the harness's own namespaces,
and removes each host's namespace, overlay directory and cgroups. :func:`teardown` does
that for every host it can find (recorded, a ``pbsim-*`` namespace, or a host
directory), then stops the artifact server, deletes the fabric namespace, unmounts what
is left under the state directory and removes the state files.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from prefixbench_sim import cmdlines, layout
from prefixbench_sim.discover import (
    host_pid1,
    list_netns,
    maybe_host,
    netns_refs,
    sorted_hosts,
)
from prefixbench_sim.layout import FABRIC_NETNS, NETNS_PREFIX, FleetPaths, SimHost
from prefixbench_sim.state import FleetState
from prefixbench_sim.system import (
    SIGRTMIN_POWEROFF,
    ProcRef,
    SimFleetError,
    cgroup_mounts,
    mounts_under,
    phase,
    reap_children,
    remove_cgroup,
    remove_tree,
    run,
    send,
    wait_gone,
)

__all__ = ["POWEROFF_TIMEOUT", "stop_hosts", "teardown"]

POWEROFF_TIMEOUT: Final = 30.0


def teardown(paths: FleetPaths, state: FleetState) -> None:
    """Remove every host, the fabric and the state files of the fleet."""
    names = set(state.hosts)
    names |= {n[len(NETNS_PREFIX) :] for n in list_netns() if n != FABRIC_NETNS}
    hosts_dir = paths.state / "hosts"
    if hosts_dir.is_dir():
        names |= {d.name for d in hosts_dir.iterdir() if d.is_dir()}
    hosts = sorted_hosts(maybe_host(n) for n in names)
    if hosts:
        with phase(f"powering off {', '.join(h.name for h in hosts)}...", "hosts removed"):
            stop_hosts(paths, hosts, state)
    # The fabric: the artifact server and anything else in the namespace.
    refs = [r for r in [state.http, *netns_refs(FABRIC_NETNS)] if r is not None]
    for ref in refs:
        send(ref, signal.SIGTERM)
    for ref in wait_gone(refs, 5):
        send(ref, signal.SIGKILL)
    wait_gone(refs, 5)
    state.http = None
    if Path(f"/run/netns/{FABRIC_NETNS}").exists():
        run(["ip", "netns", "del", FABRIC_NETNS])
    if paths.state.exists():
        for point in mounts_under(paths.state):
            run(["umount", "-l", str(point)], check=False)
    for mount in cgroup_mounts():
        remove_cgroup(mount / layout.CGROUP_PARENT)
    paths.state_file.unlink(missing_ok=True)
    paths.known_hosts.unlink(missing_ok=True)
    paths.inventory.unlink(missing_ok=True)
    reap_children()


def stop_hosts(paths: FleetPaths, hosts: Sequence[SimHost], state: FleetState) -> None:
    """Power off, then kill leftovers, unmount, delete namespaces and host dirs."""
    refs: list[ProcRef] = []
    for host in hosts:
        ref = state.hosts.get(host.name)
        if ref is not None:
            refs.append(ref)
        pid1 = host_pid1(host)
        if pid1 is not None:
            p1 = ProcRef.of(pid1)
            if p1 is not None:
                send(p1, SIGRTMIN_POWEROFF)
                refs.append(p1)
    left = wait_gone(refs, POWEROFF_TIMEOUT)
    for host in hosts:  # what did not stop: recorded PIDs and our namespaces only
        left += netns_refs(host.netns)
    for ref in left:
        send(ref, signal.SIGKILL)
    if wait_gone(left, 10):
        raise SimFleetError(
            "processes survived SIGKILL: " + " ".join(str(r.pid) for r in left if r.alive())
        )
    for host in hosts:
        if Path(f"/run/netns/{host.netns}").exists():
            run(["ip", "netns", "del", host.netns])
        remove_tree(paths.host_dir(host.name))
        for cgroup in cmdlines.cgroup_dirs(cgroup_mounts(), host):
            remove_cgroup(cgroup)
        state.hosts.pop(host.name, None)
    if paths.state.exists():
        state.save(paths.state_file)
    reap_children()
