"""Ready the machine for hosts to boot: state directories and keys, the fabric with its
artifact server, and each host's overlay, identity, keys and network.

:func:`ensure_dirs` and :func:`ensure_fabric` make what every host shares (the fabric
namespace and bridge, and the HTTP server publishing ``www/``; a server left by a
crashed run is killed first); :func:`prepare_host` mounts one host's overlay and writes
its hostname, ``/etc/hosts``, machine id, instance identity, SSH host key and the
controller's key, then wires its namespace. :func:`write_known_hosts` records the host
keys for the controller. The values come from :mod:`prefixbench_sim.layout`, the command
lines from :mod:`prefixbench_sim.cmdlines`, the files' contents from
:mod:`prefixbench_sim.hostfiles`; booting and waiting are
:class:`prefixbench_sim.fleet.Fleet`'s.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from prefixbench_sim import cmdlines, hostfiles, layout
from prefixbench_sim.discover import netns_refs
from prefixbench_sim.layout import FABRIC_NETNS, FleetPaths, SimHost
from prefixbench_sim.state import FleetState, atomic_write
from prefixbench_sim.system import SimFleetError, python_for_server, run, send, spawn

__all__ = ["ensure_dirs", "ensure_fabric", "prepare_host", "write_file", "write_known_hosts"]


def ensure_dirs(paths: FleetPaths) -> None:
    """The state, www and SSH directories, and the controller's SSH key."""
    for d in (paths.state, paths.www, paths.ssh_dir, paths.state / "hosts"):
        d.mkdir(parents=True, exist_ok=True)
    paths.ssh_dir.chmod(0o700)
    if not paths.ssh_key.exists():
        _keygen(paths.ssh_key, "prefixbench-simfleet")


def _keygen(path: Path, comment: str) -> None:
    """A new ed25519 key pair without a passphrase at ``path`` (and ``path``.pub)."""
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def ensure_fabric(paths: FleetPaths, state: FleetState) -> None:
    """The fabric namespace and bridge, and the artifact server answering on it."""
    if not Path(f"/run/netns/{FABRIC_NETNS}").exists():
        for argv in cmdlines.fabric_commands():
            run(argv)
    if state.http is not None and state.http.alive():
        return
    for ref in netns_refs(FABRIC_NETNS):  # a server from a crashed run
        send(ref, signal.SIGKILL)
    argv = cmdlines.http_server_argv(python_for_server(), paths.www)
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C.UTF-8"}
    state.http = spawn(argv, paths.http_log, env=env)
    state.save(paths.state_file)
    deadline = time.monotonic() + 15
    probe = [
        "ip",
        "netns",
        "exec",
        FABRIC_NETNS,
        "nc",
        "-z",
        "-w",
        "1",
        layout.FABRIC_ADDRESS,
        str(layout.HTTP_PORT),
    ]
    while run(probe, check=False).returncode != 0:
        if not state.http.alive() or time.monotonic() > deadline:
            raise SimFleetError(
                f"the artifact server did not start on {layout.ARTIFACT_URL}; "
                f"see {paths.http_log}"
            )
        time.sleep(0.1)


def prepare_host(paths: FleetPaths, host: SimHost, fleet: Sequence[SimHost]) -> None:
    """Overlay, identity, keys and network of a host about to boot."""
    p, name = paths, host.name
    for d in (p.upper(name), p.work(name), p.merged(name)):
        d.mkdir(parents=True, exist_ok=True)
    p.upper(name).chmod(0o755)  # the overlay's root directory takes this mode
    _keygen(p.host_key(name), f"root@{name}")
    run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            cmdlines.overlay_options(p.rootfs, p.upper(name), p.work(name)),
            str(p.merged(name)),
        ]
    )
    root = p.merged(name)
    write_file(root / "etc/hostname", f"{name}\n")
    write_file(root / "etc/hosts", hostfiles.etc_hosts(fleet))
    write_file(root / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    write_file(root / layout.INSTANCE_FILE.lstrip("/"), hostfiles.instance_json(host))
    write_file(
        root / "etc/ssh/ssh_host_ed25519_key",
        p.host_key(name).read_text(encoding="ascii"),
        0o600,
    )
    write_file(
        root / "etc/ssh/ssh_host_ed25519_key.pub",
        p.host_key(name).with_suffix(".pub").read_text(encoding="ascii"),
    )
    write_file(
        root / "root/.ssh/authorized_keys",
        p.ssh_key.with_suffix(".pub").read_text(encoding="ascii"),
        0o600,
    )
    for argv in cmdlines.host_net_commands(host):
        run(argv)


def write_known_hosts(paths: FleetPaths, hosts: Sequence[SimHost]) -> None:
    """``known_hosts`` for the controller: the host key of each host that has one."""
    keys = {}
    for h in hosts:
        pub = paths.host_key(h.name).with_suffix(".pub")
        if pub.exists():
            keys[h.name] = pub.read_text(encoding="ascii")
    atomic_write(paths.known_hosts, hostfiles.known_hosts(keys))


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Write a file inside a host's tree (replacing a symlink, never following it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
