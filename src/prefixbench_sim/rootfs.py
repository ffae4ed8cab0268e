"""The hosts' root filesystem: Debian 12 (bookworm) minbase, built once and cached.

Built with ``debootstrap`` into a temporary directory beside the cache entry, configured
there, stamped, and only then renamed into place: a half-built tree is never used.
Each host mounts it read-only as the lower layer of its own overlay.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Final

from prefixbench_sim.layout import FleetPaths
from prefixbench_sim.system import SimFleetError, mounts_under, phase, remove_tree, run, say

SUITE: Final = "bookworm"
MIRROR_ENV: Final = "PREFIXBENCH_DEBIAN_MIRROR"
DEFAULT_MIRROR: Final = "http://deb.debian.org/debian"

#: Packages beyond minbase. g++ and libpython3.11-dev let torch Inductor compile (vLLM
#: CPU starts without --enforce-eager); libnuma1 is needed by vllm._C.
INCLUDE: Final = (
    "systemd,systemd-sysv,dbus,openssh-server,python3,python3-apt,python3-venv,"
    "python3-packaging,curl,ca-certificates,gnupg,iproute2,libnuma1,g++,"
    "libpython3.11-dev,sudo"
)

#: Bump when :func:`configure` changes, so cached trees are rebuilt.
CONFIG_VERSION: Final = 1
STAMP: Final = ".prefixbench-rootfs.json"

#: Units masked in the image. The apt timers would run apt against a mirror the hosts
#: cannot reach and hold the dpkg lock while Ansible installs packages.
MASKED_UNITS: Final = (
    "apt-daily.timer",
    "apt-daily.service",
    "apt-daily-upgrade.timer",
    "apt-daily-upgrade.service",
)

SSHD_CONFIG: Final = """\
# prefixbench simulated fleet: sshd only on the host's own loopback (the controller
# comes in through `ip netns exec <ns> nc 127.0.0.1 22`), root by key only.
ListenAddress 127.0.0.1
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

SOURCES_LIST: Final = """\
# prefixbench simulated fleet host: no Debian mirror is reachable from here.
# Every Debian package the bundle needs is already in the root filesystem;
# the simulated Neuron repository is http://10.213.0.1:8080/neuron-apt.
"""

RESOLV_CONF: Final = "# prefixbench simulated fleet: no DNS; fleet names are in /etc/hosts.\n"


def stamp_data() -> dict[str, object]:
    key = f"{SUITE}|{INCLUDE}|{CONFIG_VERSION}".encode()
    return {
        "suite": SUITE,
        "include": INCLUDE,
        "config_version": CONFIG_VERSION,
        "key": hashlib.sha256(key).hexdigest()[:16],
    }


def rootfs_ready(root: Path) -> bool:
    """True when ``root`` is a complete tree built by this version of the harness."""
    try:
        data = json.loads((root / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("key") == stamp_data()["key"]


def ensure_rootfs(paths: FleetPaths, *, hosts_running: bool) -> Path:
    """Return the cached root filesystem, building it first when needed.

    Serialised by a lock in the cache directory, so two state directories sharing one
    cache never build (or clean up) at the same time.
    """
    if rootfs_ready(paths.rootfs):
        return paths.rootfs
    paths.cache.mkdir(parents=True, exist_ok=True)
    with (paths.cache / ".rootfs.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _ensure_rootfs_locked(paths, hosts_running=hosts_running)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure_rootfs_locked(paths: FleetPaths, *, hosts_running: bool) -> Path:
    root = paths.rootfs
    if rootfs_ready(root):
        return root
    if root.exists() and hosts_running:
        raise SimFleetError(
            f"the cached root filesystem {root} is out of date; run `scripts/simfleet down` "
            "first, then `up` rebuilds it"
        )
    paths.cache.mkdir(parents=True, exist_ok=True)
    for stale in paths.cache.glob(f".{root.name}.partial-*"):
        say(f"removing an interrupted build: {stale}")
        remove_tree(stale)
    tmp = paths.cache / f".{root.name}.partial-{os.getpid()}"
    mirror = os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)
    argv = ["debootstrap", "--variant=minbase", f"--include={INCLUDE}", SUITE, str(tmp), mirror]
    t0 = time.monotonic()
    with phase("building rootfs (one time, ~1.5 min)...", f"rootfs built in {root}"):
        try:
            with paths.rootfs_log.open("w", encoding="utf-8") as log:
                log.write("$ " + " ".join(argv) + "\n")
                log.flush()
                proc = run(argv, check=False, timeout=1800)
                log.write(proc.stdout)
                log.write(proc.stderr)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
                raise SimFleetError(
                    f"debootstrap failed ({'; '.join(tail)}); full log: {paths.rootfs_log}"
                )
            if mounts_under(tmp):
                raise SimFleetError(f"debootstrap left mounts under {tmp}")
            configure(tmp)
            data = {**stamp_data(), "built_s": round(time.monotonic() - t0, 1), "mirror": mirror}
            (tmp / STAMP).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            if root.exists():
                old = paths.cache / f".{root.name}.old-{os.getpid()}"
                root.rename(old)
                tmp.rename(root)
                remove_tree(old)
            else:
                tmp.rename(root)
        finally:
            if tmp.exists():
                remove_tree(tmp)
    return root


def _write(root: Path, rel: str, text: str, mode: int = 0o644) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def configure(root: Path) -> None:
    """Make a fresh debootstrap tree into a host image (all file edits, no chroot)."""
    # Identity is per host: no host keys, an empty machine-id, a neutral hostname.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    _write(root, "/etc/machine-id", "", 0o444)
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.symlink_to("/etc/machine-id")
    _write(root, "/etc/hostname", "pbsim\n")
    _write(root, "/etc/ssh/sshd_config.d/prefixbench-sim.conf", SSHD_CONFIG)
    _write(root, "/etc/resolv.conf", RESOLV_CONF)
    _write(root, "/etc/default/locale", "LANG=C.UTF-8\n")
    # No reachable Debian mirror: no sources, no stale lists, no cached .debs.
    _write(root, "/etc/apt/sources.list", SOURCES_LIST)
    for pattern in ("var/lib/apt/lists/*_*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin"):
        for f in root.glob(pattern):
            f.unlink()
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to("/dev/null")
        for wants in (root / "etc/systemd/system").glob(f"*.wants/{unit}"):
            wants.unlink()
    ssh = root / "root/.ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    ssh.chmod(0o700)
    (root / "etc/prefixbench-sim").mkdir(exist_ok=True)
