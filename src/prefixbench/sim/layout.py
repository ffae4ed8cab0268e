"""The simulated fleet's pure parts: names, groups, addresses, paths, files and argv.

Nothing here touches the machine. :mod:`prefixbench.sim.fleet` turns these values into
namespaces, mounts and processes; the unit tests check them directly.

Naming: ``up N`` makes ``N - 1`` Trn2 hosts ``trn2-sim-1 .. trn2-sim-(N-1)`` and one Trn3
host ``trn3-sim-1`` (with ``N == 1``, just ``trn2-sim-1``). A host keeps its name and
its address when the fleet grows or shrinks, so ``up 3`` then ``up 4`` only adds
``trn2-sim-3``.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

Family = Literal["trn2", "trn3"]

#: Simulated instance types. ``trn3sim.48xlarge`` is made up for the simulated fleet and
#: named so it can never be mistaken for a real type (the catalogue refuses a simulated
#: entry without "sim" in its name); the simulated trn2 hosts use the real trn2.48xlarge.
TRN2_INSTANCE_TYPE: Final = "trn2.48xlarge"
TRN3_INSTANCE_TYPE: Final = "trn3sim.48xlarge"
INSTANCE_TYPES: Final[Mapping[Family, str]] = {
    "trn2": TRN2_INSTANCE_TYPE,
    "trn3": TRN3_INSTANCE_TYPE,
}

#: Inventory group holding both families.
PARENT_GROUP: Final = "neuron_fleet"

#: Where each host finds its simulated instance identity (read by the simulated Neuron
#: tools, e.g. ``neuron-ls -j``).
INSTANCE_FILE: Final = "/etc/prefixbench-sim/instance.json"

#: The fabric: one bridge in its own namespace; hosts hang off it by veth.
NETNS_PREFIX: Final = "pbsim-"
FABRIC_NETNS: Final = "pbsim-fabric"
BRIDGE: Final = "pbsim-br0"
SUBNET_PREFIX: Final = "10.213.0."
PREFIX_LEN: Final = 24
FABRIC_ADDRESS: Final = "10.213.0.1"
HTTP_PORT: Final = 8080
ARTIFACT_URL: Final = f"http://{FABRIC_ADDRESS}:{HTTP_PORT}/"

# Address plan: trn2-sim-i -> .(10+i), trn3-sim-j -> .(200+j). Stable per name.
_TRN2_BASE: Final = 10
_TRN3_BASE: Final = 200
MAX_TRN2: Final = 189  # .11 .. .199
MAX_TRN3: Final = 54  # .201 .. .254
MAX_HOSTS: Final = MAX_TRN2 + 1

#: Host interpreter (Debian 12's python3) for the inventory.
HOST_PYTHON: Final = "/usr/bin/python3"

# Linux interface names are at most 15 bytes.
_IFNAMSIZ: Final = 15


class LayoutError(ValueError):
    """A request the layout cannot satisfy (bad count, bad path)."""


@dataclass(frozen=True)
class SimHost:
    """One simulated host: its identity and where it lives on the fabric."""

    family: Family
    index: int

    @property
    def name(self) -> str:
        return f"{self.family}-sim-{self.index}"

    @property
    def instance_type(self) -> str:
        return INSTANCE_TYPES[self.family]

    @property
    def address(self) -> str:
        return host_address(self.family, self.index)

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        """The fabric-side end of the host's veth (the host side is ``eth0``)."""
        name = f"pb-{self.name}"
        if len(name) > _IFNAMSIZ:
            raise LayoutError(f"interface name {name!r} is longer than {_IFNAMSIZ} bytes")
        return name


def host_address(family: Family, index: int) -> str:
    """The fabric address of ``<family>-sim-<index>``."""
    limit, base = (MAX_TRN2, _TRN2_BASE) if family == "trn2" else (MAX_TRN3, _TRN3_BASE)
    if not 1 <= index <= limit:
        raise LayoutError(f"{family}-sim-{index}: index out of range 1..{limit}")
    return f"{SUBNET_PREFIX}{base + index}"


def plan_hosts(count: int) -> list[SimHost]:
    """The hosts of an ``N``-host fleet: ``N - 1`` Trn2 hosts, then one Trn3 host."""
    if not 1 <= count <= MAX_HOSTS:
        raise LayoutError(f"host count must be between 1 and {MAX_HOSTS}, not {count}")
    trn2 = count - 1 if count >= 2 else 1
    hosts = [SimHost("trn2", i) for i in range(1, trn2 + 1)]
    if count >= 2:
        hosts.append(SimHost("trn3", 1))
    return hosts


def parse_host_name(name: str) -> SimHost:
    """The inverse of :attr:`SimHost.name` (raises :class:`LayoutError` on a stranger)."""
    family, sep, index = name.rpartition("-sim-")
    if not sep or family not in INSTANCE_TYPES or not index.isdigit():
        raise LayoutError(f"not a simulated host name: {name!r}")
    fam: Family = "trn2" if family == "trn2" else "trn3"
    host = SimHost(fam, int(index))
    host_address(fam, host.index)  # range check
    return host


# --------------------------------------------------------------------------- paths


