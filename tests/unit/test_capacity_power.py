"""How much a capacity_curve verdict can fail: the interval of measured hit ratios it
accepts, said in its reason line and kept in the capacity summary; and the range over
arrival timings it is decided against, made by the record's engine model (on Neuron the
plugin's scheduler, whose range is narrower than vLLM's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import served_record
from prefixbench.engines.platforms import engine_model
from prefixbench.engines.schedconfig import bench_serving
from prefixbench.engines.schedneuron import neuron_scheduler_sim
from prefixbench.engines.workloads import Workload
from prefixbench.measure.metrics import CacheConfig
from prefixbench.predict.arrivals import arrival_band
from prefixbench.predict.served import _sent
from prefixbench.report.capacity import build_capacity
from prefixbench.report.capacity_doc import capacity_lines, report_capacity
from prefixbench.report.capacity_verdict import accepted_interval, decide

AT4: dict[str, Any] = {"concurrency": 4, "note": None, "predicted_at": 4, "evicted_blocks": 47}


def test_the_reason_says_what_the_verdict_accepted_and_how_wide() -> None:
    # Concurrency 1: the point +- the threshold.
    v = decide(0.3166, 0.3166, concurrency=1, note=None, max_diff=0.02)
    assert v.accepted == pytest.approx((0.2966, 0.3366))
    assert v.accepted_width_pp == pytest.approx(4.0)
    assert "accepted 29.66%-33.66% (4.00 points wide)" in v.detail
    # Above it, the fleet's 63-block range widened by the threshold: 20.16 points.
    v = decide(0.35, 0.3166, max_diff=0.005, band=(0.1917, 0.3833), **AT4)
    assert v.status == "PASS"
    assert "accepted 18.67%-38.83% (20.16 points wide)" in v.detail, v.detail
    assert v.accepted_width_pp == pytest.approx(20.16)
    # A point outside its own range (a record whose band missed it) widens it.
    assert accepted_interval(0.50, 0.02, (0.30, 0.40)) == pytest.approx((0.28, 0.52))
    # Within 0-100%: a hit ratio is neither negative nor above 1.
    v = decide(0.09, 0.0, max_diff=0.02, band=(0.0, 0.0667), **AT4)
    assert v.status == "FAIL" and "accepted 0.00%-8.67% (8.67 points wide)" in v.detail
    assert accepted_interval(0.995, 0.02) == pytest.approx((0.975, 1.0))
    # Nothing decided, nothing accepted.
    v = decide(0.35, 0.3166, max_diff=0.02, concurrency=4, note=None, predicted_at=1)
    assert v.status == "INCONCLUSIVE" and v.accepted is None and "accepted" not in v.detail


W = Workload.from_dict({
    "name": "c4", "prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 64,
    "prefix_repetition_num_prefixes": 3, "prefix_repetition_output_len": 4,
    "num_prompts": 12, "max_concurrency": 4})
SERVING = bench_serving(W, max_num_seqs=4, max_num_batched_tokens=256)
#: A full-attention server of 48 blocks of 16 tokens (47 usable): it evicts.
SERVER = CacheConfig.from_labels({"block_size": "16", "num_gpu_blocks": "48"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run")
    write_tokenizer(root / "tokenizer")
    return root


def _expected(run_dir: Path, platform: str) -> dict[str, Any]:
    return served_record.served_expected(W, run_dir, 16, SERVER, serving=SERVING,
                                         platform=platform, max_model_len=512)


def test_the_records_range_is_the_neuron_schedulers_on_neuron(run_dir: Path) -> None:
    """The record's range over arrival timings on Neuron is the plugin's scheduler
    model's (sync as the CPU fleet's reference runs it, and async), not vLLM's."""
    sent = _sent(W, run_dir / "tokenizer", None)
    outputs = [W.prefix_repetition_output_len] * len(sent.prompts)
    got: dict[str, Any] = {}
    for asynchronous, name in ((False, "NeuronScheduler"), (True, "NeuronAsyncScheduler")):
        engine = engine_model("neuron", serving=SERVING, max_model_len=512,
                              async_scheduling=asynchronous)

        def neuron(a: bool = asynchronous) -> Any:
            return neuron_scheduler_sim(16, 47, max_model_len=512, max_num_seqs=4,
                                        max_num_batched_tokens=256, async_scheduling=a)

        want = arrival_band(sent.prompts, outputs, serving=engine.serving, new_sim=neuron)
        got = served_record.served_expected(
            W, run_dir, 16, SERVER, serving=SERVING, platform="neuron", max_model_len=512,
            async_scheduling=asynchronous)
        assert got["expected_scheduler"] == name
        assert (got["served_band_lo"], got["served_band_hi"]) == (want.lo, want.hi)
        assert got["served_band_variants"] == want.variants
    cpu = _expected(run_dir, "cpu")
    assert cpu["expected_scheduler"] == "Scheduler"
    assert (cpu["served_band_lo"], cpu["served_band_hi"]) != (
        got["served_band_lo"], got["served_band_hi"])


