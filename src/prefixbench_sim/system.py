"""Small helpers over the machine: commands, processes, mounts, host tools, progress.

Processes are identified by :class:`ProcRef` (PID plus kernel start time), so a PID the
harness recorded is never confused with an unrelated process that reused it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final


class SimFleetError(RuntimeError):
    """A failure with one actionable message (printed as ``simfleet: error: ...``)."""


def say(message: str) -> None:
    """One progress line."""
    print(f"simfleet: {message}", flush=True)


@contextmanager
def phase(start: str, done: str) -> Iterator[None]:
    """Print ``start``, run the block, print ``done (N.N s)``."""
    say(start)
    t0 = time.monotonic()
    yield
    say(f"{done} ({time.monotonic() - t0:.1f} s)")


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    timeout: float | None = 120,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``, capture its output; on failure raise one line with its stderr."""
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            input=input_text,
            stdin=subprocess.DEVNULL if input_text is None else None,
            check=False,
        )
    except FileNotFoundError as exc:
        raise SimFleetError(
            f"{argv[0]} not found; run `scripts/simfleet setup` to install the host tools"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise SimFleetError(f"`{' '.join(argv)}` timed out after {timeout} s") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        last = err[-1] if err else f"exit status {proc.returncode}"
        raise SimFleetError(f"`{' '.join(argv)}` failed: {last}")
    return proc


# --------------------------------------------------------------------------- host tools

#: command -> Debian package providing it.
HOST_TOOLS: Final[Mapping[str, str]] = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "nc": "netcat-openbsd",
    "socat": "socat",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "mount": "mount",
}


def missing_host_tools() -> list[str]:
    """Debian packages to install for the commands the harness needs."""
    return sorted({pkg for cmd, pkg in HOST_TOOLS.items() if shutil.which(cmd) is None})


def ensure_host_tools() -> None:
    """Install systemd-container, debootstrap, netcat-openbsd, socat (...) when missing."""
    missing = missing_host_tools()
    if not missing:
        return
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if os.geteuid() != 0:
        raise SimFleetError(f"missing host tools; as root run: {' '.join(cmd)}")
    with phase(f"installing host tools: {' '.join(missing)}...", "host tools installed"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if run(cmd, check=False, timeout=900, env=env).returncode != 0:
            run(["apt-get", "update"], timeout=900, env=env)
            run(cmd, timeout=900, env=env)
    still = missing_host_tools()
    if still:
        raise SimFleetError(f"still missing after apt-get install: {' '.join(still)}")


def require_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise SimFleetError(
            f"`simfleet {verb}` must run as root (network namespaces, overlay mounts, "
            f"systemd-nspawn); rerun as root, e.g. `sudo scripts/simfleet {verb}`"
        )


def require_overlayfs() -> None:
    text = Path("/proc/filesystems").read_text(encoding="ascii", errors="replace")
    if "overlay" not in text.split():
        run(["modprobe", "overlay"], check=False)
        text = Path("/proc/filesystems").read_text(encoding="ascii", errors="replace")
        if "overlay" not in text.split():
            raise SimFleetError("this kernel has no overlayfs (`modprobe overlay` failed)")


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ProcRef:
    """A process as the harness recorded it: PID and start time (clock ticks)."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcRef | None:
        st = proc_stat(pid)
        return None if st is None else cls(pid, st[1])

    def alive(self) -> bool:
        """True when this very process exists and is not a zombie."""
        st = proc_stat(self.pid)
        return st is not None and st[1] == self.start and st[0] not in {"Z", "X"}

    def to_json(self) -> dict[str, int]:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, data: object) -> ProcRef | None:
        if isinstance(data, dict):
            pid, start = data.get("pid"), data.get("start")
            if isinstance(pid, int) and isinstance(start, int):
                return cls(pid, start)
        return None


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, starttime)`` of ``pid`` from ``/proc/<pid>/stat``, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def ns_pid1(pid: int) -> bool:
    """True when ``pid`` is PID 1 of a child PID namespace (a container's init)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ids = line.split()[1:]
            return len(ids) >= 2 and ids[-1] == "1"
    return False


def pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` in KiB (0 when unreadable)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def send(ref: ProcRef, sig: int) -> None:
    """Signal ``ref`` if (and only if) it is still that process."""
    if ref.alive():
        with suppress(ProcessLookupError):
            os.kill(ref.pid, sig)


def wait_gone(refs: Sequence[ProcRef], timeout: float) -> list[ProcRef]:
    """Wait until none of ``refs`` is alive; return the ones still alive at the deadline."""
    deadline = time.monotonic() + timeout
    left = [r for r in refs if r.alive()]
    while left and time.monotonic() < deadline:
        reap_children()
        time.sleep(0.1)
        left = [r for r in left if r.alive()]
    return left


#: Children this Python process started (so it can reap them, no zombies in pytest).
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def reap_children() -> None:
    for pid, child in list(CHILDREN.items()):
        if child.poll() is not None:
            del CHILDREN[pid]


def spawn(argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> ProcRef:
    """Start ``argv`` in the background, detached, stdout+stderr to ``log``."""
    with log.open("wb") as out:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    CHILDREN[child.pid] = child
    ref = ProcRef.of(child.pid)
    if ref is None:
        raise SimFleetError(f"`{argv[0]}` exited at once; see {log}")
    return ref


SIGRTMIN_POWEROFF: Final = signal.SIGRTMIN + 4  # systemd: start poweroff.target


# --------------------------------------------------------------------------- mounts


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root.resolve())
    found: list[Path] = []
    with Path("/proc/self/mountinfo").open(encoding="utf-8", errors="replace") as f:
        for line in f:
            point = _unescape(line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def cgroup_mounts() -> list[Path]:
    """Hierarchies where a container's systemd keeps its tree: name=systemd and cgroup2.

    With ``--keep-unit`` and no systemd on the machine, every nspawn would otherwise use
    the cgroup it was started in, so all containers' systemd would share (and fight over)
    one ``payload/system.slice``: units then fail at random with ``219/CGROUP``.
    """
    found: list[Path] = []
    with Path("/proc/self/mountinfo").open(encoding="utf-8", errors="replace") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fields, tail = pre.split(), post.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            fstype, superopts = tail[0], tail[2].split(",")
            if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in superopts):
                found.append(Path(_unescape(fields[4])))
    return found


def remove_cgroup(path: Path) -> None:
    """rmdir a cgroup and its children, deepest first (only empty cgroups go away)."""
    if not path.is_dir():
        return
    for dirpath, _dirs, _files in sorted(os.walk(path), key=lambda w: -len(Path(w[0]).parts)):
        with suppress(OSError):
            Path(dirpath).rmdir()


def unmount_all(root: Path) -> None:
    """Unmount everything at or below ``root`` (lazily when busy)."""
    for point in mounts_under(root):
        if run(["umount", str(point)], check=False).returncode != 0:
            run(["umount", "-l", str(point)], check=False)
    left = mounts_under(root)
    if left:
        raise SimFleetError(f"could not unmount {left[0]}; see `findmnt -R {root}`")


def remove_tree(path: Path) -> None:
    """``rm -rf`` that never crosses into a mount (run :func:`unmount_all` first)."""
    if path.exists() or path.is_symlink():
        unmount_all(path)
        run(["rm", "-rf", "--one-file-system", "--", str(path)], timeout=600)


def python_for_server() -> str:
    """An interpreter for the artifact server: this one (any Python 3 has http.server)."""
    return sys.executable or shutil.which("python3") or "python3"
