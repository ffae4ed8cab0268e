"""The bench client, started once per server instead of once per bench.

Each ``vllm bench serve`` spends 7-8 s importing vLLM, torch and transformers before it
sends a request (measured on the simulated hosts; not measured on a Trainium host),
six times per host in the tutorial. This file runs on the host, with the vLLM
virtualenv's Python and the standard library only, in two roles:

``serve SOCKET [ENTRY]``
    The *preloaded client*: imports what ``vllm bench serve`` imports (:data:`PRELOAD`)
    while the server starts, then listens on the Unix socket ``SOCKET``. For each
    request it forks a child that runs vLLM's own console-script entry point with the
    request's argv, environment, working directory and standard streams (passed over
    the socket), so the bench is the same code on the same arguments, minus the import.
    It runs as a transient systemd unit (``prefixbench_bench_client``), one per server.
    ``ENTRY``: ``module:function`` instead of the ``vllm`` console script.

``run SOCKET -- VLLM ARGS...``
    The *launcher*, put where the bench argv has ``vllm`` (inside the ``timeout`` and API
    key wrappers, which therefore work as before): it hands its argv, environment and
    streams to the preloaded client and exits with the bench's exit code. When there is
    no preloaded client, or it refuses the request (its environment differs from the
    request's in a variable read at import time), the launcher ``exec``s ``VLLM ARGS``:
    the ordinary cold bench. When the launcher dies (``timeout`` killed it), the
    preloaded client kills the bench it forked.

What the launcher did is written as JSON to ``$PREFIXBENCH_CLIENT_FILE`` when that is
set: ``{"client": "warm"|"cold", "why": ..., "cpu_s": <the bench process's CPU>}``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

#: What ``vllm bench serve`` imports on its way to the first request (vLLM's CLI
#: ``main`` imports its subcommands inside the call). Modules a vLLM version lacks are
#: skipped: the child then imports whatever is still missing, as the cold client would.
PRELOAD = (
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.openai",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.cli.benchmark.main",
    "vllm.entrypoints.cli.benchmark.serve",
    "vllm.benchmarks.serve",
    "vllm.benchmarks.datasets",
    "transformers",
)
#: Environment variables that libraries may read while they are imported: a request
#: whose values differ from the preloaded client's is run cold.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "VLLM_",
                        "TORCH", "PYTORCH_", "OMP_", "MKL_", "CUDA_", "NEURON")
#: The console script whose entry point the child calls.
ENTRY_POINT = "vllm"
#: Seconds a launcher waits for a preloaded client that is still importing.
WAIT_FOR_CLIENT = 120.0
#: Seconds an empty ``.starting`` marker (a client whose process has not written its pid
#: yet) is believed.
EMPTY_MARKER_AGE = 30.0
#: Seconds between SIGTERM and SIGKILL when a bench is abandoned.
KILL_AFTER = 10.0

_LEN = struct.Struct("!I")


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that a library may read at import time."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)}


def env_difference(ours: dict[str, str], theirs: dict[str, str]) -> list[str]:
    """Names of import-time variables set differently in the two environments."""
    a, b = import_time_env(ours), import_time_env(theirs)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def exit_status(status: int) -> int:
    """A ``waitpid`` status as a shell would report it (128 + signal when killed)."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _send(sock: socket.socket, obj: Any, fds: list[int] | None = None) -> None:
    body = json.dumps(obj).encode()
    if fds:
        socket.send_fds(sock, [b"\0"], fds)
    sock.sendall(_LEN.pack(len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("connection closed")
        out += chunk
    return out


def _recv(sock: socket.socket) -> Any:
    (size,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    return json.loads(_recv_exact(sock, size))


def load_entry_point(name: str = ENTRY_POINT) -> Callable[[], Any]:
    """The function behind console script ``name`` in this environment, or behind
    ``module:function``."""
    if ":" in name:
        module, _, function = name.partition(":")
        return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]
    found = [ep for ep in entry_points(group="console_scripts") if ep.name == name]
    if not found:
        raise LookupError(f"no console script {name!r} in this environment")
    return found[0].load()  # type: ignore[no-any-return]


# -- the preloaded client ------------------------------------------------------------

def preload(modules: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``modules``; returns the ones that loaded."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module this version lacks is not an error
            print(f"not preloaded: {name}: {exc}", file=sys.stderr, flush=True)
            continue
        loaded.append(name)
    return loaded


def _child(main: Callable[[], Any], request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the bench (never returns)."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        result = main()
        code = result if isinstance(result, int) else (0 if result is None else 1)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the bench's own crash, reported as the cold one would
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


#: The bench being run (its pid), for SIGTERM to take down with the preloaded client.
_RUNNING: dict[str, int] = {}


def child_env(request_env: dict[str, str], launch_env: dict[str, str],
              preloaded_env: dict[str, str]) -> dict[str, str]:
    """The environment the bench gets: the request's, with what the preload's imports
    changed in the client's own (``launch_env`` -> ``preloaded_env``) changed the same
    way, as the cold client's imports would have."""
    env = dict(request_env)
    for name in set(launch_env) - set(preloaded_env):
        env.pop(name, None)
    env.update({k: v for k, v in preloaded_env.items() if launch_env.get(k) != v})
    return env


def _serve_one(conn: socket.socket, listener: socket.socket, main: Callable[[], Any],
               launch_env: dict[str, str]) -> None:
    _, fds, _, _ = socket.recv_fds(conn, 1, 3)
    request = _recv(conn)
    try:
        differs = env_difference(launch_env, request["env"])
        if differs or len(fds) != 3:
            _send(conn, {"refused": ("environment differs from the preloaded client's: "
                                     + ", ".join(differs)) if differs
                         else "the launcher's streams did not arrive"})
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            conn.close()
            listener.close()
            request["env"] = child_env(request["env"], launch_env, dict(os.environ))
            _child(main, request, fds)
        _RUNNING["pid"] = pid
    finally:
        for fd in fds:
            os.close(fd)
    _send(conn, {"started": pid})
    abandoned_at = None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            _RUNNING.pop("pid", None)
            _send_quietly(conn, {"rc": exit_status(status),
                                 "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)})
            return
        readable, _, _ = select.select([conn], [], [], 0.1)
        if readable and abandoned_at is None and not conn.recv(1):
            # The launcher is gone (timeout killed it): so is the bench.
            _kill_group(pid, signal.SIGTERM)
            abandoned_at = time.monotonic()
        if abandoned_at is not None and time.monotonic() - abandoned_at > KILL_AFTER:
            _kill_group(pid, signal.SIGKILL)


def _send_quietly(conn: socket.socket, obj: Any) -> None:
    with contextlib.suppress(OSError):
        _send(conn, obj)


def serve(path: str, entry: str = ENTRY_POINT) -> int:
    """Preload, then serve requests on ``path`` one at a time until SIGTERM. While it
    imports, ``path.starting`` holds its pid (launchers wait for it)."""
    starting = Path(f"{path}.starting")
    starting.write_text(str(os.getpid()), encoding="ascii")
    launch_env = dict(os.environ)
    try:
        t0 = time.monotonic()
        loaded = preload()
        main = load_entry_point(entry)
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(tmp))
        tmp.chmod(0o600)
        listener.listen(4)
        tmp.replace(path)  # ready: a launcher that sees the socket can use it
    finally:
        starting.unlink(missing_ok=True)
    print(f"preloaded {len(loaded)} of {len(PRELOAD)} modules in "
          f"{time.monotonic() - t0:.1f} s; listening on {path}", flush=True)

    def stop(signum: int, frame: Any) -> None:
        del signum, frame
        Path(path).unlink(missing_ok=True)
        if "pid" in _RUNNING:
            _kill_group(_RUNNING["pid"], signal.SIGKILL)
        # No interpreter shutdown: with torch and vLLM loaded it took 2-2.5 s per stop,
        # and there is nothing to finalize (each bench ran in a child that has exited).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                _serve_one(conn, listener, main, launch_env)
            except (OSError, EOFError, ValueError, KeyError) as exc:
                print(f"request dropped: {exc}", file=sys.stderr, flush=True)


# -- the launcher ---------------------------------------------------------------------

def _note(record: dict[str, Any]) -> None:
    target = os.environ.get("PREFIXBENCH_CLIENT_FILE")
    if target:
        Path(target).write_text(json.dumps(record), encoding="utf-8")


def _cold(argv: list[str], why: str) -> int:
    _note({"client": "cold", "why": why})
    os.execv(argv[0], argv)  # noqa: S606 - the bench's own argv, never a shell
    return 127  # not reached


def _starting(path: str) -> bool:
    """A preloaded client is still importing: ``path.starting`` exists and its pid is
    alive (empty: its unit was just started)."""
    marker = Path(f"{path}.starting")
    try:
        text = marker.read_text(encoding="ascii").strip()
        age = time.time() - marker.stat().st_mtime
    except OSError:
        return False
    if not text:
        return age < EMPTY_MARKER_AGE
    try:
        os.kill(int(text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _connect(path: str, wait: float) -> socket.socket | None:
    """The preloaded client's socket; waits up to ``wait`` s while it is still
    importing, None when there is none."""
    deadline = time.monotonic() + wait
    while True:
        if Path(path).exists():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                return sock
            except OSError:
                sock.close()
        if not _starting(path) or time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def run(path: str, argv: list[str], wait: float = WAIT_FOR_CLIENT) -> int:
    """Run ``argv`` (vLLM's executable and its arguments) through the preloaded client,
    or cold."""
    if not argv:
        print("warm_client run: no command", file=sys.stderr)
        return 2
    sock = _connect(path, wait)
    if sock is None:
        return _cold(argv, "no preloaded client")
    with sock:
        try:
            _send(sock, {"argv": argv, "env": dict(os.environ), "cwd": str(Path.cwd())},
                  fds=[0, 1, 2])
            first = _recv(sock)
        except (OSError, EOFError, ValueError) as exc:
            return _cold(argv, f"the preloaded client did not answer: {exc}")
        if "refused" in first:
            return _cold(argv, str(first["refused"]))
        try:
            last = _recv(sock)
        except (OSError, EOFError, ValueError) as exc:
            _note({"client": "warm", "why": f"the preloaded client died: {exc}"})
            print(f"prefixbench: the preloaded bench client died during the bench: {exc}",
                  file=sys.stderr)
            return 1
    _note({"client": "warm", "why": "", "cpu_s": last.get("cpu_s")})
    return int(last["rc"])


def main(args: list[str]) -> int:
    if len(args) in (2, 3) and args[0] == "serve":
        return serve(*args[1:])
    if len(args) >= 3 and args[0] == "run" and args[2] == "--":
        return run(args[1], args[3:])
    print("usage: warm_client.py serve SOCKET [ENTRY] | run SOCKET -- VLLM ARGS...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
