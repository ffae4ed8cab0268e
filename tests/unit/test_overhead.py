"""The run-overhead figure from a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench.measure.atomic import write_json_atomic
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import BenchmarkRecord, ResultKey
from prefixbench_perf.overhead import SETUP, run_overhead

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


def test_the_breakdown_of_a_hosts_wall_adds_up_and_names_the_waits(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r3")
    duration = json.loads((FIXTURE / "cached_high_overlap.json").read_text())["duration"]
    # 09:00:00 run start; baseline server launched 09:01:00, healthy 09:01:30; benches
    # 09:02:00-09:03:00 and 09:03:10-09:04:00; cached launched 09:04:20, healthy 09:04:40;
    # one bench 09:04:50-09:06:00; run end 09:06:30.
    plan = {"baseline": ("09:01:30", 30.0, [("09:02:00", "09:03:00"), ("09:03:10", "09:04:00")]),
            "cached": ("09:04:40", 20.0, [("09:04:50", "09:06:00")])}
    for conf, (healthy, elapsed, windows) in plan.items():
        for k, (start, end) in enumerate(windows):
            rec = record("h", conf, f"w{k}")
            layout.write_result(BenchmarkRecord(
                key=rec.key, seed=1, bundle_version="0", bench=rec.bench,
                started_at=f"2026-11-29T{start}+00:00", ended_at=f"2026-11-29T{end}+00:00"))
        write_json_atomic(tmp_path / "r3" / "h" / conf / "startup.json",
                          {"elapsed_s": elapsed, "healthy_at": f"2026-11-29T{healthy}Z"})
    write_json_atomic(tmp_path / "r3" / "run.json",
                      {"run_id": "r3", "started_at": "2026-11-29T09:00:00+00:00",
                       "ended_at": "2026-11-29T09:06:30+00:00"})
    result = run_overhead(tmp_path / "r3")
    seg = dict(result.segments)
    assert sum(seg.values()) == pytest.approx(390)
    assert seg[SETUP] == 60
    assert seg["server start-ups (essential)"] == 50
    assert seg["healthy -> first bench (waiting for the other hosts' start or publish)"] \
        == 30 + 10
    assert seg["between benches (controller tasks)"] == 10
    assert seg["between configurations (stop, compile-cache steps)"] == 20
    assert seg["benches' own durations (essential)"] == pytest.approx(3 * duration)
    assert seg["after the last bench (stop, report)"] == 30
    assert "where h's wall went:" in result.lines()


def test_each_hosts_own_wall_leaves_out_its_wait_for_a_compile_leader(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r4")
    # Host a: healthy 09:01:00, bench until 09:03:00. Host b: waited 90 s for its leader,
    # healthy 09:03:00, first bench 09:03:05 (its own client start), done 09:05:00.
    for host, healthy, start, end, waited in (("a", "09:01:00", "09:01:00", "09:03:00", 0),
                                              ("b", "09:03:00", "09:03:05", "09:05:00", 90)):
        rec = record(host, "cached", "w")
        layout.write_result(BenchmarkRecord(
            key=rec.key, seed=1, bundle_version="0", bench=rec.bench,
            started_at=f"2026-11-29T{start}+00:00", ended_at=f"2026-11-29T{end}+00:00"))
        write_json_atomic(tmp_path / "r4" / host / "cached" / "startup.json",
                          {"elapsed_s": 30.0, "healthy_at": f"2026-11-29T{healthy}Z"})
        write_json_atomic(tmp_path / "r4" / host / "cached" / "compile.json",
                          {"waited_for_leader_s": waited})
    write_json_atomic(tmp_path / "r4" / "run.json",
                      {"run_id": "r4", "started_at": "2026-11-29T09:00:00+00:00",
                       "ended_at": "2026-11-29T09:05:12+00:00"})
    walls = {w.host: w for w in run_overhead(tmp_path / "r4").walls}
    assert (walls["a"].span_s, walls["a"].own_s, walls["a"].first_bench_gap_s) == (180, 180, 0)
    assert (walls["b"].span_s, walls["b"].own_s, walls["b"].first_bench_gap_s) == (300, 210, 5)
    lines = run_overhead(tmp_path / "r4").lines()
    assert ("wall / slowest host's own wall (b: fixed part + start-ups + benches) = 1.486"
            in lines)
