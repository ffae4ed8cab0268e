"""The command lines the simulated fleet's harness runs, built from the layout: ``ssh`` to a
host, ``systemd-nspawn`` to boot it, ``nsenter`` into it, the ``ip`` calls that wire the
fabric, the cgroup entry, the overlay mount's options and the artifact server.

Nothing here runs anything: :mod:`prefixbench_sim.fleet` and
:mod:`prefixbench_sim.bootprep` do; the unit tests check the argv directly.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from prefixbench_sim.layout import (
    BRIDGE,
    CGROUP_PARENT,
    FABRIC_ADDRESS,
    FABRIC_NETNS,
    HTTP_PORT,
    PREFIX_LEN,
    FleetPaths,
    LayoutError,
    SimHost,
)

__all__ = [
    "cgroup_dirs",
    "fabric_commands",
    "host_net_commands",
    "http_server_argv",
    "in_cgroups",
    "nsenter_argv",
    "nspawn_argv",
    "overlay_options",
    "proxy_command",
    "ssh_argv",
    "ssh_options",
]


def proxy_command(host: SimHost, ip: str = "ip", nc: str = "nc") -> list[str]:
    """The SSH ``ProxyCommand`` reaching sshd on the host's own loopback."""
    return [ip, "netns", "exec", host.netns, nc, "127.0.0.1", "22"]


def ssh_options(host: SimHost, paths: FleetPaths, ip: str = "ip", nc: str = "nc") -> list[str]:
    """``-o`` options shared by the inventory and the harness's own SSH calls."""
    return [
        "-o",
        "ProxyCommand=" + shlex.join(proxy_command(host, ip, nc)),
        "-o",
        f"UserKnownHostsFile={paths.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
    ]


def ssh_argv(
    host: SimHost,
    paths: FleetPaths,
    remote: Sequence[str],
    *,
    ip: str = "ip",
    nc: str = "nc",
    connect_timeout: int = 5,
) -> list[str]:
    """A complete ``ssh`` call running ``remote`` as root on ``host`` (no multiplexing)."""
    return [
        "ssh",
        "-i",
        str(paths.ssh_key),
        *ssh_options(host, paths, ip, nc),
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        "-o",
        "LogLevel=ERROR",
        "-l",
        "root",
        host.name,
        "--",
        shlex.join(remote),
    ]


def nspawn_argv(host: SimHost, paths: FleetPaths, nspawn: str = "systemd-nspawn") -> list[str]:
    """Boot ``host`` from its overlay with systemd as PID 1, in its own namespace."""
    return [
        nspawn,
        "--keep-unit",
        "--register=no",
        "--boot",
        f"--directory={paths.merged(host.name)}",
        f"--machine={host.name}",
        f"--hostname={host.name}",
        f"--network-namespace-path=/run/netns/{host.netns}",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        "--console=read-only",
        "--settings=false",
    ]


_CGROUP_ENTER: Final = (
    'while [ "$1" != -- ]; do echo $$ > "$1/cgroup.procs"; shift; done; shift; exec "$@"'
)


def cgroup_dirs(mounts: Sequence[Path], host: SimHost) -> list[Path]:
    """The host's own cgroup in each hierarchy: ``<mount>/pbsim/<name>``."""
    return [m / CGROUP_PARENT / host.name for m in mounts]


def in_cgroups(dirs: Sequence[Path], argv: Sequence[str]) -> list[str]:
    """``argv`` run after moving itself into ``dirs`` (same PID: the shell execs it)."""
    return ["sh", "-c", _CGROUP_ENTER, "pbsim-cgroup", *map(str, dirs), "--", *argv]


def overlay_options(lower: Path, upper: Path, work: Path) -> str:
    """The ``-o`` value of an overlay mount (paths may not contain ``,`` or ``:``)."""
    for p in (lower, upper, work):
        if any(c in str(p) for c in ",:\n"):
            raise LayoutError(f"overlayfs cannot take a path containing ',' or ':': {p}")
    return f"lowerdir={lower},upperdir={upper},workdir={work}"


def nsenter_argv(pid: int, command: Sequence[str]) -> list[str]:
    """Run ``command`` inside a host (all its namespaces) with a clean environment."""
    return [
        "nsenter",
        "-t",
        str(pid),
        "-a",
        "env",
        "-i",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG=C.UTF-8",
        *command,
    ]


def fabric_commands() -> list[list[str]]:
    """``ip`` argv that create the fabric namespace and its bridge."""
    ns = ["ip", "-n", FABRIC_NETNS]
    return [
        ["ip", "netns", "add", FABRIC_NETNS],
        [*ns, "link", "set", "lo", "up"],
        [*ns, "link", "add", BRIDGE, "type", "bridge"],
        [*ns, "addr", "add", f"{FABRIC_ADDRESS}/{PREFIX_LEN}", "dev", BRIDGE],
        [*ns, "link", "set", BRIDGE, "up"],
    ]


def host_net_commands(host: SimHost) -> list[list[str]]:
    """``ip`` argv that give ``host`` its namespace, veth and address (no route out)."""
    fabric = ["ip", "-n", FABRIC_NETNS]
    inner = ["ip", "-n", host.netns]
    return [
        ["ip", "netns", "add", host.netns],
        [*inner, "link", "set", "lo", "up"],
        [
            *fabric,
            "link",
            "add",
            host.veth,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            host.netns,
        ],
        [*fabric, "link", "set", host.veth, "master", BRIDGE],
        [*fabric, "link", "set", host.veth, "up"],
        [*inner, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", "eth0"],
        [*inner, "link", "set", "eth0", "up"],
    ]


def http_server_argv(python: str, www: Path) -> list[str]:
    """The artifact server, run inside the fabric namespace."""
    return [
        "ip",
        "netns",
        "exec",
        FABRIC_NETNS,
        python,
        "-m",
        "http.server",
        "--bind",
        FABRIC_ADDRESS,
        "--directory",
        str(www),
        str(HTTP_PORT),
    ]
