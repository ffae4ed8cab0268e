"""The capacity curve above concurrency 1: judged where the record says its prediction
was made at the workload's concurrency by the scheduler model, drawn through it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run
from tiny_tokenizer import write_tokenizer

from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.workloads import Workload
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import BenchmarkRecord, ResultKey
from prefixbench.predict.served import served_curve
from prefixbench.report.capacity import _curve, build_capacity
from prefixbench.report.capacity_verdict import judge, predicted_at
from prefixbench.report.records import concurrency_of

SCHEDULED = {"served_concurrency": 4, "max_num_seqs": 4, "max_num_batched_tokens": 1024}


def test_above_concurrency_1_judge_decides_only_at_the_predictions_concurrency() -> None:
    status, why = judge(0.70, 0.71, concurrency=4, note=None, max_diff=0.02, predicted_at=4)
    assert status == "PASS" and "vLLM scheduler model at concurrency 4" in why
    assert judge(0.70, 0.75, concurrency=4, note=None, max_diff=0.02,
                 predicted_at=4, evicted_blocks=0)[0] == "FAIL"
    status, why = judge(0.70, 0.70, concurrency=4, note=None, max_diff=0.02)
    assert status == "INCONCLUSIVE" and "does not say at which concurrency" in why
    status, why = judge(0.70, 0.70, concurrency=4, note=None, max_diff=0.02, predicted_at=1)
    assert status == "INCONCLUSIVE" and "made at concurrency 1" in why
    status, why = judge(0.70, 0.70, concurrency=None, note=None, max_diff=0.02)
    assert status == "INCONCLUSIVE" and "workload is unknown" in why
    # Concurrency 1 needs no statement: that replay has always been one at a time.
    assert judge(0.70, 0.70, concurrency=1, note=None, max_diff=0.02)[0] == "PASS"


def test_where_the_model_evicts_above_concurrency_1_a_difference_is_not_a_failure() -> None:
    # The fleet measured 35.00% and 38.33% on two identical runs where the model, whose
    # requests reach the engine at step boundaries, says 31.66%: timing moves evictions.
    at4 = {"concurrency": 4, "note": None, "max_diff": 0.02, "predicted_at": 4}
    status, why = judge(0.3833, 0.3166, evicted_blocks=47, **at4)
    assert status == "INCONCLUSIVE" and "evicts 47 blocks" in why
    assert "measured 38.33% vs predicted 31.66% (+6.67 pp)" in why and "timing" in why
    assert judge(0.3833, 0.3166, evicted_blocks=None, **at4)[0] == "INCONCLUSIVE"
    # Agreement is still a PASS, and nothing evicted is decided both ways.
    assert judge(0.1083, 0.1083, evicted_blocks=52, **at4)[0] == "PASS"
    assert judge(0.3833, 0.3166, evicted_blocks=0, **at4)[0] == "FAIL"
    # At concurrency 1 the replay is the server's order: a difference fails.
    assert judge(0.3833, 0.3166, concurrency=1, note=None, max_diff=0.02,
                 evicted_blocks=47)[0] == "FAIL"


def test_with_the_range_over_arrival_timings_a_point_is_decided_both_ways() -> None:
    # The fleet's 63-block point: the model's range over arrival timings is 19.17% to
    # 38.33%; the two runs' 35.00% and 38.33% are inside it.
    at4 = {"concurrency": 4, "note": None, "max_diff": 0.005, "predicted_at": 4,
           "evicted_blocks": 47, "band": (0.1917, 0.3833)}
    for measured in (0.3500, 0.3833, 0.3870):
        status, why = judge(measured, 0.3166, **at4)
        assert status == "PASS", why
        assert "of the range 19.17% to 38.33% by arrival timing: yes" in why
    status, why = judge(0.3166, 0.3166, **at4)
    assert status == "PASS" and "of the point: yes" in why
    # Outside it by more than the threshold: no timing tried explains it.
    for measured in (0.10, 0.3890):
        status, why = judge(measured, 0.3166, **at4)
        assert status == "FAIL" and "outside the range 19.17% to 38.33%" in why, why


def test_a_finite_request_rate_is_judged_by_its_range() -> None:
    paced = {"concurrency": 4, "note": None, "max_diff": 0.02, "predicted_at": 4,
             "request_rate": 2.0}
    # A record without the range (made before it): not decided, evicting or not.
    for evicted in (0, 37, None):
        status, why = judge(0.70, 0.70, evicted_blocks=evicted, **paced)
        assert status == "INCONCLUSIVE" and "no range over arrival timings" in why
    status, why = judge(0.60, 0.70, evicted_blocks=37, band=(0.55, 0.72), **paced)
    assert status == "PASS" and "by arrival timing, request_rate 2/s: yes" in why
    assert judge(0.40, 0.70, evicted_blocks=37, band=(0.55, 0.72), **paced)[0] == "FAIL"


def _record(workload: Workload, expected: dict[str, Any]) -> BenchmarkRecord:
    return BenchmarkRecord(key=ResultKey("a", "cached", workload.name, 1), seed=0,
                           bundle_version="0", started_at="", ended_at="", bench={},
                           workload=workload.to_dict(), metrics_delta={},
                           expected=expected, measured={})


def test_the_record_says_at_which_concurrency_its_prediction_was_made() -> None:
    w = Workload(name="w", prefix_repetition_prefix_len=64, prefix_repetition_suffix_len=8,
                 prefix_repetition_num_prefixes=2, prefix_repetition_output_len=4,
                 num_prompts=10, max_concurrency=None)
    assert concurrency_of(w) == 10  # unbounded: all its prompts at once
    assert predicted_at(_record(w, {"served_concurrency": 10}), w, "served") == 10
    assert predicted_at(_record(w, {"max_num_seqs": 4}), w, "served") is None
    kept = {"max_num_seqs": 4, "max_num_batched_tokens": 1024}
    assert predicted_at(_record(w, kept), w, "what-if") == 10
    assert predicted_at(_record(w, {"max_num_seqs": 4}), w, "what-if") is None
    one = Workload.from_dict({**w.to_dict(), "max_concurrency": 1})
    assert predicted_at(_record(one, {}), one, "served") == 1


def _sustained_run(tmp_path: Path, expected: dict[str, Any]) -> Path:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    # The fixture's cached sustained_c4 (concurrency 4, request_rate 2/s) measured 75.08%.
    make_run(run_dir / "sweep", ("a",), run_id="kv100",
             benches=(("cached", "sustained_c4"),), expected=lambda *_: expected)
    return run_dir


def test_the_report_judges_a_concurrent_bench_its_record_predicted_at_its_concurrency(
        tmp_path: Path) -> None:
    made = {"served_ratio": 0.745, "served_evicted_blocks": 0, **SCHEDULED,
            "served_band_lo": 0.745, "served_band_hi": 0.745}
    (row,) = build_capacity(_sustained_run(tmp_path / "new", made)).rows
    assert row.status == "PASS", row.detail
    assert "scheduler model at concurrency 4" in row.detail
    old = {k: v for k, v in made.items() if k != "served_concurrency"}
    (row,) = build_capacity(_sustained_run(tmp_path / "old", old)).rows
    assert row.status == "INCONCLUSIVE" and "rerun the bench" in row.detail
    evicting = {k: v for k, v in made.items() if not k.startswith("served_band")}
    evicting["served_evicted_blocks"] = 12
    (row,) = build_capacity(_sustained_run(tmp_path / "paced", evicting)).rows
    assert row.status == "INCONCLUSIVE" and "request_rate 2/s" in row.detail
    # With the range over arrival timings the record keeps, decided both ways.
    ranged = {**evicting, "served_band_lo": 0.70, "served_band_hi": 0.76}
    (row,) = build_capacity(_sustained_run(tmp_path / "ranged", ranged)).rows
    assert row.status == "PASS" and "70.00% to 76.00% by arrival timing" in row.detail
    below = {**evicting, "served_ratio": 0.79, "served_band_lo": 0.78, "served_band_hi": 0.80}
    (row,) = build_capacity(_sustained_run(tmp_path / "below", below)).rows
    assert row.status == "FAIL", row.detail


W4 = Workload.from_dict({"name": "w", "prefix_repetition_prefix_len": 256,
                         "prefix_repetition_suffix_len": 64,
                         "prefix_repetition_num_prefixes": 3,
                         "prefix_repetition_output_len": 8, "num_prompts": 12,
                         "max_concurrency": 4, "seed": 7})


def test_the_curve_is_drawn_at_the_workloads_concurrency_when_the_record_gives_limits(
        tmp_path: Path) -> None:
    layout = RunLayout.of(tmp_path / "run")
    tok = write_tokenizer(layout.run_dir / "tokenizer", kind="bpe")
    serving = Serving(concurrency=4, max_num_seqs=4, max_num_batched_tokens=1024)
    measured = [24, 30]  # a request holds 11 blocks; 4 at once overlap at these
    curve = _curve("w", W4, 32, layout, measured, serving=serving)
    bounded, _ = served_curve(W4, tok, 32, [24, 30], serving=serving)
    serial, unbounded = served_curve(W4, tok, 32, [24, 30])
    drawn = dict(curve.points)
    assert [drawn[24], drawn[30]] == [p.ratio for p in bounded]
    assert [p.ratio for p in bounded] != [p.ratio for p in serial]  # concurrency matters
    assert curve.working_set_blocks == unbounded.cached_blocks == 49  # one at a time's
    assert curve.unbounded_ratio == pytest.approx(unbounded.ratio)
    assert curve.note is not None and curve.note.startswith(
        "curve replayed through the vLLM scheduler model at concurrency 4 (max_num_seqs 4")
    plain = _curve("w", W4, 32, layout, measured, serving=SERIAL)
    assert dict(plain.points)[24] == serial[0].ratio
    assert plain.note is not None and "keeps no server limits" in plain.note


def test_the_what_if_curve_replays_as_its_serving_sends() -> None:
    from prefixbench.predict.capacity_curve import predict_curve  # noqa: PLC0415

    serving = Serving(concurrency=4, max_num_seqs=4, max_num_batched_tokens=1024)
    at_4 = predict_curve(W4, block_size=32, capacities=[20, 24, 30], serving=serving)
    one = predict_curve(W4, block_size=32, capacities=[20, 24, 30])
    assert [p.ratio for p in at_4.points] != [p.ratio for p in one.points]
    assert "vLLM scheduler model at concurrency 4" in at_4.points[0].method
    assert one.working_set_blocks > 0 and at_4.unbounded.ratio == one.unbounded.ratio
