"""One replay of a bench for its three callers: the record's served expectation
(:func:`prefixbench.bench.benchrun.served_expected`), the plan's estimate
(:func:`prefixbench.config.workload_estimate.estimate`) and the what-if
(:func:`prefixbench.predict.whatif.predict`) give the same expectation and the same range
over arrival timings for one workload and one server: the ready check alone, then the
warmups at the workload's concurrency, then its prompts, as ``vllm bench serve`` sends
them (:mod:`prefixbench.predict.benchreplay`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.bench.benchrun import BenchRequest, served_expected
from prefixbench.config.workload_estimate import estimate, sizing_of
from prefixbench.engines.schedconfig import Serving, bench_phases, bench_serving
from prefixbench.engines.workloads import Workload
from prefixbench.measure.metrics import CacheConfig
from prefixbench.predict import whatif

#: A server on the cpu platform, blocks of 16, a pool tight enough to evict.
SETTINGS = {"prefixbench_platform": "cpu", "vllm_service_block_size": 16,
            "vllm_service_max_num_seqs": 4, "vllm_service_max_num_batched_tokens": 64,
            "vllm_service_num_gpu_blocks_override": 21, "vllm_service_model": "tiny"}


def _workload(**values: object) -> Workload:
    return Workload.from_dict({
        "name": "w", "prefix_repetition_prefix_len": 96, "prefix_repetition_suffix_len": 40,
        "prefix_repetition_num_prefixes": 3, "prefix_repetition_output_len": 6,
        "num_prompts": 24, "max_concurrency": 4, "seed": 5, "num_warmups": 3,
        "ready_check_timeout_sec": 60, **values})


def _three(w: Workload, tmp_path: Path, gpt_oss: bool
           ) -> list[tuple[float, tuple[float, float] | None]]:
    settings = {**SETTINGS, "vllm_service_model": "openai/gpt-oss-20b" if gpt_oss
                else "tiny"}
    sizing = sizing_of(settings)
    plan = estimate(w, sizing)
    labels = {"block_size": "16", "enable_prefix_caching": "True", "num_gpu_blocks": "21"}
    if gpt_oss:  # max_model_len 1024: 64 full-attention blocks + 13 sliding-window ones
        labels.update(sliding_window="128", kv_cache_max_concurrency=str(21 / 77),
                      kv_cache_size_tokens=str(int(21 / 77 * 1024)))
    config = CacheConfig.from_labels(labels)
    assert whatif.server_cache_model(config)[1].kind == ("hybrid" if gpt_oss else "full")
    serving = Serving(concurrency=w.max_concurrency or 1, max_num_seqs=4,
                      max_num_batched_tokens=64)
    what = whatif.predict(w, block_size=16, cache_config=config, serving=serving)
    run_dir = tmp_path / "run"
    write_tokenizer(run_dir / "tokenizer")
    req = BenchRequest(host="h", configuration="cached", workload=w, repetition=0,
                       base_url="http://h:8000", model="m", tokenizer=None,
                       vllm_executable="vllm", max_num_seqs=4, max_num_batched_tokens=64)
    record = served_expected(w, run_dir, 16, config, serving=req.serving())
    assert plan.ratio is not None and what.ratio is not None, (plan, what)
    band = ((record["served_band_lo"], record["served_band_hi"])
            if "served_band_lo" in record else None)
    return [(plan.ratio, plan.band), (what.ratio, what.band),
            (record["served_ratio"], band)]


@pytest.mark.parametrize("gpt_oss", [False, True], ids=["full", "hybrid"])
@pytest.mark.parametrize("values", [{}, {"request_rate": 40.0}, {"num_warmups": 0},
                                    {"ready_check_timeout_sec": 0, "num_warmups": 5}],
                         ids=["ready-warmups", "paced", "ready-only", "warmups-only"])
def test_record_plan_and_whatif_give_the_same_expectation_and_range(
        values: dict[str, object], gpt_oss: bool, tmp_path: Path) -> None:
    (plan, plan_band), (what, what_band), (record, record_band) = _three(
        _workload(**values), tmp_path, gpt_oss)
    assert plan == pytest.approx(what) == pytest.approx(record)
    assert plan_band is not None and what_band is not None and record_band is not None
    assert plan_band == pytest.approx(what_band)
    assert what_band == pytest.approx(record_band)


def test_the_phases_are_vllm_bench_serves() -> None:
    """The ready check alone (when it has a timeout), then the warmups at the workload's
    concurrency; copies of the first prompt given otherwise: the ready check first."""
    w = _workload()
    serving = bench_serving(w, max_num_seqs=4, max_num_batched_tokens=64)
    assert (serving.concurrency, serving.ready, serving.warmups) == (4, 1, 3)
    assert bench_serving(_workload(max_concurrency=None)).concurrency == 24
    no_check = _workload(ready_check_timeout_sec=0)
    assert (bench_serving(no_check).ready, bench_serving(no_check).warmups) == (0, 3)
    assert (bench_phases(w, Serving(), 1).ready, bench_phases(w, Serving(), 1).warmups) == (1, 0)
    assert bench_phases(None, Serving(concurrency=3)) == Serving(concurrency=3)
    with pytest.raises(ValueError, match="pre_requests must be >= 0"):
        bench_phases(w, Serving(), -1)
