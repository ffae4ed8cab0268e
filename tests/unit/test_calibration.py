"""The calibration bench (prefixbench.bench.calibration): what it sends, where it runs,
that a rerun does not repeat it, that no table or verdict counts it, and that the TTFT
fit reads it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from report_runs import fixture_bench, make_run

from prefixbench.bench import benchrun, calibration, experiment
from prefixbench.config import settings
from prefixbench.engines.workloads import WorkloadError, load_workloads
from prefixbench.measure.layout import RunLayout, write_json_atomic
from prefixbench.measure.records import BenchmarkRecord, FailureRecord, ResultKey
from prefixbench.predict.ttftfit import Observation, fit_cost
from prefixbench.report.build import build_summary
from prefixbench.report.load import load_run
from prefixbench.report.ttft_predicted import host_fits

#: tests/integration/vars/small_workloads.yml's shape: prompts of 1536 + 512 tokens.
SIM_WORKLOAD = {"name": "hi", "prefix_repetition_prefix_len": 1536,
                "prefix_repetition_suffix_len": 512, "prefix_repetition_num_prefixes": 2,
                "prefix_repetition_output_len": 16, "num_prompts": 20, "max_concurrency": 1}


def host_settings(**values: Any) -> dict[str, Any]:
    result = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "/opt/tok", **values}, "h1")
    assert result.ok, result.problems
    return result.settings


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _drawn(argv: list[str]) -> tuple[int, int]:
    """The input lengths vLLM draws from for ``argv`` (vllm 0.32.0
    vllm/benchmarks/datasets/utils.py get_sampling_params: floor(len * (1 - r)) to
    ceil(len * (1 + r)); the tokenizer adds no special tokens here)."""
    length, ratio = int(_flag(argv, "--random-input-len")), float(
        _flag(argv, "--random-range-ratio"))
    return math.floor(length * (1 - ratio)), math.ceil(length * (1 + ratio))


@pytest.mark.parametrize(("workloads", "longest"), [
    ([SIM_WORKLOAD], 2048),  # the simulated fleet's half-length prompts
    ([], 4096),              # the tutorial's prompts (3072 + 1024)
])
def test_the_bench_spans_an_eighth_of_the_longest_prompt_up_to_it(
        workloads: list[dict[str, Any]], longest: int) -> None:
    s = host_settings(prefixbench_workloads=workloads)
    req = benchrun.BenchRequest.from_settings(
        "h1", s, configuration="baseline", workload="calibration", repetition=1,
        vllm_executable="/opt/v/bin/vllm")
    argv = req.argv("/tmp/r", 600)
    # vLLM's random dataset (tokenizer only, no dataset file), one request at a time,
    # per-request TTFTs and prompt lengths kept
    assert _flag(argv, "--dataset-name") == "random" and "--dataset-path" not in argv
    assert _flag(argv, "--max-concurrency") == "1" and "--save-detailed" in argv
    assert _flag(argv, "--num-prompts") == "20" and _flag(argv, "--random-output-len") == "16"
    low, high = _drawn(argv)
    assert longest // 8 - 2 <= low <= longest // 8 + 2
    assert longest - 4 <= high <= longest


def test_the_longest_prompt_fits_the_servers_max_model_len() -> None:
    mine = {"name": "mine", "dataset_name": "custom", "dataset_path": "/nonexistent.jsonl"}
    workload = calibration.calibration_workload({"vllm_service_max_model_len": 3000},
                                                load_workloads([mine]))
    argv = ["--random-input-len", str(workload.random_input_len),
            "--random-range-ratio", str(workload.random_range_ratio)]
    out_max = math.ceil(workload.random_output_len * (1 + workload.random_range_ratio))
    assert _drawn(argv)[1] + out_max <= 3000


def test_it_runs_last_on_the_baseline_server_only_and_a_rerun_skips_it(
        tmp_path: Path) -> None:
    s = host_settings()
    layout = RunLayout(tmp_path, "r")
    names = [i.workload.name for i in experiment.pending_items(s, layout.run_dir, "h1",
                                                                "baseline")]
    assert names == ["high_overlap", "no_overlap", "sustained_c4", "calibration"]
    assert "calibration" not in [i.workload.name for i in experiment.pending_items(
        s, layout.run_dir, "h1", "cached")]
    with pytest.raises(ValueError, match="no bench 'calibration'"):
        experiment.find_item(s, "calibration", 1, "cached")
    item = experiment.find_item(s, "calibration", 1, "baseline")
    record = BenchmarkRecord(
        key=ResultKey("h1", "baseline", "calibration", 1), seed=int(item.workload.seed or 0),
        bundle_version="0", started_at="2026-12-05T00:00:00+00:00",
        ended_at="2026-12-05T00:00:05+00:00",
        bench=_calibration_bench([600, 1200, 1800], lambda n: n * 1e-5),
        workload=item.workload.to_dict(), metrics_delta={}, expected={}, measured={})
    layout.write_result(record)
    assert [i.workload.name for i in experiment.pending_items(
        s, layout.run_dir, "h1", "baseline")] == ["high_overlap", "no_overlap", "sustained_c4"]
    off = host_settings(prefixbench_calibration=False)
    assert "calibration" not in [i.workload.name for i in experiment.server_items(
        off, "baseline")]


def _done(layout: RunLayout, configuration: str, workload: str, rep: int = 1) -> None:
    """A result of ``workload`` on host h1's ``configuration`` server."""
    layout.write_result(BenchmarkRecord(
        key=ResultKey("h1", configuration, workload, rep), seed=0, bundle_version="0",
        started_at="2026-12-05T00:00:00+00:00", ended_at="2026-12-05T00:00:05+00:00",
        bench=fixture_bench(configuration, "high_overlap"), workload={}, metrics_delta={},
        expected={}, measured={}))


