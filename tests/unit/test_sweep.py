"""The segment-size sweep: points, their validation, their run directories, the report."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run, scale_times

from prefixbench.bench import runmeta
from prefixbench.config import plan, settings
from prefixbench.frontend import runview
from prefixbench.report.phase import report_run
from prefixbench.report.sweep import SweepRow, build_sweep, choose_best
from prefixbench.servers import sweep

BASE: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}


def _valid(**extra: Any) -> settings.ValidationResult:
    return settings.validate({**BASE, **extra}, "h1", extra_names=[*BASE, *extra])


def test_no_sweep_by_default() -> None:
    result = _valid()
    assert result.ok, result.problems
    assert sweep.points(result.settings) == []


def test_each_point_sets_the_three_values_the_tutorial_ties_together() -> None:
    result = _valid(prefixbench_sweep_segment_sizes=[512, 2048])
    assert result.ok, result.problems
    points = sweep.points(result.settings)
    assert [p.name for p in points] == ["seg512", "seg2048"]
    s = points[1].settings
    assert s["vllm_service_max_num_batched_tokens"] == 2048
    assert s["vllm_service_neuron_config"]["kv_segment_size_buckets"] == [2048]
    assert s["vllm_service_neuron_config"]["num_batched_tokens_buckets"] == [2048]
    # Everything else is untouched, and the inventory's settings are not modified.
    assert s["vllm_service_neuron_config"]["num_seqs_buckets"] == [4]
    assert result.settings["vllm_service_max_num_batched_tokens"] == 1024
    assert points[0].run_dir("/r/run-1") == Path("/r/run-1/sweep/seg512")


def test_an_unsupported_segment_size_is_refused_in_one_line() -> None:
    result = _valid(prefixbench_sweep_segment_sizes=[768])
    assert len(result.problems) == 1
    assert "prefixbench_sweep_segment_sizes" in result.problems[0]
    assert "768" in result.problems[0]


def test_a_point_the_workloads_do_not_fit_is_named() -> None:
    # The tutorial's 3072 + 1024 tokens at 4096: a warm request runs ceil(1024 / 4096) = 1
    # chunk, as a cold one runs ceil(4096 / 4096) = 1 (prefix-caching.md's rule).
    result = _valid(prefixbench_sweep_segment_sizes=[1024, 4096])
    assert result.problems, "seg4096 must be refused for a 3072-token prefix"
    assert all("sweep point seg4096" in p for p in result.problems), result.problems
    assert any("a warm request of 4096 prompt tokens hits 3072 and still runs "
               "ceil((4096 - 3072) / 4096) = 1 prefill chunks, as many as a cold one" in p
               for p in result.problems), result.problems


def test_a_repeated_size_is_refused() -> None:
    result = _valid(prefixbench_sweep_segment_sizes=[1024, 1024])
    assert any("repeats a value" in p for p in result.problems), result.problems


def test_opening_a_sweep_run_opens_every_point(tmp_path: Path) -> None:
    result = _valid(prefixbench_sweep_segment_sizes=[512, 1024])
    run_dir, resumed = runmeta.open_run(tmp_path, "run-1", result.settings, ["h1"], ["inv"])
    assert not resumed
    top = json.loads((run_dir / "run.json").read_text())
    assert top["sweep_segment_sizes"] == [512, 1024]
    assert [p.name for p in sweep.point_dirs(run_dir)] == ["seg512", "seg1024"]
    seg = json.loads((run_dir / "sweep" / "seg512" / "run.json").read_text())
    assert seg["run_id"] == "seg512" and seg["sweep_segment_sizes"] == []
    runmeta.close_run(run_dir)
    assert "ended_at" in json.loads((run_dir / "sweep" / "seg1024" / "run.json").read_text())
    # A resumed sweep run reopens its points.
    _, resumed = runmeta.open_run(tmp_path, "run-1", result.settings, ["h2"], ["inv"])
    assert resumed
    seg = json.loads((run_dir / "sweep" / "seg1024" / "run.json").read_text())
    assert seg["hosts"] == ["h1", "h2"] and "ended_at" not in seg


def _slower_cached(host: str, conf: str, wl: str, rep: int, bench: dict[str, Any], *,
                   factor: float) -> dict[str, Any]:
    del host, wl, rep
    return scale_times(bench, factor) if conf == "cached" else bench


def _sweep_run(tmp_path: Path, factors: dict[int, float], hosts: tuple[str, ...] = ("a",)
               ) -> Path:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    for size, factor in factors.items():
        make_run(run_dir / "sweep", hosts, run_id=f"seg{size}",
                 transform=functools.partial(_slower_cached, factor=factor))
    return run_dir


def test_the_report_names_the_segment_size_with_the_fastest_cached_server(
        tmp_path: Path) -> None:
    run_dir = _sweep_run(tmp_path, {512: 1.3, 1024: 1.0, 2048: 1.1})
    s = build_sweep(run_dir)
    assert [p.segment_size for p in s.points] == [512, 1024, 2048]
    assert s.reference_workload == "high_overlap"
    assert s.best is not None and s.best.segment_size == 1024
    assert s.best.runner_up == 2048
    row = next(r for r in s.rows if r.segment_size == 1024 and r.workload == "high_overlap")
    assert row.hit_ratio == pytest.approx(0.675)
    assert row.reduction_pct == pytest.approx(
        (1 - row.cached_median_ttft_ms / row.baseline_median_ttft_ms) * 100)


def test_report_run_writes_each_point_and_the_sweep(tmp_path: Path) -> None:
    run_dir = _sweep_run(tmp_path, {512: 1.2, 1024: 1.0})
    shown = report_run(run_dir)
    assert shown["best_segment_size"] == 1024
    for name in ("summary.json", "report.md", "report.html", "results.csv"):
        assert (run_dir / name).is_file()
        assert (run_dir / "sweep" / "seg512" / name).is_file()
    md = (run_dir / "report.md").read_text()
    assert "## Best segment size" in md and "best segment size: 1024" in md
    assert "TTFT reduction and hit ratio per segment size" in md
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "sweep" and summary["best"]["segment_size"] == 1024
    rows = (run_dir / "results.csv").read_text().splitlines()
    assert rows[0].startswith("segment_size,run_id,")
    assert sum(r.startswith("512,") for r in rows) == 5
    assert any(line.startswith("run run-1: segment-size sweep") for line in shown["lines"])


def test_best_is_not_named_without_cached_results() -> None:
    rows = [SweepRow(512, "a", "high_overlap", 10.0, None, None, None)]
    assert choose_best(rows, "high_overlap") is None


def test_median_over_hosts_decides_and_ties_go_to_the_larger_reduction() -> None:
    rows = [
        SweepRow(512, "a", "w", 100.0, 50.0, 0.6, 0.6),
        SweepRow(512, "b", "w", 100.0, 90.0, 0.6, 0.6),
        SweepRow(512, "c", "w", 100.0, 52.0, 0.6, 0.6),
        SweepRow(1024, "a", "w", 80.0, 52.0, 0.6, 0.6),
        SweepRow(1024, "b", "w", 80.0, 52.0, 0.6, 0.6),
        SweepRow(1024, "c", "w", 80.0, 40.0, 0.6, 0.6),
        SweepRow(2048, "a", "w", 200.0, 52.0, 0.6, 0.6),
    ]
    best = choose_best(rows, "w")
    assert best is not None
    # Medians: 512 -> 52, 1024 -> 52, 2048 -> 52; reductions 48%, 35%, 74%.
    assert best.segment_size == 2048


def test_prefixbench_run_prints_the_points_and_the_best(tmp_path: Path) -> None:
    run_dir = _sweep_run(tmp_path, {512: 1.2, 1024: 1.0})
    report_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    lines, failed = runview.summary_lines(summary)
    assert lines[0] == f"overall: {summary['status']}"
    assert "  best segment size: 1024" in lines
    assert any(line.startswith("  seg512: ") for line in lines)
    assert failed == bool(summary["points"][0]["failed_verdicts"]
                          or summary["points"][1]["failed_verdicts"]
                          or summary["status"] == "FAIL")


def test_the_plan_counts_a_server_pair_per_segment_size() -> None:
    result = _valid(prefixbench_sweep_segment_sizes=[512, 1024])
    host = plan.host_plan("h1", result.settings)
    # per segment size: 2 configurations x 3 workloads, and the baseline's calibration
    assert host.benches == 2 * (2 * 3 + 1)
    assert plan.render([host])[0].startswith(
        "h1 (trn2.48xlarge, neuron): segment sizes [512, 1024] x baseline -> cached x ")


def test_the_what_if_replays_a_records_requests_and_says_what(tmp_path: Path) -> None:
    """The what-if of one record (report.records.record_prediction: the capacity sweep's,
    and the report's for a custom workload; a tutorial workload's report shows the
    record's served expectation instead)."""
    from prefixbench.report.load import load_run  # noqa: PLC0415
    from prefixbench.report.records import record_prediction  # noqa: PLC0415

    data = load_run(make_run(tmp_path))
    known = data.workloads()
    pred = {(r.key.configuration, r.key.workload): record_prediction(
        r, known[r.key.workload], data.run_dir) for r in data.records}
    high = pred[("cached", "high_overlap")]
    # The recorded run: seed 0, 50 prompts over 5 prefixes, block 128, 8192 blocks.
    assert high is not None and high.ratio == pytest.approx(0.675)
    assert (high.note or "").startswith(
        "replays high_overlap's prompts regenerated from seed 0 with the server's block "
        "size 128 and KV capacity, at concurrency 1")
    # Alone, the no-overlap run would hit nothing (measured 3.88% carried over).
    no = pred[("cached", "no_overlap")]
    assert no is not None and no.ratio == pytest.approx(0.0)
    # Concurrency 4: the prediction goes through the scheduler model at the workload's
    # concurrency, and says what it does not model (the request rate's pacing).
    sustained = pred[("cached", "sustained_c4")]
    assert sustained is not None and sustained.ratio is not None
    assert "at concurrency 4" in (sustained.note or "")
    assert "paces requests at 2/s, but the predicted ratio has each request sent" in (
        sustained.note or "")
