"""The server unit's sandbox: what it grants the Neuron runtime, what it confines, each
directive with its reason, by level; the unit's PATH, library path and limits.

``vllm_service_sandbox`` picks the level:

* ``aws`` (the default, the level for a first start): the unit runs the workload as AWS
  runs it. AWS starts this very ``vllm serve`` in its container with ``--cap-add
  SYS_ADMIN --cap-add IPC_LOCK`` (aws-neuron/aws-neuron-sdk at v2.31.1 and v2.32.0,
  deploy/environments/quickstart-deploy-dlc.rst, "Step 2"), and the image sets
  ``LD_LIBRARY_PATH``, ``/opt/aws/neuron/lib`` first, and at 2.32 the EFA libraries
  after it (aws-neuron/deep-learning-containers at each release's tag,
  vllm/inference/<plugin version>/Dockerfile.neuronx; the directories are the host's
  release manifest's ``server.library_path``): the unit grants both capabilities
  (:data:`NEURON_GRANTS`), ``LimitMEMLOCK=infinity`` and that library path, and keeps only
  the confinement a container has too (read-only kernel tunables, cgroups, ...).
* ``strict``: adds what reaches into the runtime's own needs (its devices, system calls,
  namespaces, TCP). Allowed on a host only once ``prefixbench doctor`` has proven it
  there: the doctor writes its proof on the host (:func:`proof_record`) and the deploy
  refuses a strict unit without it (:func:`proof_problem`).
* ``off``: no confinement; the grants stay (without them the runtime cannot start).

``prefixbench doctor`` runs its probe under exactly these lines (one source: the
``grants`` and ``hardening`` of prefixbench.servers.server.unit_spec, which the unit
template prints too) and names the directive a failure comes from
(prefixbench.hosts.doctor).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class Directive:
    """One directive of the server unit, with why it is there."""

    line: str
    reason: str
    #: The loosest sandbox level that sets it: "aws" (aws and strict) or "strict" only.
    level: str = "aws"
    #: Where the fact it rests on is published ("" for the bundle's own choice).
    source: str = ""

    @property
    def key(self) -> str:
        return self.line.split("=", 1)[0]


#: Sandbox levels (``vllm_service_sandbox``), loosest confinement last.
SANDBOX_LEVELS: Final = ("aws", "strict", "off")
#: The level a host runs before the doctor has proven a stricter one there.
FIRST_START_LEVEL: Final = "aws"
#: The levels that need the doctor's proof on the host before a deploy uses them.
PROVEN_LEVELS: Final = ("strict",)

_QUICKSTART: Final = ("aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0 "
                      "deploy/environments/quickstart-deploy-dlc.rst (docker run ... "
                      "--cap-add SYS_ADMIN --cap-add IPC_LOCK)")
#: The capabilities AWS's container adds for the Neuron runtime (:data:`_QUICKSTART`).
NEURON_CAPABILITIES: Final = ("CAP_IPC_LOCK", "CAP_SYS_ADMIN")

#: What the Neuron runtime is granted at every level: AWS grants it, and a systemd
#: service gets none of it otherwise (no capability for a non-root user; limits from
#: systemd's DefaultLimit*, since a service does not go through pam_limits, so
#: /etc/security/limits.d, where a login session's limits are raised, does not apply:
#: systemd.exec(5), "Process Properties").
NEURON_GRANTS: Final = (
    Directive("AmbientCapabilities=" + " ".join(NEURON_CAPABILITIES),
              "the capabilities AWS's container adds for the Neuron runtime: IPC_LOCK to "
              "pin (mlock) its host memory, SYS_ADMIN as AWS grants it",
              source=_QUICKSTART),
    Directive("LimitMEMLOCK=infinity",
              "the runtime pins host memory; a service's locked-memory limit is "
              "systemd's DefaultLimitMEMLOCK (8 MiB), not limits.d's; CAP_IPC_LOCK lifts "
              "it (mlock(2)), this keeps the limit out of the way at a level without it",
              source=_QUICKSTART),
)
def grants(platform: str) -> list[Directive]:
    """The unit's grants on ``platform`` (every level): none for a CPU server."""
    return list(NEURON_GRANTS) if platform == "neuron" else []


def library_path(platform: str, directories: Sequence[str]) -> str:
    """The unit's LD_LIBRARY_PATH on ``platform`` ("" for none): on Neuron, the host's
    release's ``server.library_path`` (``directories``) joined, where libnrt is
    (``/opt/aws/neuron/lib``, aws-neuron/aws-neuron-sdk@v2.32.0
    neuron-runtime/guides/nrt-developer-guide.rst) and what else AWS's vLLM image of that
    release puts on it. A CPU server gets none."""
    if platform != "neuron":
        return ""
    if not directories:
        raise ValueError("the host's Neuron release names no server.library_path: the "
                         "unit cannot say where libnrt is (fix the release's manifest)")
    return ":".join(directories)


