"""The KV-capacity sweep: its points, their rules, the served curve and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import runmeta
from prefixbench.config import plan, rules, settings
from prefixbench.engines import tokenizer as tk
from prefixbench.engines.workloads import Workload
from prefixbench.predict.served import served_curve, served_expectation
from prefixbench.report.capacity import (
    CapacityCurveView,
    build_capacity,
    is_capacity_sweep,
    judge,
)
from prefixbench.report.phase import report_run
from prefixbench.report.sweep import is_sweep
from prefixbench.servers import server, sweep

BASE: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}


def _valid(**extra: Any) -> settings.ValidationResult:
    return settings.validate({**BASE, **extra}, "h1", extra_names=[*BASE, *extra])


def test_each_capacity_point_runs_the_cached_server_with_its_block_override() -> None:
    result = _valid(prefixbench_sweep_kv_blocks=[200, 80], vllm_service_block_size=32)
    assert result.ok, result.problems
    points = sweep.points(result.settings)
    assert [p.name for p in points] == ["kv200", "kv80"]
    s = points[1].settings
    assert s["vllm_service_num_gpu_blocks_override"] == 80
    assert s["prefixbench_configurations"] == ["cached"]
    assert s["prefixbench_sweep_kv_blocks"] == []
    assert result.settings["vllm_service_num_gpu_blocks_override"] == 0
    argv = server.serve_argv(s, "cached")
    assert argv[argv.index("--num-gpu-blocks-override") + 1] == "80"
    assert argv[argv.index("--block-size") + 1] == "32"
    assert "--num-gpu-blocks-override" not in server.serve_argv(result.settings, "cached")
    (host,) = [plan.host_plan("h1", result.settings)]
    assert host.benches == 2 * 3  # two points x the tutorial's three workloads, cached
    assert "KV blocks [200, 80] x cached x" in plan.render([host])[0]


def test_a_neuron_block_override_without_a_block_size_is_refused_with_the_source() -> None:
    # vllm-neuron 0.21: "block count is set explicitly via num_gpu_blocks_override, and
    # block_size must be specified" (features-guide.md, "Sizing the KV cache").
    refusal = ("vllm_service_num_gpu_blocks_override on Neuron needs vllm_service_block_size "
               "(the plugin takes the block count with a block size, aws-neuron/"
               "aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/features-guide.md, \"Sizing "
               "the KV cache\"): set vllm_service_block_size, e.g. 32 (its default)")
    assert _valid(vllm_service_num_gpu_blocks_override=4096).problems == [f"h1: {refusal}"]
    assert _valid(prefixbench_sweep_kv_blocks=[200]).problems == [
        f"h1: sweep point kv200: {refusal}"]
    assert _valid(vllm_service_num_gpu_blocks_override=4096, vllm_service_block_size=32).ok
    # The cpu platform has its own default (128) and needs none.
    assert _valid(prefixbench_platform="cpu", vllm_service_num_gpu_blocks_override=4096,
                  vllm_service_tensor_parallel_size=1).ok
    # Without an override, no block size is passed: the tutorial's command has none.
    plain = _valid().settings
    assert "--block-size" not in server.serve_argv(plain, "cached")


def test_a_block_size_on_cpu_sizes_the_one_request_check() -> None:
    small = {**_valid().settings, "prefixbench_platform": "cpu",
             "vllm_service_max_model_len": 1536}
    # 1536 / 32 = 48 blocks + the null block.
    assert not list(rules.kv_blocks_hold_a_request(
        {**small, "vllm_service_block_size": 32, "vllm_service_num_gpu_blocks_override": 49}))
    assert list(rules.kv_blocks_hold_a_request(
        {**small, "vllm_service_block_size": 32, "vllm_service_num_gpu_blocks_override": 48}))


def test_sweeping_both_dials_at_once_is_refused_in_one_line() -> None:
    result = _valid(prefixbench_sweep_kv_blocks=[100], prefixbench_sweep_segment_sizes=[512])
    assert result.problems == ["h1: prefixbench_sweep_segment_sizes and "
                               "prefixbench_sweep_kv_blocks are both set: sweep one dial "
                               "per run"]


def test_a_capacity_that_cannot_hold_one_request_is_refused_on_cpu() -> None:
    # max_model_len 8192 at block 128 takes 64 blocks, and block 0 is the null block.
    result = _valid(prefixbench_platform="cpu", prefixbench_sweep_kv_blocks=[64, 65])
    assert len(result.problems) == 1, result.problems
    assert result.problems[0].startswith(
        "h1: sweep point kv64: vllm_service_num_gpu_blocks_override 64 cannot hold one "
        "request at max_model_len 8192")
    assert _valid(prefixbench_platform="cpu", prefixbench_sweep_kv_blocks=[65]).ok
    small = {**_valid().settings, "prefixbench_platform": "cpu",
             "vllm_service_max_model_len": 1536}
    assert not list(rules.kv_blocks_hold_a_request(
        {**small, "vllm_service_num_gpu_blocks_override": 13}))
    assert list(rules.kv_blocks_hold_a_request(
        {**small, "vllm_service_num_gpu_blocks_override": 12}))
    # On Neuron the block size is the server's: its start-up says so, not preflight.
    assert not list(rules.kv_blocks_hold_a_request(
        {**small, "prefixbench_platform": "neuron", "vllm_service_num_gpu_blocks_override": 5}))
    one = _valid(vllm_service_num_gpu_blocks_override=1)
    assert any("leaves no usable block" in p for p in one.problems), one.problems


def test_a_capacity_sweep_run_opens_kv_points(tmp_path: Path) -> None:
    result = _valid(prefixbench_sweep_kv_blocks=[300, 100])
    run_dir, _ = runmeta.open_run(tmp_path, "run-1", result.settings, ["h1"], ["inv"])
    top = json.loads((run_dir / "run.json").read_text())
    assert top["sweep_kv_blocks"] == [300, 100] and top["sweep_segment_sizes"] == []
    assert [p.name for p in sweep.point_dirs(run_dir)] == ["kv100", "kv300"]
    assert sweep.dial_of(run_dir) == sweep.KV
    assert is_capacity_sweep(run_dir) and is_sweep(run_dir)
    point = json.loads((run_dir / "sweep" / "kv100" / "run.json").read_text())
    assert point["configurations"] == ["cached"]


def test_the_served_curve_is_the_served_expectation_at_every_capacity(tmp_path: Path) -> None:
    tok = tk.load(write_tokenizer(tmp_path / "bpe", kind="bpe"))
    w = Workload.from_dict({"name": "w", "prefix_repetition_prefix_len": 256,
                            "prefix_repetition_suffix_len": 64,
                            "prefix_repetition_num_prefixes": 3,
                            "prefix_repetition_output_len": 8, "num_prompts": 12,
                            "max_concurrency": 1, "seed": 7})
    caps = [11, 16, 24, 60]  # a request holds 11 blocks (320 + 8 tokens, block 32)
    bounded, unbounded = served_curve(w, tok, 32, caps)
    assert [p.capacity_blocks for p in bounded] == caps
    ratios = [p.ratio for p in bounded]
    for cap, pred in zip(caps, bounded, strict=True):
        served = served_expectation(w, tok, 32, capacity_blocks=cap)
        assert pred.ratio == pytest.approx(served.ratio), cap
        assert pred.evicted_blocks == served.evicted_blocks, cap
    assert unbounded.ratio == pytest.approx(served_expectation(w, tok, 32).ratio)
    assert ratios[0] is not None and ratios[-1] is not None
    assert ratios[0] < ratios[-1] <= unbounded.ratio + 1e-12  # eviction costs hits
    assert served_curve(w, tok, 32, [10])[0][0].ratio is None  # a request does not fit
    # The working set: 3 prefixes x 8 blocks + 12 suffixes x 2 blocks, give or take the
    # junction re-splits and a repeat's recomputed last block (kept twice).
    assert unbounded.cached_blocks is not None and 40 <= unbounded.cached_blocks <= 52


def test_judge_passes_within_two_points_and_says_why_otherwise() -> None:
    assert judge(0.50, 0.515, concurrency=1, note=None, max_diff=0.02)[0] == "PASS"
    status, why = judge(0.50, 0.53, concurrency=1, note=None, max_diff=0.02)
    assert status == "FAIL" and "-3.00 pp" in why
    assert judge(0.5, 0.5, concurrency=4, note=None, max_diff=0.02)[0] == "INCONCLUSIVE"
    status, why = judge(0.5, None, concurrency=1, note="no tokenizer", max_diff=0.02)
    assert status == "INCONCLUSIVE" and "no tokenizer" in why


def _capacity_run(tmp_path: Path, predicted: dict[int, float]) -> Path:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    for blocks, ratio in predicted.items():
        make_run(run_dir / "sweep", ("a",), run_id=f"kv{blocks}",
                 benches=(("cached", "high_overlap"),),
                 expected=lambda *_, r=ratio: {"served_ratio": r})
    return run_dir


def test_the_report_sets_each_point_beside_its_prediction(tmp_path: Path) -> None:
    # The recorded bench measured 67.5%; one point is predicted 1 pp off, one 5 pp off.
    run_dir = _capacity_run(tmp_path, {100: 0.665, 400: 0.725})
    s = build_capacity(run_dir)
    assert [p.blocks for p in s.points] == [100, 400]
    by_point = {r.point_blocks: r for r in s.rows}
    assert by_point[100].status == "PASS" and by_point[400].status == "FAIL"
    assert by_point[100].capacity_blocks == 8191  # num_gpu_blocks 8192 less the null block
    assert by_point[400].diff_pp == pytest.approx(-5.0)
    assert s.status == "FAIL"
    assert s.failed_verdicts == ["kv400 a: capacity_curve high_overlap rep1"]
    # No tokenizer copy in the run: no curve, and the report says why.
    assert [c.note for c in s.curves] == ["no tokenizer copy in the run directory"]

    shown = report_run(run_dir)
    assert shown["status"] == "FAIL"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "capacity_sweep"
    assert [p["status"] for p in summary["points"]] == ["PASS", "FAIL"]
    md = (run_dir / "report.md").read_text()
    assert "| high_overlap | a | 100 | 8191 | 67.50% | 66.50% | +1.00 |" in md, md
    assert (run_dir / "sweep" / "kv400" / "report.html").is_file()
    csv_rows = (run_dir / "results.csv").read_text().splitlines()
    assert csv_rows[0].startswith("workload,host,point_blocks,")
    assert len(csv_rows) == 3


def test_the_curve_says_from_which_capacity_the_full_hit_ratio_is_reached() -> None:
    curve = CapacityCurveView(workload="w", block_size=128,
                              points=((30, 0.5), (10, 0.1), (20, 0.5)),
                              unbounded_ratio=0.5, working_set_blocks=40)
    assert curve.fits_from == 20
    assert CapacityCurveView(workload="w", block_size=128, points=((10, 0.1),),
                             unbounded_ratio=0.5, working_set_blocks=40).fits_from is None


def test_prefixbench_report_on_a_capacity_sweep_fails_on_a_failed_point(
        tmp_path: Path) -> None:
    import io  # noqa: PLC0415

    from prefixbench.frontend.runview import EXIT_FAILED, EXIT_OK  # noqa: PLC0415
    from prefixbench.report.cli import report_main  # noqa: PLC0415

    failing, passing = tmp_path / "f", tmp_path / "p"
    failing.mkdir()
    passing.mkdir()
    out = io.StringIO()
    assert report_main([str(_capacity_run(failing, {100: 0.665, 400: 0.725}))],
                       out=out, err=io.StringIO()) == EXIT_FAILED
    assert "overall: FAIL" in out.getvalue() and "wrote " in out.getvalue()
    out = io.StringIO()
    assert report_main([str(_capacity_run(passing, {100: 0.665}))], out=out,
                       err=io.StringIO()) == EXIT_OK
    assert "overall: PASS" in out.getvalue()
    # prefixbench run's closing lines: each point by its capacity, the failed one named.
    from prefixbench.frontend import runview  # noqa: PLC0415

    lines, failed = runview.summary_lines(json.loads(
        (failing / "run-1" / "summary.json").read_text()))
    assert failed and lines[0] == "overall: FAIL"
    assert lines[1:3] == ["  kv100: PASS",
                          "  kv400: FAIL (FAIL kv400 a: capacity_curve high_overlap rep1)"]
