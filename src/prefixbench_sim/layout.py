"""The simulated fleet's pure parts: names, instance types, addresses and paths.

Nothing here touches the machine. The command lines built from these values are
:mod:`prefixbench_sim.cmdlines`, the files written from them (``/etc/hosts``,
``known_hosts``, the inventory) :mod:`prefixbench_sim.hostfiles`;
:mod:`prefixbench_sim.fleet` turns them into namespaces, mounts and processes. The unit
tests check them directly.

Naming: ``up N`` makes ``N - 1`` Trn2 hosts ``trn2-sim-1 .. trn2-sim-(N-1)`` and one Trn3
host ``trn3-sim-1`` (with ``N == 1``, just ``trn2-sim-1``). A host keeps its name and
its address when the fleet grows or shrinks, so ``up 3`` then ``up 4`` only adds
``trn2-sim-3``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

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

#: Where each host finds its simulated instance identity (read by the simulated Neuron
#: tools, e.g. ``neuron-ls -j``).
INSTANCE_FILE: Final = "/etc/prefixbench-sim/instance.json"

#: The devices each simulated host has: what its ``neuron-ls`` prints. Written here, not
#: read from the product's instance catalogue (src/prefixbench/data/instance_types.yml),
#: so that the device checks (provision's, the doctor's), which read that catalogue,
#: compare two sources on the simulated fleet too. trn2: AWS's figures for a
#: trn2.48xlarge (aws-neuron/aws-neuron-sdk@v2.32.0 about-neuron/arch/neuron-hardware/
#: trn2-arch.rst: 16 Trainium2 chips, 192 vCPUs; trainium2.rst: 8 NeuronCore-v3 and
#: 96 GiB per chip; tools/neuron-sys-tools/neuron-ls.rst: 4 cores per device at LNC 2).
#: trn3: made up, Trainium3's per-chip figures (trainium3.rst: 8 NeuronCore-v4, 144 GiB)
#: on a host of that shape.
SIM_HARDWARE: Final[Mapping[Family, Mapping[str, int]]] = {
    "trn2": {"devices": 16, "physical_cores_per_device": 8, "default_lnc": 2,
             "device_memory_gib": 96, "vcpus": 192},
    "trn3": {"devices": 16, "physical_cores_per_device": 8, "default_lnc": 2,
             "device_memory_gib": 144, "vcpus": 192},
}

#: The fabric: one bridge in its own namespace; hosts hang off it by veth.
NETNS_PREFIX: Final = "pbsim-"
FABRIC_NETNS: Final = "pbsim-fabric"
BRIDGE: Final = "pbsim-br0"
SUBNET_PREFIX: Final = "10.213.0."
PREFIX_LEN: Final = 24
FABRIC_ADDRESS: Final = "10.213.0.1"
HTTP_PORT: Final = 8080
ARTIFACT_URL: Final = f"http://{FABRIC_ADDRESS}:{HTTP_PORT}/"

#: Top cgroup (in each hierarchy) under which each host's nspawn gets its own group.
CGROUP_PARENT: Final = "pbsim"

# Address plan: trn2-sim-i -> .(10+i), trn3-sim-j -> .(200+j). Stable per name.
_TRN2_BASE: Final = 10
_TRN3_BASE: Final = 200
MAX_TRN2: Final = 189  # .11 .. .199
MAX_TRN3: Final = 54  # .201 .. .254
MAX_HOSTS: Final = MAX_TRN2 + 1

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
    here = Path(__file__).resolve().parents[2]  # src/prefixbench_sim/layout.py -> repo
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