def test_a_measurement_the_wide_range_passes_fails_the_narrow_neuron_one(
        run_dir: Path) -> None:
    """The same server (full attention, 47 usable blocks) at concurrency 4: vLLM's
    scheduler spreads the hits over a wider range of arrival timings than the Neuron
    plugin's (one prefill at a time, never beside a decode); a measurement below the
    Neuron range but inside vLLM's PASSes against vLLM's and FAILs against Neuron's, and
    each reason says how wide a range it accepted."""
    cpu, neuron = _expected(run_dir, "cpu"), _expected(run_dir, "neuron")
    wide = (cpu["served_band_lo"], cpu["served_band_hi"])
    narrow = (neuron["served_band_lo"], neuron["served_band_hi"])
    assert narrow[1] - narrow[0] < wide[1] - wide[0] - 0.05, (narrow, wide)
    t = 0.02
    measured = narrow[0] - t - 0.01
    assert wide[0] - t <= measured, "the premise: vLLM's range accepts it"

    def verdict(expected: dict[str, Any]) -> Any:
        return decide(measured, expected["served_ratio"], max_diff=t,
                      band=(expected["served_band_lo"], expected["served_band_hi"]),
                      concurrency=4, note=None, predicted_at=expected["served_concurrency"],
                      evicted_blocks=expected["served_evicted_blocks"],
                      scheduler=expected["expected_scheduler"])

    old, new = verdict(cpu), verdict(neuron)
    assert old.status == "PASS" and new.status == "FAIL", (old.detail, new.detail)
    assert "the Neuron plugin's scheduler model (NeuronAsyncScheduler)" in new.detail
    for v, (lo, hi), point in ((old, wide, cpu["served_ratio"]),
                               (new, narrow, neuron["served_ratio"])):
        assert lo <= point <= hi
        assert v.accepted == pytest.approx((max(0.0, lo - t), min(1.0, hi + t)))
        assert f"accepted {v.accepted[0]:.2%}-{v.accepted[1]:.2%} " \
               f"({(v.accepted[1] - v.accepted[0]) * 100:.2f} points wide)" in v.detail
    assert new.accepted_width_pp < old.accepted_width_pp - 5


def test_the_capacity_report_shows_what_each_verdict_accepted(tmp_path: Path) -> None:
    """The table, the printed lines, the JSON and the CSV of a capacity sweep carry the
    accepted interval and its width."""
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    # The fixture's cached sustained_c4 (concurrency 4, request_rate 2/s) measured 75.08%.
    expected = {"served_ratio": 0.745, "served_evicted_blocks": 12, "served_concurrency": 4,
                "max_num_seqs": 4, "max_num_batched_tokens": 1024,
                "served_band_lo": 0.70, "served_band_hi": 0.76,
                "expected_scheduler": "NeuronScheduler"}
    make_run(run / "sweep", ("a",), run_id="kv100", benches=(("cached", "sustained_c4"),),
             expected=lambda *_: expected)
    (row,) = build_capacity(run).rows
    assert row.status == "PASS"
    assert row.accepted == pytest.approx((0.68, 0.78))
    assert row.to_dict()["accepted_width_pp"] == pytest.approx(10.0)
    shown = "accepted 68.00%-78.00% (10.00 points wide)"
    assert shown in row.detail and "NeuronScheduler" in row.detail
    assert any(shown in line for line in capacity_lines(build_capacity(run)))
    s, _ = report_capacity(run)
    data = json.loads((run / "summary.json").read_text())
    assert data["rows"][0]["accepted"] == pytest.approx([0.68, 0.78])
    assert data["rows"][0]["accepted_width_pp"] == pytest.approx(10.0)
    md = (run / "report.md").read_text()
    assert "68.00%-78.00% (10.00 points wide)" in md
    header, first = (run / "results.csv").read_text().splitlines()[:2]
    assert header.endswith(",accepted_lo,accepted_hi,accepted_width_pp")
    lo, hi, width = map(float, first.split(",")[-3:])
    assert (lo, hi, width) == pytest.approx((0.68, 0.78, 10.0))
    assert s.rows[0].accepted_width_pp == width


def test_a_neuron_record_carries_the_settings_its_buckets_resolve_from(run_dir: Path) -> None:
    """The TTFT model pads to the buckets the plugin resolves from the server's
    max_model_len and neuron_config (report.ttft_predicted.neuron_padding): a Neuron
    record carries both; a cpu record neither."""
    config = {"num_batched_tokens_buckets": [256], "kv_segment_size_buckets": [256]}
    got = served_record.served_expected(W, run_dir, 16, SERVER, serving=SERVING,
                                        platform="neuron", max_model_len=512,
                                        neuron_config=config)
    assert (got["max_model_len"], got["neuron_config"]) == (512, config)
    assert "neuron_config" not in _expected(run_dir, "cpu")