def _default_repo() -> Path:
    env = os.environ.get("PREFIXBENCH_REPO")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[3]  # src/prefixbench/sim/layout.py -> repo
    if (here / "pyproject.toml").is_file():
        return here
    return Path.cwd()


@dataclass(frozen=True)
class FleetPaths:
    """Every path the harness reads or writes.

    ``state`` (default ``<repo>/.simfleet``, env ``PREFIXBENCH_SIM_STATE``) holds the
    hosts' overlays, the controller key, ``known_hosts``, ``fleet.json`` and ``www/``.
    ``cache`` (default ``~/.cache/prefixbench``, env ``PREFIXBENCH_CACHE_DIR``) holds the
    root filesystem, built once.
    """

    repo: Path
    state: Path
    cache: Path

    @classmethod
    def from_env(cls, repo: Path | None = None) -> FleetPaths:
        root = (repo or _default_repo()).resolve()
        state = os.environ.get("PREFIXBENCH_SIM_STATE")
        cache = os.environ.get("PREFIXBENCH_CACHE_DIR")
        return cls(
            repo=root,
            state=Path(state).resolve() if state else root / ".simfleet",
            cache=Path(cache).resolve() if cache else Path.home() / ".cache" / "prefixbench",
        )

    @property
    def rootfs(self) -> Path:
        return self.cache / "rootfs-bookworm"

    @property
    def rootfs_log(self) -> Path:
        return self.cache / "rootfs-bookworm.build.log"

    @property
    def www(self) -> Path:
        return self.state / "www"

    @property
    def ssh_dir(self) -> Path:
        return self.state / "ssh"

    @property
    def ssh_key(self) -> Path:
        return self.ssh_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state / "known_hosts"

    @property
    def state_file(self) -> Path:
        return self.state / "fleet.json"

    @property
    def lock_file(self) -> Path:
        return self.state / ".lock"

    @property
    def http_log(self) -> Path:
        return self.state / "http.log"

    @property
    def inventory(self) -> Path:
        return self.repo / "inventories" / "sim" / "hosts.yml"

    def host_dir(self, name: str) -> Path:
        return self.state / "hosts" / name

    def upper(self, name: str) -> Path:
        return self.host_dir(name) / "upper"

    def work(self, name: str) -> Path:
        return self.host_dir(name) / "work"

    def merged(self, name: str) -> Path:
        return self.host_dir(name) / "root"

    def console_log(self, name: str) -> Path:
        return self.host_dir(name) / "console.log"

    def host_key(self, name: str) -> Path:
        return self.host_dir(name) / "ssh_host_ed25519_key"


# --------------------------------------------------------------------------- argv


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


#: Top cgroup (in each hierarchy) under which each host's nspawn gets its own group.
CGROUP_PARENT: Final = "pbsim"

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


# --------------------------------------------------------------------------- files


def instance_json(host: SimHost) -> str:
    """Contents of :data:`INSTANCE_FILE` on ``host``."""
    return json.dumps({"instance_type": host.instance_type, "family": host.family}) + "\n"


def etc_hosts(hosts: Iterable[SimHost]) -> str:
    """``/etc/hosts`` for every host: loopback, then each fleet member by fabric address."""
    lines = [
        "# Written by prefixbench simfleet.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{FABRIC_ADDRESS}\tpbsim-fabric",
    ]
    lines += [f"{h.address}\t{h.name}" for h in hosts]
    return "\n".join(lines) + "\n"


def known_hosts(host_keys: Mapping[str, str]) -> str:
    """``known_hosts`` lines from ``{host name: public key line}``."""
    lines = []
    for name, pub in sorted(host_keys.items()):
        keytype, key = pub.split()[:2]
        lines.append(f"{name} {keytype} {key}")
    return "".join(line + "\n" for line in lines)


def inventory(
    hosts: Sequence[SimHost], paths: FleetPaths, *, ip: str = "ip", nc: str = "nc"
) -> dict[str, Any]:
    """The YAML inventory as data: ``neuron_fleet`` with children ``trn2`` and ``trn3``."""
    groups: dict[str, dict[str, Any]] = {}
    for family in INSTANCE_TYPES:
        members = {
            h.name: {
                "ansible_host": h.name,
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(paths.ssh_key),
                "ansible_ssh_common_args": shlex.join(ssh_options(h, paths, ip, nc)),
                "ansible_python_interpreter": HOST_PYTHON,
                "prefixbench_instance_type": h.instance_type,
                "prefixbench_sim_address": h.address,
            }
            for h in hosts
            if h.family == family
        }
        groups[family] = {"hosts": members}
    return {"all": {"children": {PARENT_GROUP: {"children": groups}}}}


INVENTORY_HEADER: Final = (
    "# Generated by `scripts/simfleet up`; do not edit (rewritten on every `up`,\n"
    "# removed by `down`). Group variables live in inventories/sim/group_vars/.\n"
)


def inventory_yaml(
    hosts: Sequence[SimHost], paths: FleetPaths, *, ip: str = "ip", nc: str = "nc"
) -> str:
    body = yaml.safe_dump(
        inventory(hosts, paths, ip=ip, nc=nc), sort_keys=False, default_flow_style=False, width=1000
    )
    return INVENTORY_HEADER + body