#: Measured to work for vLLM on CPU under systemd (REFERENCE.md: exposure 1.1 with
#: ``systemd-analyze security``). MemoryDenyWriteExecute breaks oneDNN's JIT and
#: ProcSubset=pid hides /proc/meminfo, so neither is set. Those at level "aws" are what
#: a (non-privileged) container confines too: read-only /sys and /proc/sys, no kernel
#: modules, logs, clock or host name, no set-user-id.
_SANDBOX: Final = (
    Directive("NoNewPrivileges=yes", "the server never needs to gain privileges (ambient "
              "capabilities are kept across exec)"),
    Directive("ProtectSystem=strict", "the file system is read-only but for the unit's "
              "state, cache and runtime directories"),
    Directive("ProtectHome=yes", "no user's home directory is the server's business"),
    Directive("PrivateTmp=yes", "a /tmp of its own: no other process sees its files"),
    Directive("ProtectKernelTunables=yes", "/proc/sys and /sys are read-only (as in a "
              "container)"),
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
    Directive("SystemCallArchitectures=native", "native system calls only"),
    Directive("SystemCallFilter=@system-service", "the system calls of a service; what "
              "the runtime does with SYS_ADMIN may fall outside that set", "strict"),
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
_NEURON_CONFINEMENT: Final = (
    Directive("CapabilityBoundingSet=" + " ".join(NEURON_CAPABILITIES),
              "no capability beyond the two AWS's container adds", source=_QUICKSTART),
    Directive("DevicePolicy=closed", "only the devices listed next, and the pseudo "
              "devices, can be opened (a container gets the --device nodes it is given)",
              "strict"),
    # The Neuron driver registers a "neuron" character-device class.
    Directive("DeviceAllow=char-neuron rw", "the Neuron devices (/dev/neuron*)", "strict"),
)
_CPU_CONFINEMENT: Final = (
    Directive("CapabilityBoundingSet=", "no capabilities at all"),
    Directive("PrivateDevices=yes", "a CPU server needs no device"),
    Directive("DevicePolicy=closed", "no device beyond the pseudo devices"),
    Directive("PrivateUsers=yes", "a user namespace of its own", "strict"),
)


def check_level(level: str) -> str:
    """``level`` when it is one of :data:`SANDBOX_LEVELS`; ValueError otherwise."""
    if level not in SANDBOX_LEVELS:
        raise ValueError(f"vllm_service_sandbox must be one of {', '.join(SANDBOX_LEVELS)}, "
                         f"not {level!r}")
    return level


def sandbox(platform: str, *, loopback_only: bool = True,
            level: str = FIRST_START_LEVEL) -> list[Directive]:
    """The unit's confinement directives at ``level`` (one of :data:`SANDBOX_LEVELS`);
    the grants are :func:`grants`.

    With the API on loopback, the kernel enforces that the server reaches no other
    address where systemd can attach its cgroup BPF filter (cgroup v2; the simulated
    hosts cannot, so there the bind addresses are what keeps it local).
    """
    if check_level(level) == "off":
        return []
    every = list(_SANDBOX)
    if loopback_only:
        every += _LOOPBACK_ONLY
    every += _NEURON_CONFINEMENT if platform == "neuron" else _CPU_CONFINEMENT
    return [d for d in every if level == "strict" or d.level == "aws"]


def hardening(platform: str, *, loopback_only: bool = True,
              level: str = FIRST_START_LEVEL) -> list[str]:
    """The confinement directives as the unit's lines."""
    return [d.line for d in sandbox(platform, loopback_only=loopback_only, level=level)]


def levels_without(line: str) -> list[str]:
    """The sandbox levels whose units never set ``line``, on any platform."""
    return [level for level in SANDBOX_LEVELS
            if not any(line == d.line for platform in ("neuron", "cpu")
                       for d in sandbox(platform, level=level))]


def level_line(level: str, platform: str, ld_library_path: str = "") -> str:
    """Which sandbox level a host's units use, and why (the plan's line);
    ``ld_library_path`` is the unit's (:func:`library_path`), "" while the host's release
    is not read yet."""
    path = (f"LD_LIBRARY_PATH={ld_library_path}" if ld_library_path else
            "the LD_LIBRARY_PATH of the host's release (read from the host)")
    granted = ("; grants " + ", ".join(d.line for d in NEURON_GRANTS)
               + f" and {path}, as AWS's container"
               if platform == "neuron" else "")
    if level == FIRST_START_LEVEL:
        why = "the level for a first start: the runtime as AWS runs it" + granted
    elif level in PROVEN_LEVELS:
        why = ("set in the inventory; deploy refuses it until `prefixbench doctor` has "
               "proven it on this host (run the doctor with this level first)" + granted)
    else:
        why = "set in the inventory: no confinement" + granted
    return f"sandbox: {level} ({why})"


#: The doctor's proof on a host that the unit's sandbox runs there (written by the
#: prefixbench_doctor module when every check passes; read before a strict deploy).
PROOF_FILE: Final = "/var/lib/prefixbench/sandbox-proof.json"


def digest(lines: Sequence[str]) -> str:
    """A short digest of a unit's grant and sandbox lines."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def proof_record(level: str, lines: Sequence[str]) -> dict[str, Any]:
    """What the doctor writes on a host once every check passed under ``lines``."""
    return {"level": level, "digest": digest(lines), "lines": list(lines)}


def proof_problem(level: str, lines: Sequence[str], proof_text: str) -> str:
    """Why a unit at ``level`` with ``lines`` may not be deployed on a host whose proof
    file holds ``proof_text`` ("" for none); "" when it may."""
    if level not in PROVEN_LEVELS:
        return ""
    again = (f"run `prefixbench doctor -e vllm_service_sandbox={level}` for this host "
             f"first, or set vllm_service_sandbox: {FIRST_START_LEVEL}")
    try:
        proof = json.loads(proof_text) if proof_text.strip() else None
    except ValueError:
        proof = None
    if not isinstance(proof, Mapping):
        return f"vllm_service_sandbox: {level} is not proven on this host: {again}"
    if proof.get("digest") != digest(lines):
        return (f"vllm_service_sandbox: {level}: the doctor proved other directives on this "
                f"host (level {proof.get('level')!r}) than this unit's: {again}")
    return ""

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
