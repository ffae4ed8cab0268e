"""The server unit's sandbox: each systemd directive with its reason, by level, and the
unit's PATH and open-files limit.

``vllm_service_sandbox`` picks the level: ``strict`` (every directive), ``relaxed``
(without those that reach into the Neuron runtime's devices, TCP, system calls and
namespaces), ``off``. ``prefixbench doctor`` runs its probe under exactly these
directives and names the one a failing check comes from (prefixbench.hosts.doctor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Directive:
    """One sandbox directive of the server unit, with why it is there."""

    line: str
    reason: str
    #: The strictest sandbox level that still sets it: "strict" only, or "relaxed" too.
    level: str = "relaxed"

    @property
    def key(self) -> str:
        return self.line.split("=", 1)[0]


#: Sandbox levels (``vllm_service_sandbox``): ``strict`` sets every directive below,
#: ``relaxed`` drops those that reach into the Neuron runtime's own needs (its devices,
#: its TCP root communicator, its system calls, user namespaces), ``off`` sets none.
SANDBOX_LEVELS: Final = ("strict", "relaxed", "off")

#: Measured to work for vLLM on CPU under systemd (REFERENCE.md: exposure 1.1 with
#: ``systemd-analyze security``). MemoryDenyWriteExecute breaks oneDNN's JIT and
#: ProcSubset=pid hides /proc/meminfo, so neither is set. Not yet run on a Neuron host:
#: ``prefixbench doctor`` runs its checks under exactly these directives and names the
#: one a failure comes from.
_SANDBOX: Final = (
    Directive("NoNewPrivileges=yes", "the server never needs to gain privileges"),
    Directive("ProtectSystem=strict", "the file system is read-only but for the unit's "
              "state, cache and runtime directories"),
    Directive("ProtectHome=yes", "no user's home directory is the server's business"),
    Directive("PrivateTmp=yes", "a /tmp of its own: no other process sees its files"),
    Directive("ProtectKernelTunables=yes", "/proc/sys and /sys are read-only"),
    Directive("ProtectKernelModules=yes", "it cannot load kernel modules (the Neuron "
              "driver is loaded by the system)"),
    Directive("ProtectKernelLogs=yes", "no access to the kernel log buffer"),
    Directive("ProtectControlGroups=yes", "the cgroup tree is read-only"),
    Directive("ProtectClock=yes", "it cannot set the clock"),
    Directive("ProtectHostname=yes", "it cannot change the host name"),
    Directive("RestrictNamespaces=yes", "no new namespaces (torch and vLLM create none)",
              "strict"),
    Directive("RestrictSUIDSGID=yes", "no set-user-id files"),
    Directive("RestrictRealtime=yes", "no realtime scheduling"),
    Directive("LockPersonality=yes", "the execution domain is fixed"),
    Directive("CapabilityBoundingSet=", "no capabilities at all"),
    Directive("SystemCallArchitectures=native", "native system calls only"),
    Directive("SystemCallFilter=@system-service", "the system calls of a service; the "
              "Neuron runtime's ioctl/mmap use is in that set but was not run here",
              "strict"),
    Directive("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
              "the socket families HTTP, ZeroMQ and the runtime's netlink queries use",
              "strict"),
    Directive("ProtectProc=invisible", "other users' processes are hidden"),
    Directive("UMask=0027", "files it writes are not world-readable"),
    Directive("RemoveIPC=yes", "its System V IPC objects go with it"),
)
#: Directives by platform and exposure (see :func:`sandbox`).
_LOOPBACK_ONLY: Final = (
    Directive("IPAddressDeny=any", "with the API on loopback the server has no business "
              "with any other address; the Neuron runtime's root communicator "
              "(NEURON_RT_ROOT_COMM_ID, TCP) is local on one host", "strict"),
    Directive("IPAddressAllow=localhost", "loopback stays open for the API and the "
              "runtime's local TCP", "strict"),
)
_NEURON_DEVICES: Final = (
    Directive("DevicePolicy=closed", "only the devices listed next, and the pseudo "
              "devices, can be opened", "strict"),
    # The Neuron driver registers a "neuron" character-device class.
    Directive("DeviceAllow=char-neuron rw", "the Neuron devices (/dev/neuron*)", "strict"),
)
_CPU_DEVICES: Final = (
    Directive("PrivateDevices=yes", "a CPU server needs no device"),
    Directive("DevicePolicy=closed", "no device beyond the pseudo devices"),
    Directive("PrivateUsers=yes", "a user namespace of its own", "strict"),
)


def sandbox(platform: str, *, loopback_only: bool = True,
            level: str = "strict") -> list[Directive]:
    """The unit's sandbox directives at ``level`` (one of :data:`SANDBOX_LEVELS`).

    With the API on loopback, the kernel enforces that the server reaches no other
    address where systemd can attach its cgroup BPF filter (cgroup v2; the simulated
    hosts cannot, so there the bind addresses are what keeps it local).
    """
    if level not in SANDBOX_LEVELS:
        raise ValueError(f"vllm_service_sandbox must be one of {', '.join(SANDBOX_LEVELS)}, "
                         f"not {level!r}")
    if level == "off":
        return []
    every = list(_SANDBOX)
    if loopback_only:
        every += _LOOPBACK_ONLY
    every += _NEURON_DEVICES if platform == "neuron" else _CPU_DEVICES
    return [d for d in every if level == "strict" or d.level == "relaxed"]


def hardening(platform: str, *, loopback_only: bool = True, level: str = "strict"
              ) -> list[str]:
    """The sandbox directives as the unit's lines."""
    return [d.line for d in sandbox(platform, loopback_only=loopback_only, level=level)]


#: AWS's advice for the open-files limit of a Neuron process (torch-neuronx
#: troubleshooting, aws-neuron-sdk at v2.31.1); vLLM's own start-up raises the soft
#: limit to the hard one, so the hard limit is what counts.
OPEN_FILES_LIMIT: Final = 65536
#: On the cpu platform (the simulated fleet): the limit its units have always run with.
#: The harness's own processes may hold a lower hard limit than 65536 (20000 where it
#: was built), which no unprivileged container can exceed, and vLLM on CPU with a tiny
#: model needs far fewer files; `prefixbench doctor` checks the limit the unit asks for.
CPU_OPEN_FILES_LIMIT: Final = 16384


def open_files_limit(platform: str) -> int:
    """The unit's LimitNOFILE on ``platform``."""
    return OPEN_FILES_LIMIT if platform == "neuron" else CPU_OPEN_FILES_LIMIT
#: Where the Neuron tools land (``/opt/aws/neuron/bin``) and the system's default PATH.
NEURON_TOOLS_BIN: Final = "/opt/aws/neuron/bin"
SYSTEM_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unit_path(vllm_executable: str) -> str:
    """The server's PATH: the venv's ``bin`` first (the Neuron plugin runs ``neuronx-cc``,
    installed there, as a subprocess), the Neuron tools, then the system's."""
    venv_bin = vllm_executable.rsplit("/", 1)[0] if "/" in vllm_executable else ""
    return ":".join(p for p in (venv_bin, NEURON_TOOLS_BIN, SYSTEM_PATH) if p)
