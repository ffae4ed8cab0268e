"""Bring the simulated fleet up, down, and report on it.

``up N`` makes sure the cached root filesystem exists, the fabric namespace with its
bridge and artifact server is there, and exactly the hosts of :func:`plan_hosts(N)
<prefixbench_sim.layout.plan_hosts>` are booted (hosts already up are left alone), then
writes ``known_hosts`` and ``inventories/sim/hosts.yml``. ``down`` powers every host
off, kills what is left only by recorded PIDs or by membership of the harness's own
``pbsim-*`` namespaces, unmounts the overlays and deletes the namespaces.

:class:`Fleet` is the entry point and drives the steps, under the state directory's
lock: :mod:`prefixbench_sim.bootprep` readies the machine and each host before it boots,
:mod:`prefixbench_sim.teardown` removes hosts and the fabric, :mod:`prefixbench_sim.state`
records the processes, :mod:`prefixbench_sim.discover` finds what is on the machine.
The values come from :mod:`prefixbench_sim.layout`, the command lines from
:mod:`prefixbench_sim.cmdlines`, the files' contents from :mod:`prefixbench_sim.hostfiles`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from prefixbench_sim import cmdlines, hostfiles, layout
from prefixbench_sim.bootprep import (
    ensure_dirs,
    ensure_fabric,
    prepare_host,
    write_file,
    write_known_hosts,
)
from prefixbench_sim.discover import (
    host_pid1,
    list_netns,
    maybe_host,
    netns_pids,
    sorted_hosts,
)
from prefixbench_sim.layout import FABRIC_NETNS, NETNS_PREFIX, FleetPaths, SimHost
from prefixbench_sim.rootfs import ensure_rootfs
from prefixbench_sim.state import FleetState, atomic_write
from prefixbench_sim.status import HostStatus, parse_units
from prefixbench_sim.system import (
    CHILDREN,
    ProcRef,
    SimFleetError,
    cgroup_mounts,
    ensure_host_tools,
    mounts_under,
    phase,
    pss_kib,
    require_overlayfs,
    require_root,
    run,
    say,
    spawn,
)
from prefixbench_sim.teardown import stop_hosts, teardown

BOOT_TIMEOUT_ENV: Final = "PREFIXBENCH_SIM_BOOT_TIMEOUT"
DEFAULT_BOOT_TIMEOUT: Final = 90.0


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
        return sorted_hosts(maybe_host(n) for n in self.state().hosts)

    def pid1(self, host: SimHost) -> int | None:
        """Host-side PID of the host's systemd (PID 1 inside it), if it is running."""
        return host_pid1(host)

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
        return run(cmdlines.nsenter_argv(pid, argv), check=False, timeout=timeout)

    def ssh(
        self, host: SimHost, argv: Sequence[str], timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` over real SSH (host key checked); never raises on status."""
        return run(
            cmdlines.ssh_argv(host, self.paths, argv, ip=self.ip, nc=self.nc),
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
        for host in sorted_hosts(maybe_host(n) for n in names):
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
                teardown(self.paths, state)
                state = FleetState()
            alive = {
                h.name
                for h in sorted_hosts(maybe_host(n) for n in state.hosts)
                if self.is_up(h, state)
            }
            ensure_rootfs(self.paths, hosts_running=bool(alive))
            ensure_dirs(self.paths)
            ensure_fabric(self.paths, state)

            wanted = {h.name for h in want}
            present = set(state.hosts) | {
                n[len(NETNS_PREFIX) :] for n in list_netns() if n != FABRIC_NETNS
            }
            surplus = sorted_hosts(maybe_host(n) for n in present - wanted)
            if surplus:
                with phase(f"removing {', '.join(h.name for h in surplus)}...", "removed"):
                    stop_hosts(self.paths, surplus, state)

            new = [h for h in want if h.name not in alive]
            if new:
                stop_hosts(self.paths, new, state)  # clear remains of a crashed earlier run
                with phase(
                    f"booting {', '.join(h.name for h in new)}...", f"{len(new)} host(s) booted"
                ):
                    nspawn = shutil.which("systemd-nspawn") or "systemd-nspawn"
                    for host in new:
                        prepare_host(self.paths, host, want)
                        cgroups = cmdlines.cgroup_dirs(cgroup_mounts(), host)
                        for d in cgroups:
                            d.mkdir(parents=True, exist_ok=True)
                        state.hosts[host.name] = spawn(
                            cmdlines.in_cgroups(
                                cgroups, cmdlines.nspawn_argv(host, self.paths, nspawn)
                            ),
                            self.paths.console_log(host.name),
                        )
                        state.save(self.paths.state_file)
                    write_known_hosts(self.paths, want)
                    self._wait_booted(new, state)
            for host in want:  # every host learns about every other one
                write_file(self.paths.merged(host.name) / "etc/hosts", hostfiles.etc_hosts(want))
            write_known_hosts(self.paths, want)
            state.save(self.paths.state_file)
            atomic_write(
                self.paths.inventory,
                hostfiles.inventory_yaml(want, self.paths, ip=self.ip, nc=self.nc),
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
            teardown(self.paths, state)
            left = self.leftovers(refs)
            if left:
                raise SimFleetError(f"down left {', '.join(left)} behind")
        say(f"down in {time.monotonic() - t0:.1f} s; nothing left")


# list_netns is re-exported: tests/integration/test_simfleet.py imports it from here.
__all__ = ["CHILDREN", "Fleet", "list_netns"]
