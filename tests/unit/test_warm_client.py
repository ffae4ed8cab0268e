"""The preloaded bench client (prefixbench.bench.warm_client), with a test double of
vLLM's entry point: the launcher hands a bench to the preloaded client, which forks it;
without one, or when the environment differs, the bench runs cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixbench.bench import client_launch, warm_client

SCRIPT = str(Path(warm_client.__file__))
HERE = str(Path(__file__).parent)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Path]:
    """A preloaded client serving the test double, on a socket in tmp_path."""
    sock = tmp_path / "client.sock"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": HERE}
    proc = subprocess.Popen([sys.executable, SCRIPT, "serve", str(sock),
                             "warm_entry_double:main"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout
        time.sleep(0.05)
    yield sock
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert not sock.exists()


def _launch(sock: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None,
            timeout: int | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    note = tmp_path / "note.json"
    # The cold path execs argv[0]: the test double as a script behind this Python.
    cold = tmp_path / "vllm"
    cold.write_text(f"#!{sys.executable}\nimport sys; sys.path.insert(0, {HERE!r})\n"
                    "import warm_entry_double; sys.exit(warm_entry_double.main())\n")
    cold.chmod(0o755)
    argv = [sys.executable, "-I", "-S", SCRIPT, "run", str(sock), "--", str(cold), *args]
    if timeout is not None:
        argv = ["timeout", "--kill-after=5", str(timeout), *argv]
    full = {"PATH": os.environ["PATH"], "PREFIXBENCH_CLIENT_FILE": str(note), **(env or {})}
    proc = subprocess.run(argv, env=full, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc, json.loads(note.read_text())


def test_a_bench_is_forked_from_the_preloaded_client(client: Path, tmp_path: Path) -> None:
    proc, note = _launch(client, tmp_path, "3", "--flag", env={"X": "42"})
    assert proc.returncode == 3, proc.stderr
    assert note["client"] == "warm" and note["cpu_s"] >= 0, note
    # The launcher's argv, environment, directory and streams; the import's own change
    # to the environment kept, as a cold client's import would make it.
    assert f"args=['3', '--flag'] cwd={tmp_path} X=42 IMPORTED=yes pgid_is_own=True" \
        in proc.stdout
    assert "to stderr" in proc.stderr


def test_an_import_time_variable_that_differs_runs_the_bench_cold(client: Path,
                                                                   tmp_path: Path) -> None:
    proc, note = _launch(client, tmp_path, "0", env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert note["client"] == "cold" and "HF_HUB_OFFLINE" in note["why"], note
    assert "args=['0']" in proc.stdout


def test_without_a_preloaded_client_the_bench_runs_cold(tmp_path: Path) -> None:
    proc, note = _launch(tmp_path / "absent.sock", tmp_path, "5")
    assert proc.returncode == 5 and note == {"client": "cold", "why": "no preloaded client"}


def test_a_timed_out_launcher_takes_its_forked_bench_down(client: Path,
                                                          tmp_path: Path) -> None:
    pid_file = tmp_path / "bench.pid"
    proc = subprocess.run(
        ["timeout", "--kill-after=5", "2", sys.executable, "-I", "-S", SCRIPT, "run",
         str(client), "--", "/bin/false", "sleep", str(pid_file)],
        env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=60,
        check=False)
    assert proc.returncode == 124, proc.stderr
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 15
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the forked bench outlived its launcher"


def test_the_childs_environment_replays_the_preloads_changes() -> None:
    launch = {"A": "1", "GONE": "x"}
    preloaded = {"A": "1", "NEW": "2"}
    assert warm_client.child_env({"A": "9", "GONE": "x", "K": "k"}, launch, preloaded) == {
        "A": "9", "K": "k", "NEW": "2"}
    assert warm_client.env_difference({"HF_X": "1", "OTHER": "a"}, {"OTHER": "b"}) == ["HF_X"]


def test_exit_statuses_read_as_a_shell_reports_them() -> None:
    assert warm_client.exit_status(3 << 8) == 3
    assert warm_client.exit_status(signal.SIGKILL) == 128 + signal.SIGKILL


def test_the_launcher_goes_before_vllm_in_the_argv() -> None:
    assert client_launch.launcher("/opt/v/bin/vllm", "cached") == (
        "/opt/v/bin/python", "-I", "-S", client_launch.HOST_SCRIPT, "run",
        "/run/prefixbench-bench-client-cached.sock", "--")
    with pytest.raises(ValueError, match="unknown configuration"):
        client_launch.unit("neither")


def test_a_client_that_died_while_starting_sends_the_bench_cold_at_once(
        tmp_path: Path) -> None:
    sock = tmp_path / "client.sock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(f"{sock}.starting").write_text(dead)
    start = time.monotonic()
    proc, note = _launch(sock, tmp_path, "0")
    assert proc.returncode == 0 and note["client"] == "cold", note
    assert time.monotonic() - start < 10, "waited for a client that is gone"


def test_a_stopped_client_exits_at_once_without_the_interpreter_shutdown(
        tmp_path: Path) -> None:
    sock, mark = tmp_path / "client.sock", tmp_path / "atexit-ran"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": HERE, "DOUBLE_ATEXIT_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, SCRIPT, "serve", str(sock),
                             "warm_entry_double:main"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert not sock.exists() and not mark.exists()
