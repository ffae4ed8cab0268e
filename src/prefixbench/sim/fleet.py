"""Bring the simulated fleet up, down, and report on it.

``up N`` makes sure the cached root filesystem exists, the fabric namespace with its
bridge and artifact server is there, and exactly the hosts of :func:`plan_hosts(N)
<prefixbench.sim.layout.plan_hosts>` are booted (hosts already up are left alone), then
writes ``known_hosts`` and ``inventories/sim/hosts.yml``. ``down`` powers every host
off, kills what is left only by recorded PIDs or by membership of the harness's own
``pbsim-*`` namespaces, unmounts the overlays and deletes the namespaces.

Everything that changes the machine happens here; the values come from
:mod:`prefixbench.sim.layout`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from prefixbench.sim import layout
from prefixbench.sim.layout import FABRIC_NETNS, NETNS_PREFIX, FleetPaths, SimHost
from prefixbench.sim.rootfs import ensure_rootfs
from prefixbench.sim.system import (
    CHILDREN,
    SIGRTMIN_POWEROFF,
    ProcRef,
    SimFleetError,
    cgroup_mounts,
    ensure_host_tools,
    mounts_under,
    ns_pid1,
    phase,
    pss_kib,
    python_for_server,
    reap_children,
    remove_cgroup,
    remove_tree,
    require_overlayfs,
    require_root,
    run,
    say,
    send,
    spawn,
    wait_gone,
)

BOOT_TIMEOUT_ENV: Final = "PREFIXBENCH_SIM_BOOT_TIMEOUT"
DEFAULT_BOOT_TIMEOUT: Final = 90.0
POWEROFF_TIMEOUT: Final = 30.0
STATE_VERSION: Final = 1


# --------------------------------------------------------------------------- state


@dataclass
class FleetState:
    """What ``fleet.json`` records: each host's systemd-nspawn process and the server."""

    hosts: dict[str, ProcRef | None] = field(default_factory=dict)
    http: ProcRef | None = None

    @classmethod
    def load(cls, path: Path) -> FleetState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        raw_hosts = data.get("hosts")
        hosts: dict[str, ProcRef | None] = {}
        if isinstance(raw_hosts, dict):
            for name, rec in raw_hosts.items():
                hosts[str(name)] = ProcRef.from_json(
                    rec.get("nspawn") if isinstance(rec, dict) else None
                )
        return cls(hosts=hosts, http=ProcRef.from_json(data.get("http")))

    def save(self, path: Path) -> None:
        data = {
            "version": STATE_VERSION,
            "hosts": {
                name: {"nspawn": ref.to_json() if ref else None}
                for name, ref in sorted(self.hosts.items())
            },
            "http": self.http.to_json() if self.http else None,
        }
        _atomic_write(path, json.dumps(data, indent=2) + "\n")

    def refs(self) -> list[ProcRef]:
        found = [r for r in self.hosts.values() if r is not None]
        return [*found, self.http] if self.http else found


def _atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    tmp.replace(path)


# --------------------------------------------------------------------------- status rows


@dataclass(frozen=True)
class HostStatus:
    """One line of ``simfleet status``."""

    name: str
    address: str
    group: str
    instance_type: str
    running: bool | None  # None: unknown (not root)
    system: str
    units: tuple[tuple[str, str], ...] = ()
    memory_mib: int | None = None


