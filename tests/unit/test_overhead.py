"""The run-overhead figure from a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench.measure.atomic import write_json_atomic
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import BenchmarkRecord, ResultKey
from prefixbench.perf.overhead import run_overhead

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"


def record(host: str, configuration: str, workload: str) -> BenchmarkRecord:
    bench = json.loads((FIXTURE / "cached_high_overlap.json").read_text())
    return BenchmarkRecord(key=ResultKey(host, configuration, workload, 1), seed=1,
                           bundle_version="0", started_at="x", ended_at="y", bench=bench)


def test_wall_time_is_compared_with_the_slowest_host(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r1")
    for host in ("a", "b"):
        for conf in ("baseline", "cached"):
            layout.write_result(record(host, conf, "high_overlap"))
            write_json_atomic(tmp_path / "r1" / host / conf / "startup.json",
                              {"elapsed_s": 30.0 if host == "a" else 60.0})
    write_json_atomic(tmp_path / "r1" / "run.json",
                      {"run_id": "r1", "started_at": "2026-11-29T09:00:00+00:00",
                       "ended_at": "2026-11-29T09:05:00+00:00"})
    duration = json.loads((FIXTURE / "cached_high_overlap.json").read_text())["duration"]
    result = run_overhead(tmp_path / "r1")
    assert result.wall_seconds == 300
    assert result.slowest.host == "b"
    assert result.slowest.essential == pytest.approx(2 * duration + 120)
    assert result.ratio == pytest.approx(300 / (2 * duration + 120))
    assert result.lines()[-1].startswith("wall / slowest host's")


def test_unfinished_run_is_refused(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "r2" / "run.json", {"run_id": "r2", "started_at": "x"})
    with pytest.raises(ValueError, match="has not ended"):
        run_overhead(tmp_path / "r2")