def test_a_resume_starts_no_baseline_server_for_the_calibration_bench_alone(
        tmp_path: Path) -> None:
    """A finished run begun before the bench existed: every tutorial bench has a result,
    the calibration bench none. Resumed, nothing is pending (the baseline server is not
    started) and one line says why and how to get one; with a tutorial bench of that
    server left, it runs beside it (the server starts anyway)."""
    s = host_settings()
    layout = RunLayout(tmp_path, "r")
    tutorial = ("high_overlap", "no_overlap", "sustained_c4")
    for conf in ("baseline", "cached"):
        for wl in tutorial[1:]:
            _done(layout, conf, wl)

    def pending(conf: str) -> list[str]:
        return [i.workload.name for i in experiment.pending_items(s, layout.run_dir, "h1",
                                                                  conf)]

    assert pending("baseline") == ["high_overlap", "calibration"]
    assert experiment.calibration_skip_line(s, layout.run_dir, "h1", "baseline") == ""
    _done(layout, "baseline", "high_overlap")
    assert pending("baseline") == []
    line = experiment.calibration_skip_line(s, layout.run_dir, "h1", "baseline")
    assert line == (
        "h1: this run has no calibration bench result, and the baseline server is not "
        "started for it alone (every other bench of it is done): the TTFT fit keeps two of "
        "its four terms; a new run (a new prefixbench_run_id) has one: docs/own-traffic.md, "
        '"Calibrating the TTFT model" (whatif --calibration)')
    own = (Path(__file__).resolve().parents[2] / "docs" / "own-traffic.md").read_text()
    assert "\n#### Calibrating the TTFT model" in own
    # The cached server's benches are its own: its one missing bench still runs.
    assert pending("cached") == ["high_overlap"]
    assert experiment.calibration_skip_line(s, layout.run_dir, "h1", "cached") == ""
    # The bench action still knows the bench (a run that asks for it by name).
    assert experiment.find_item(s, "calibration", 1, "baseline").workload.name == \
        "calibration"


def test_a_declared_workload_can_neither_be_random_nor_take_its_name() -> None:
    with pytest.raises(WorkloadError, match="calibration bench's"):
        load_workloads([{"name": "r", "dataset_name": "random", "random_input_len": 100,
                         "random_output_len": 4, "num_prompts": 5}])
    result = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "/opt/tok",
                                "prefixbench_workloads": [{**SIM_WORKLOAD,
                                                           "name": "calibration"}]}, "h1")
    assert any("the name is the calibration bench's" in p for p in result.problems), \
        result.problems