def format_status(rows: Sequence[HostStatus], server: str) -> str:
    """The ``status`` table (pure, for the unit tests)."""
    header = ("NAME", "ADDRESS", "GROUP", "INSTANCE TYPE", "UP", "SYSTEM", "MEM", "VLLM UNITS")
    table = [header]
    for r in rows:
        units = ", ".join(f"{u}={s}" for u, s in r.units) or "-"
        mem = f"{r.memory_mib}M" if r.memory_mib is not None else "-"
        table.append(
            (
                r.name,
                r.address,
                r.group,
                r.instance_type,
                "?" if r.running is None else "yes" if r.running else "no",
                r.system,
                mem,
                units,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
    if not rows:
        lines.append("(no hosts; `scripts/simfleet up 3` starts three)")
    lines.append(f"artifact server: {server}")
    return "\n".join(lines)


def parse_units(text: str) -> tuple[tuple[str, str], ...]:
    """``systemctl list-units --plain --no-legend`` lines -> ((unit, active/sub), ...)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out.append((parts[0], f"{parts[2]}/{parts[3]}"))
    return tuple(out)


# --------------------------------------------------------------------------- the fleet


def list_netns() -> list[str]:
    """Names of the harness's own network namespaces (``pbsim-*``)."""
    proc = run(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(NETNS_PREFIX))


def netns_pids(ns: str) -> list[int]:
    proc = run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


class Fleet:
    """The simulated fleet described by one state directory."""

    def __init__(self, paths: FleetPaths | None = None) -> None:
        self.paths = paths or FleetPaths.from_env()
        self.ip = shutil.which("ip") or "ip"
        self.nc = shutil.which("nc") or "nc"

    # ----------------------------------------------------------------- queries

    def state(self) -> FleetState:
        return FleetState.load(self.paths.state_file)

    def hosts(self) -> list[SimHost]:
        """The hosts recorded in the state directory, in plan order."""
        return _sorted_hosts(_maybe_host(n) for n in self.state().hosts)

    def pid1(self, host: SimHost) -> int | None:
        """Host-side PID of the host's systemd (PID 1 inside it), if it is running."""
        if not Path(f"/run/netns/{host.netns}").exists():
            return None
        for pid in netns_pids(host.netns):
            if ns_pid1(pid):
                return pid
        return None

    def is_up(self, host: SimHost, state: FleetState | None = None) -> bool:
        ref = (state or self.state()).hosts.get(host.name)
        return (
            ref is not None
            and ref.alive()
            and self.pid1(host) is not None
            and bool(mounts_under(self.paths.merged(host.name)))
        )

    def exec(
        self, host: SimHost, argv: Sequence[str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host`` via nsenter (no SSH); never raises on exit status."""
        pid = self.pid1(host)
        if pid is None:
            raise SimFleetError(f"{host.name} is not running; run `scripts/simfleet up`")
        return run(layout.nsenter_argv(pid, argv), check=False, timeout=timeout)

    def ssh(
        self, host: SimHost, argv: Sequence[str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` over real SSH (host key checked); never raises on status."""
        return run(
            layout.ssh_argv(host, self.paths, argv, ip=self.ip, nc=self.nc),
            check=False,
            timeout=timeout,
        )

    def leftovers(self, refs: Sequence[ProcRef] = ()) -> list[str]:
        """Anything of the fleet still on the machine: namespaces, mounts, live processes."""
        left = [f"network namespace {n}" for n in list_netns()]
        if self.paths.state.exists():
            left += [f"mount {m}" for m in mounts_under(self.paths.state)]
        left += [
            f"cgroup {m / layout.CGROUP_PARENT}"
            for m in cgroup_mounts()
            if (m / layout.CGROUP_PARENT).exists()
        ]
        left += [f"process {r.pid}" for r in [*refs, *self.state().refs()] if r.alive()]
        return left

    def status(self) -> list[HostStatus]:
        rows = []
        root = os.geteuid() == 0
        state = self.state()
        names = set(state.hosts) | {
            n[len(NETNS_PREFIX) :] for n in (list_netns() if root else []) if n != FABRIC_NETNS
        }
        for host in _sorted_hosts(_maybe_host(n) for n in names):
            running = self.is_up(host, state) if root else None
            system = "?" if not root else "-"
            units: tuple[tuple[str, str], ...] = ()
            mem: int | None = None
            if running:
                system = self.exec(host, ["systemctl", "is-system-running"]).stdout.strip()
                units = parse_units(
                    self.exec(
                        host,
                        [
                            "systemctl",
                            "list-units",
                            "--all",
                            "--plain",
                            "--no-legend",
                            "--no-pager",
                            "vllm-*",
                        ],
                    ).stdout
                )
                mem = sum(pss_kib(p) for p in netns_pids(host.netns)) // 1024
            rows.append(
                HostStatus(
                    host.name,
                    host.address,
                    host.family,
                    host.instance_type,
                    running,
                    system,
                    units,
                    mem,
                )
            )
        return rows

    def server_status(self) -> str:
        http = self.state().http
        if http is not None and http.alive():
            return f"{layout.ARTIFACT_URL} (pid {http.pid}) serving {self.paths.www}"
        return "not running"

    # ----------------------------------------------------------------- up

    def up(self, count: int) -> list[SimHost]:
        """Make the fleet exactly ``plan_hosts(count)``; return its hosts."""
        want = layout.plan_hosts(count)
        require_root("up")
        ensure_host_tools()
        require_overlayfs()
        t0 = time.monotonic()
        with self._locked():
            state = self.state()
            if not Path(f"/run/netns/{FABRIC_NETNS}").exists() and (
                state.hosts or list_netns() or self._mounted()
            ):
                say("fabric namespace missing; clearing the previous fleet first")
                self._teardown(state)
                state = FleetState()
            alive = {
                h.name
                for h in _sorted_hosts(_maybe_host(n) for n in state.hosts)
                if self.is_up(h, state)
            }
            ensure_rootfs(self.paths, hosts_running=bool(alive))
            self._ensure_dirs()
            self._ensure_fabric(state)

            wanted = {h.name for h in want}
            present = set(state.hosts) | {
                n[len(NETNS_PREFIX) :] for n in list_netns() if n != FABRIC_NETNS
            }
            surplus = _sorted_hosts(_maybe_host(n) for n in present - wanted)
            if surplus:
                with phase(f"removing {', '.join(h.name for h in surplus)}...", "removed"):
                    self._stop_hosts(surplus, state)

            new = [h for h in want if h.name not in alive]
            if new:
                self._stop_hosts(new, state)  # clear remains of a crashed earlier run
                with phase(
                    f"booting {', '.join(h.name for h in new)}...", f"{len(new)} host(s) booted"
                ):
                    nspawn = shutil.which("systemd-nspawn") or "systemd-nspawn"
                    for host in new:
                        self._prepare(host, want)
                        cgroups = layout.cgroup_dirs(cgroup_mounts(), host)
                        for d in cgroups:
                            d.mkdir(parents=True, exist_ok=True)
                        state.hosts[host.name] = spawn(
                            layout.in_cgroups(
                                cgroups, layout.nspawn_argv(host, self.paths, nspawn)
                            ),
                            self.paths.console_log(host.name),
                        )
                        state.save(self.paths.state_file)
                    self._write_known_hosts(want)
                    self._wait_booted(new, state)
            for host in want:  # every host learns about every other one
                _write_file(self.paths.merged(host.name) / "etc/hosts", layout.etc_hosts(want))
            self._write_known_hosts(want)
            state.save(self.paths.state_file)
            _atomic_write(
                self.paths.inventory,
                layout.inventory_yaml(want, self.paths, ip=self.ip, nc=self.nc),
            )
        kept = len(want) - len(new)
        say(
            f"up {len(want)} host(s) in {time.monotonic() - t0:.1f} s "
            f"({len(new)} booted, {kept} already up); inventory: {self.paths.inventory}"
        )
        return want

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.paths.state.mkdir(parents=True, exist_ok=True)
        with self.paths.lock_file.open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say(f"waiting for another simfleet run ({self.paths.lock_file})...")
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _mounted(self) -> bool:
        return self.paths.state.exists() and bool(mounts_under(self.paths.state))

    def _ensure_dirs(self) -> None:
        for d in (self.paths.state, self.paths.www, self.paths.ssh_dir, self.paths.state / "hosts"):
            d.mkdir(parents=True, exist_ok=True)
        self.paths.ssh_dir.chmod(0o700)
        key = self.paths.ssh_key
        if not key.exists():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "prefixbench-simfleet",
                    "-f",
                    str(key),
                ]
            )

    def _ensure_fabric(self, state: FleetState) -> None:
        if not Path(f"/run/netns/{FABRIC_NETNS}").exists():
            for argv in layout.fabric_commands():
                run(argv)
        if state.http is not None and state.http.alive():
            return
        for ref in _netns_refs(FABRIC_NETNS):  # a server from a crashed run
            send(ref, signal.SIGKILL)
        argv = layout.http_server_argv(python_for_server(), self.paths.www)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C.UTF-8"}
        state.http = spawn(argv, self.paths.http_log, env=env)
        state.save(self.paths.state_file)
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
                    f"see {self.paths.http_log}"
                )
            time.sleep(0.1)

    def _prepare(self, host: SimHost, fleet: Sequence[SimHost]) -> None:
        """Overlay, identity, keys and network of a host about to boot."""
        p, name = self.paths, host.name
        for d in (p.upper(name), p.work(name), p.merged(name)):
            d.mkdir(parents=True, exist_ok=True)
        p.upper(name).chmod(0o755)  # the overlay's root directory takes this mode
        run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"root@{name}",
                "-f",
                str(p.host_key(name)),
            ]
        )
        run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                layout.overlay_options(p.rootfs, p.upper(name), p.work(name)),
                str(p.merged(name)),
            ]
        )
        root = p.merged(name)
        _write_file(root / "etc/hostname", f"{name}\n")
        _write_file(root / "etc/hosts", layout.etc_hosts(fleet))
        _write_file(root / "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
        _write_file(root / layout.INSTANCE_FILE.lstrip("/"), layout.instance_json(host))
        _write_file(
            root / "etc/ssh/ssh_host_ed25519_key",
            p.host_key(name).read_text(encoding="ascii"),
            0o600,
        )
        _write_file(
            root / "etc/ssh/ssh_host_ed25519_key.pub",
            p.host_key(name).with_suffix(".pub").read_text(encoding="ascii"),
        )
        _write_file(
            root / "root/.ssh/authorized_keys",
            p.ssh_key.with_suffix(".pub").read_text(encoding="ascii"),
            0o600,
        )
        for argv in layout.host_net_commands(host):
            run(argv)

    def _write_known_hosts(self, hosts: Sequence[SimHost]) -> None:
        keys = {}
        for h in hosts:
            pub = self.paths.host_key(h.name).with_suffix(".pub")
            if pub.exists():
                keys[h.name] = pub.read_text(encoding="ascii")
        _atomic_write(self.paths.known_hosts, layout.known_hosts(keys))

    def _wait_booted(self, hosts: Sequence[SimHost], state: FleetState) -> None:
        """Wait until each host accepts SSH and systemd has finished booting."""
        timeout = float(os.environ.get(BOOT_TIMEOUT_ENV, DEFAULT_BOOT_TIMEOUT))
        deadline = time.monotonic() + timeout
        pending = list(hosts)
        last: dict[str, str] = {}
        while pending:
            for host in list(pending):
                ref = state.hosts.get(host.name)
                if ref is None or not ref.alive():
                    raise SimFleetError(self._boot_error(host, "its systemd-nspawn exited"))
                if self.pid1(host) is None:
                    continue
                probe = run(
                    ["ip", "netns", "exec", host.netns, "nc", "-z", "-w", "1", "127.0.0.1", "22"],
                    check=False,
                )
                if probe.returncode != 0:
                    last[host.name] = "sshd not listening yet"
                    continue
                proc = self.ssh(host, ["true"], timeout=15)
                if proc.returncode == 0:
                    pending.remove(host)
                else:
                    last[host.name] = (proc.stderr.strip().splitlines() or ["ssh failed"])[-1]
            if pending and time.monotonic() > deadline:
                h = pending[0]
                raise SimFleetError(
                    self._boot_error(
                        h,
                        f"no SSH within {timeout:.0f} s (last: {last.get(h.name, 'not booted')});"
                        f" raise {BOOT_TIMEOUT_ENV} if the machine is just slow",
                    )
                )
            if pending:
                time.sleep(0.1)
        for host in hosts:
            proc = self.exec(host, ["systemctl", "is-system-running", "--wait"], timeout=timeout)
            result = proc.stdout.strip()
            if result != "running":
                failed = self.exec(host, ["systemctl", "--failed", "--plain", "--no-legend"])
                units = [line.split()[0] for line in failed.stdout.splitlines() if line]
                say(
                    f"warning: {host.name} is {result!r}; failed units: {' '.join(units) or 'none'}"
                )
                for unit in units:
                    journal = self.exec(
                        host,
                        [
                            "journalctl",
                            "-b",
                            "-u",
                            unit,
                            "-n",
                            "8",
                            "--no-pager",
                            "-q",
                            "-o",
                            "cat",
                        ],
                    )
                    for line in journal.stdout.splitlines():
                        say(f"    {unit}: {line}")

    def _boot_error(self, host: SimHost, why: str) -> str:
        log = self.paths.console_log(host.name)
        try:
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        except OSError:
            tail = []
        text = "\n".join("    " + line for line in tail)
        return f"{host.name} did not boot: {why}; console log {log} ends with:\n{text}"

    # ----------------------------------------------------------------- down

    def down(self) -> None:
        """Power every host off and remove every namespace, mount and process of the fleet."""
        require_root("down")
        t0 = time.monotonic()
        with self._locked():
            state = self.state()
            refs = state.refs()
            self._teardown(state)
            left = self.leftovers(refs)
            if left:
                raise SimFleetError(f"down left {', '.join(left)} behind")
        say(f"down in {time.monotonic() - t0:.1f} s; nothing left")

    def _teardown(self, state: FleetState) -> None:
        names = set(state.hosts)
        names |= {n[len(NETNS_PREFIX) :] for n in list_netns() if n != FABRIC_NETNS}
        hosts_dir = self.paths.state / "hosts"
        if hosts_dir.is_dir():
            names |= {d.name for d in hosts_dir.iterdir() if d.is_dir()}
        hosts = _sorted_hosts(_maybe_host(n) for n in names)
        if hosts:
            with phase(f"powering off {', '.join(h.name for h in hosts)}...", "hosts removed"):
                self._stop_hosts(hosts, state)
        # The fabric: the artifact server and anything else in the namespace.
        refs = [r for r in [state.http, *_netns_refs(FABRIC_NETNS)] if r is not None]
        for ref in refs:
            send(ref, signal.SIGTERM)
        for ref in wait_gone(refs, 5):
            send(ref, signal.SIGKILL)
        wait_gone(refs, 5)
        state.http = None
        if Path(f"/run/netns/{FABRIC_NETNS}").exists():
            run(["ip", "netns", "del", FABRIC_NETNS])
        if self.paths.state.exists():
            for point in mounts_under(self.paths.state):
                run(["umount", "-l", str(point)], check=False)
        for mount in cgroup_mounts():
            remove_cgroup(mount / layout.CGROUP_PARENT)
        self.paths.state_file.unlink(missing_ok=True)
        self.paths.known_hosts.unlink(missing_ok=True)
        self.paths.inventory.unlink(missing_ok=True)
        reap_children()

    def _stop_hosts(self, hosts: Sequence[SimHost], state: FleetState) -> None:
        """Power off, then kill leftovers, unmount, delete namespaces and host dirs."""
        refs: list[ProcRef] = []
        for host in hosts:
            ref = state.hosts.get(host.name)
            if ref is not None:
                refs.append(ref)
            pid1 = self.pid1(host)
            if pid1 is not None:
                p1 = ProcRef.of(pid1)
                if p1 is not None:
                    send(p1, SIGRTMIN_POWEROFF)
                    refs.append(p1)
        left = wait_gone(refs, POWEROFF_TIMEOUT)
        for host in hosts:  # what did not stop: recorded PIDs and our namespaces only
            left += _netns_refs(host.netns)
        for ref in left:
            send(ref, signal.SIGKILL)
        if wait_gone(left, 10):
            raise SimFleetError(
                "processes survived SIGKILL: " + " ".join(str(r.pid) for r in left if r.alive())
            )
        for host in hosts:
            if Path(f"/run/netns/{host.netns}").exists():
                run(["ip", "netns", "del", host.netns])
            remove_tree(self.paths.host_dir(host.name))
            for cgroup in layout.cgroup_dirs(cgroup_mounts(), host):
                remove_cgroup(cgroup)
            state.hosts.pop(host.name, None)
        if self.paths.state.exists():
            state.save(self.paths.state_file)
        reap_children()


def _netns_refs(ns: str) -> list[ProcRef]:
    if not Path(f"/run/netns/{ns}").exists():
        return []
    refs = (ProcRef.of(pid) for pid in netns_pids(ns))
    return [r for r in refs if r is not None]


def _sorted_hosts(hosts: Iterable[SimHost | None]) -> list[SimHost]:
    return sorted((h for h in hosts if h is not None), key=lambda h: (h.family, h.index))


def _maybe_host(name: str) -> SimHost | None:
    """The host called ``name``, or None for a stranger (never touched)."""
    try:
        return layout.parse_host_name(name)
    except layout.LayoutError:
        return None


def _write_file(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


__all__ = ["CHILDREN", "Fleet", "FleetState", "HostStatus", "format_status", "parse_units"]
