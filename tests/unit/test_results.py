"""Bench result loading, records, atomic writes and the resumable run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefixbench.measure.bench_json import (
    REQUIRED_BENCH_KEYS,
    BenchResultError,
    load_bench_result,
    parse_bench_result,
)
from prefixbench.measure.layout import RunLayout, write_json_atomic
from prefixbench.measure.records import (
    SCHEMA_VERSION,
    BenchmarkRecord,
    FailureRecord,
    ResultKey,
    with_checksum,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"


def _bench(stem: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / f"{stem}.json").read_text())
    return data


@pytest.mark.parametrize("path", sorted(FIX.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_result_loads(path: Path) -> None:
    result = load_bench_result(path)
    assert result.failed == 0
    assert result.completed in (50, 200)
    assert result.total_input_tokens == result.completed * 4096
    detail = result.detail
    assert len(detail.latencies) == result.completed
    assert not detail.has_detail  # the fixtures were saved without --save-detailed


def test_summary_of_the_recorded_high_overlap_runs() -> None:
    base = load_bench_result(FIX / "baseline_high_overlap.json").summary()
    cached = load_bench_result(FIX / "cached_high_overlap.json").summary()
    assert base["median_ttft_ms"] == pytest.approx(158.549, abs=1e-3)
    assert cached["median_ttft_ms"] == pytest.approx(71.932, abs=1e-3)
    assert 1 - cached["median_ttft_ms"] / base["median_ttft_ms"] == pytest.approx(0.546, abs=1e-3)


def test_missing_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    data = _bench("cached_high_overlap")
    del data["p99_ttft_ms"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(BenchResultError, match=r"broken\.json: missing key 'p99_ttft_ms'"):
        load_bench_result(path)


def test_unreadable_and_invalid_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(BenchResultError, match=r"nope\.json: cannot read"):
        load_bench_result(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BenchResultError, match=r"bad\.json: not valid JSON"):
        load_bench_result(bad)
    with pytest.raises(BenchResultError, match="must be a JSON object"):
        parse_bench_result([1, 2], "list.json")
    data = _bench("cached_high_overlap")
    data["completed"] = "50"
    with pytest.raises(BenchResultError, match="'completed' must be an integer"):
        parse_bench_result(data, "x.json")


def test_detailed_result_exposes_per_request_lists() -> None:
    data = _bench("cached_high_overlap")
    n = data["completed"]
    data.update(ttfts=[0.1] * n, itls=[[0.01, 0.02]] * n, input_lens=[4096] * n,
                output_lens=[128] * n, start_times=[float(i) for i in range(n)],
                errors=[""] * (n - 1) + ["boom"], generated_texts=["x"] * n)
    detail = parse_bench_result(data).detail
    assert detail.has_detail
    assert detail.ttfts == (0.1,) * n
    assert detail.input_lens == (4096,) * n
    assert detail.succeeded[-1] is False
    assert sum(detail.succeeded) == n - 1
    data["ttfts"] = [0.1]
    with pytest.raises(BenchResultError, match="differ in length"):
        parse_bench_result(data)


def test_required_keys_cover_the_tutorials_tables() -> None:
    for key in ("median_ttft_ms", "p99_ttft_ms", "output_throughput", "completed", "failed",
                "total_input_tokens"):
        assert key in REQUIRED_BENCH_KEYS


def _record(rep: int = 1, host: str = "trn-a") -> BenchmarkRecord:
    return BenchmarkRecord(
        key=ResultKey(host, "cached", "high_overlap", rep),
        seed=1234,
        bundle_version="0.1.0",
        started_at="2026-11-29T08:00:00+00:00",
        ended_at="2026-11-29T08:01:00+00:00",
        bench=_bench("cached_high_overlap"),
        workload={"name": "high_overlap", "num_prompts": 50},
        metrics_delta={"counters": {"prefix_cache_hits": 138240.0}},
        expected={"tutorial": 0.675, "block_aligned": 0.675},
        measured={"hit_ratio_queries": 0.675, "hit_ratio_by_source": 0.675},
    )


def test_record_round_trips_through_json() -> None:
    rec = _record()
    data = json.loads(json.dumps(with_checksum(rec.to_dict())))
    assert data["schema_version"] == SCHEMA_VERSION
    again = BenchmarkRecord.from_dict(data)
    assert again == rec
    assert again.bench_result.median_ttft_ms == pytest.approx(71.932, abs=1e-3)


def test_record_rejects_other_schema_versions_and_kinds() -> None:
    data = _record().to_dict()
    data["schema_version"] = 999
    with pytest.raises(BenchResultError, match="schema_version"):
        BenchmarkRecord.from_dict(data, "old.json")
    data = _record().to_dict()
    data["kind"] = "failure"
    with pytest.raises(BenchResultError, match="kind"):
        BenchmarkRecord.from_dict(data)


def test_write_json_atomic_replaces_whole_files(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "dir" / "x.json"
    write_json_atomic(target, {"a": 1})
    write_json_atomic(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]  # no temp left
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(target, {"a": float("nan")})
    assert json.loads(target.read_text()) == {"a": 2}  # the old file is intact
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_layout_paths_and_path_traversal(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "run-20261129")
    key = ResultKey("trn-a", "cached", "high_overlap", 2)
    assert layout.result_path(key) == (
        tmp_path / "run-20261129" / "trn-a" / "cached" / "high_overlap" / "rep2.json")
    assert layout.failed_path(key).name == "rep2.failed.json"
    for bad in ("../etc", "a/b", "", ".hidden", "x..y"):
        with pytest.raises(ValueError, match="path component"):
            layout.result_path(ResultKey(bad, "cached", "w", 1))
    with pytest.raises(ValueError, match="run_id"):
        RunLayout(tmp_path, "../up")
    with pytest.raises(ValueError, match="count from 1"):
        layout.result_path(ResultKey("a", "b", "c", 0))


def test_resume_lists_what_is_complete_and_what_is_missing(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r1")
    planned = [ResultKey(h, c, w, k) for h in ("trn-a", "trn-b")
               for c in ("baseline", "cached") for w in ("high_overlap",) for k in (1, 2)]
    layout.write_result(_record(1, "trn-a"))
    failure = FailureRecord(key=ResultKey("trn-a", "cached", "high_overlap", 2), seed=1,
                            bundle_version="0.1.0", started_at="t0", ended_at="t1",
                            error="vllm bench serve exited 1", returncode=1,
                            stderr="Traceback ...", journal_tail="engine died")
    layout.write_failure(failure)
    # A torn write leaves only a temp file: not counted as done.
    (layout.bench_dir("trn-b", "cached", "high_overlap") / ".rep1.json.abc.tmp").parent.mkdir(
        parents=True)
    (layout.bench_dir("trn-b", "cached", "high_overlap") / ".rep1.json.abc.tmp").write_text("{")
    # A corrupt result (not written by us) is not counted either.
    (layout.bench_dir("trn-b", "cached", "high_overlap") / "rep2.json").write_text("{")
    assert layout.completed() == {ResultKey("trn-a", "cached", "high_overlap", 1)}
    assert set(layout.failures()) == {failure.key}
    again = FailureRecord.from_dict(json.loads(layout.failed_path(failure.key).read_text()))
    assert again == failure
    missing = layout.missing(planned)
    assert len(missing) == len(planned) - 1
    assert missing[0] == ResultKey("trn-a", "baseline", "high_overlap", 1)
    assert len(layout.stale_temp_files()) == 1
    # The rerun succeeds: the result replaces the failure marker.
    rec = _record(2, "trn-a")
    layout.write_result(rec)
    assert layout.failures() == {}
    assert not layout.failed_path(rec.key).exists()
    with pytest.raises(FileExistsError):
        layout.write_failure(failure)
    assert [r.key for r in layout.load_results()] == [
        ResultKey("trn-a", "cached", "high_overlap", 1),
        ResultKey("trn-a", "cached", "high_overlap", 2)]


def test_non_finite_values_are_kept_as_null_not_lost(tmp_path: Path) -> None:
    layout = RunLayout(tmp_path, "r")
    bench = _bench("cached_high_overlap")
    bench["mean_tpot_ms"] = float("nan")
    rec = BenchmarkRecord(key=ResultKey("h", "cached", "w", 1), seed=1, bundle_version="0",
                          started_at="a", ended_at="b", bench=bench)
    path = layout.write_result(rec)
    assert json.loads(path.read_text())["bench"]["mean_tpot_ms"] is None
    assert layout.completed() == {rec.key}


def test_is_completed_reads_one_file_and_agrees_with_completed(tmp_path: Path) -> None:
    from prefixbench.measure.layout import RunLayout  # noqa: PLC0415

    layout = RunLayout(tmp_path, "r")
    record = _record()
    key = record.key
    assert not layout.is_completed(key)
    layout.result_path(key).parent.mkdir(parents=True)
    layout.result_path(key).write_text("{not json")
    assert not layout.is_completed(key) and key not in layout.completed()
    layout.write_result(record)
    assert layout.is_completed(key) and key in layout.completed()


def test_pending_items_are_the_servers_benches_without_a_result(tmp_path: Path) -> None:
    from prefixbench.bench.experiment import bench_items, pending_items  # noqa: PLC0415
    from prefixbench.measure.layout import RunLayout  # noqa: PLC0415

    layout = RunLayout(tmp_path, "r")
    settings: dict[str, Any] = {"prefixbench_repetitions": 2}
    every = [(i.workload.name, i.repetition) for i in bench_items(settings)]
    assert ("high_overlap", 1) in every and ("high_overlap", 2) in every
    layout.write_result(_record(2, "trn-a"))  # trn-a cached/high_overlap rep2
    layout.write_result(_record(1, "trn-b"))  # another host's result: not this server's
    pending = [(i.workload.name, i.repetition)
               for i in pending_items(settings, layout.run_dir, "trn-a", "cached")]
    assert pending == [k for k in every if k != ("high_overlap", 2)]
    # The baseline server runs the calibration bench last (on by default), once.
    baseline = pending_items(settings, layout.run_dir, "trn-a", "baseline")
    assert [(i.workload.name, i.repetition) for i in baseline] == [*every, ("calibration", 1)]
    assert baseline[-1].label == f"{len(every) + 1}/{len(every) + 1} calibration rep1"
    off = {**settings, "prefixbench_calibration": False}
    assert [(i.workload.name, i.repetition) for i in pending_items(
        off, layout.run_dir, "trn-a", "baseline")] == every


def test_the_layout_names_every_file_a_hosts_tasks_write(tmp_path: Path) -> None:
    from prefixbench.measure.layout import RunLayout  # noqa: PLC0415

    run = tmp_path / "results" / "r1"
    files = RunLayout.of(run).files("trn-a", "cached")
    assert files == {
        "host_dir": f"{run}/trn-a", "fingerprint": f"{run}/trn-a/fingerprint.json",
        "tokenizer_dir": f"{run}/tokenizer",
        "compile_store": f"{tmp_path}/results/.compile-cache",
        "server_dir": f"{run}/trn-a/cached", "startup": f"{run}/trn-a/cached/startup.json",
        "startup_journal": f"{run}/trn-a/cached/startup-journal.log",
        "restart_journal": f"{run}/trn-a/cached/restart-journal.log",
        "compile": f"{run}/trn-a/cached/compile.json"}
    assert set(RunLayout.of(run).files("trn-a")) == {
        "host_dir", "fingerprint", "tokenizer_dir", "compile_store"}
    with pytest.raises(ValueError, match=r"host '\.\./x' cannot be a path component"):
        RunLayout.of(run).files("../x")
    # A sweep point's store is beside its sibling points, as before the layout owned it.
    point = RunLayout.of(run / "sweep" / "seg512")
    assert point.compile_store == run / "sweep" / ".compile-cache"
    assert RunLayout.of(run).prompts_path("mine") == run / "prompts" / "mine.jsonl"
