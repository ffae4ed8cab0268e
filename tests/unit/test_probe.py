"""library/prefixbench_probe.py waits on the host: one round trip covers many looks, and
it returns at the first one the controller must see (healthy, failed, restarted)."""

from __future__ import annotations

import http.server
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from module_runner import run_module


class _Health(http.server.BaseHTTPRequestHandler):
    """503 for the first ``starting`` requests, then 200."""

    starting: ClassVar[int] = 0
    seen: ClassVar[int] = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        self.send_response(503 if type(self).seen <= self.starting else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def health_url() -> Iterator[str]:
    _Health.seen = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health"
    server.shutdown()


@pytest.fixture
def unit_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A test double of systemctl reading ActiveState and NRestarts from files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (state / "active").write_text("active")
    (state / "restarts").write_text("0")
    (state / "started_us").write_text("0")
    (bin_dir / "systemctl").write_text(
        f"#!/bin/sh\necho ActiveState=$(cat {state}/active)\n"
        f"echo NRestarts=$(cat {state}/restarts)\n"
        f"echo ExecMainStartTimestampMonotonic=$(cat {state}/started_us)\n")
    (bin_dir / "journalctl").write_text("#!/bin/sh\necho 'INFO: Application startup'\n")
    for tool in ("systemctl", "journalctl"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def _probe(url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           **args: Any) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    out = run_module("prefixbench_probe", {"unit": "vllm-cached.service", "url": url,
                                           "poll": 0.1, **args}, monkeypatch, capsys)
    return out, time.monotonic() - start


def test_one_probe_waits_on_the_host_until_the_server_answers(
        health_url: str, unit_state: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _Health.starting = 5
    out, took = _probe(health_url, monkeypatch, capsys, wait=10)
    assert (out["http_status"], out["active_state"]) == (200, "active")
    assert _Health.seen == 6 and took < 5  # six looks in one trip, back at the first 200
    assert out["journal"] == ["INFO: Application startup"]


def test_without_wait_it_is_one_look(health_url: str, unit_state: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _Health.starting = 100
    out, _ = _probe(health_url, monkeypatch, capsys)
    assert out["http_status"] == 503 and _Health.seen == 1


def test_a_failed_or_restarted_unit_returns_at_once_and_a_slow_one_at_the_deadline(
        health_url: str, unit_state: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _Health.starting = 10_000
    (unit_state / "active").write_text("failed")
    out, took = _probe(health_url, monkeypatch, capsys, wait=30)
    assert out["active_state"] == "failed" and took < 5
    (unit_state / "active").write_text("activating")
    out, took = _probe(health_url, monkeypatch, capsys, wait=1)
    assert out["active_state"] == "activating" and 1 <= took < 10  # waited, then returned
    flip = threading.Timer(0.5, lambda: (unit_state / "restarts").write_text("1"))
    flip.start()
    out, took = _probe(health_url, monkeypatch, capsys, wait=30)
    flip.join()
    assert out["n_restarts"] == 1 and took < 10  # a restart is news for the controller


def test_it_says_how_long_ago_the_unit_started_on_the_hosts_monotonic_clock(
        health_url: str, unit_state: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _Health.starting = 0
    out, _ = _probe(health_url, monkeypatch, capsys)
    assert out["since_start_s"] is None  # 0: systemd has no start time (never ran)
    (unit_state / "started_us").write_text(str(int((time.monotonic() - 42.0) * 1e6)))
    out, _ = _probe(health_url, monkeypatch, capsys)
    assert 42.0 <= out["since_start_s"] < 47.0