def _calibration_bench(lengths: list[int], ttft: Any) -> dict[str, Any]:
    """A calibration bench's result as ``vllm bench serve --save-detailed`` writes it."""
    ttfts = [ttft(n) for n in lengths]
    ordered = sorted(ttfts)
    n = len(lengths)
    return {**fixture_bench("baseline", "high_overlap"), "completed": n, "num_prompts": n,
            "total_input_tokens": sum(lengths), "total_output_tokens": 16 * n,
            "median_ttft_ms": ordered[n // 2] * 1e3, "p99_ttft_ms": ordered[-1] * 1e3,
            "std_ttft_ms": 0.0, "median_itl_ms": 2.0, "ttfts": ttfts, "input_lens": lengths,
            "output_lens": [16] * n, "itls": [[0.002] * 15] * n, "errors": [""] * n,
            "latencies": [t + 0.03 for t in ttfts], "generated_texts": [""] * n}


def _with_calibration(run: Path, host: str = "host-a") -> None:
    workload = calibration.calibration_workload({}, [])
    bench = _calibration_bench(list(range(512, 4097, 180)),
                               lambda n: 0.01 + 2e-3 * math.ceil(n / 1024) + 20e-9 * n * n / 2)
    record = BenchmarkRecord(
        key=ResultKey(host, "baseline", "calibration", 1), seed=1000, bundle_version="0",
        started_at="2026-11-29T08:30:00+00:00", ended_at="2026-11-29T08:30:05+00:00",
        bench=bench, workload=workload.to_dict(), metrics_delta={},
        expected=calibration.expected(128, 4, 1024), measured={})
    RunLayout.of(run).write_result(record)


def test_no_table_verdict_or_fleet_check_counts_it(tmp_path: Path) -> None:
    def server(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": 4, "max_num_batched_tokens": 1024}
    without = build_summary(make_run(tmp_path / "a", ("host-a", "host-b"), expected=server))
    run = make_run(tmp_path / "b", ("host-a", "host-b"), expected=server)
    _with_calibration(run)
    failed = FailureRecord(key=ResultKey("host-b", "baseline", "calibration", 1), seed=0,
                           bundle_version="0", started_at="2026-11-29T08:30:00+00:00",
                           ended_at="2026-11-29T08:30:01+00:00", error="bench exited 1")
    write_json_atomic(RunLayout.of(run).failed_path(failed.key), failed.to_dict())
    data = load_run(run)
    assert [r.key.host for r in data.calibration] == ["host-a"]
    assert all(r.key.workload != "calibration" for r in data.records)
    assert any(w.startswith("host-b: the calibration bench has no result (bench exited 1)")
               for w in data.warnings), data.warnings
    summary = build_summary(run)
    assert summary.failures == without.failures == ()
    for mine, other in zip(summary.hosts, without.hosts, strict=True):
        assert mine.benches == other.benches and mine.verdicts == other.verdicts
    assert summary.fleet == without.fleet
    # ... and only the fit reads it: host-a's names it and fits all four terms
    fits = {row["host"]: row["fit"] for h in summary.hosts for row in h.ttft_predicted}
    assert "from benches high_overlap rep1, no_overlap rep1, calibration rep1" in fits["host-a"]
    assert "R^2" in fits["host-a"]
    assert "from benches high_overlap rep1, no_overlap rep1; " in fits["host-b"]
    assert "not separable" in fits["host-b"]
    by_host = {c.host: c.fit for c in host_fits(data, max_num_batched_tokens=1024)}
    assert by_host["host-a"].separable and not by_host["host-b"].separable
    # the spread is the tutorial benches' (the calibration's lengths vary on purpose)
    assert by_host["host-a"].spread == by_host["host-b"].spread > 0


def test_the_tail_is_measured_on_the_tutorial_benches_not_the_calibration() -> None:
    # TTFTs from known coefficients (request 10 ms, step 2 ms, token 5 us, pair 20 ns,
    # chunks of 1024): the tutorial's 2048-token prompts, whose p99 is 50 ms over the
    # model, and calibration prompts up to 4096 tokens.
    def ttft(n: int) -> float:
        chunks = [(p, min(1024, n - p)) for p in range(0, n, 1024)]
        return 10e-3 + sum(2e-3 + 5e-6 * k + 20e-9 * (k * p + k * (k + 1) / 2)
                           for p, k in chunks)
    obs = [Observation("ttft", 2048, ttft(2048))]
    obs += [Observation("ttft", n, ttft(n), calibration=True) for n in (512, 1024, 3072, 4096)]
    obs.append(Observation("itl", 2048, 2e-3 + 5e-6 + 20e-9 * 2049))
    fit = fit_cost(obs, platform="cpu", chunk=1024, measured_p99_s=ttft(2048) + 0.05)
    assert fit.separable and fit.tail_s == pytest.approx(0.05, rel=1e-6)
