"""The callers of the cache models pick the hybrid one for a hybrid server: the what-if
(``--kv-cache hybrid``), the capacity curve, the served expectation, the bench's record
and the capacity-sweep report; the report says which KV-cache manager a host ran."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from test_cachesim import FULL_16, HYBRID_16, RECORDED
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import benchrun
from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.hybridsim import HybridCacheSim
from prefixbench.engines.kvcapacity import kv_cache_line
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.frontend import cli
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.metrics import CacheConfig
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.predict import whatif
from prefixbench.predict.capacity_curve import predict_curve
from prefixbench.predict.served import served_curve, served_expectation
from prefixbench.report import capacity
from prefixbench.report.build import kv_cache_of

HYBRID = CacheModel("hybrid")
HIGH_OVERLAP = tutorial_workloads()[0].with_seed(0)  # 5 prefixes of 24 blocks, 50 prompts


def long_prefix() -> Workload:
    """Prefixes of 16 blocks of 16 tokens, twice the 8 blocks a 128-token window needs:
    the second request of a prefix misses in the sliding-window group."""
    return Workload.from_dict({
        "name": "w", "prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 32,
        "prefix_repetition_num_prefixes": 3, "prefix_repetition_output_len": 4,
        "num_prompts": 12, "max_concurrency": 1})


def _whatif(*extra: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["whatif", "--platform", "cpu", "--workload", "high_overlap", *extra],
                    out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _ratio(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("predicted ratio"))


def test_whatif_kv_cache_hybrid_replays_through_the_hybrid_model() -> None:
    code, full, _ = _whatif("--capacity-blocks", "600")
    assert code == 0 and "full attention (one KV cache group)" in full
    code, hybrid, _ = _whatif("--capacity-blocks", "600", "--kv-cache", "hybrid")
    assert code == 0 and "hybrid (sliding window 128 + full attention" in hybrid
    sim = HybridCacheSim(128, 600, sliding_window=128)
    prompts = whatif.prefix_repetition_tokens(HIGH_OVERLAP)
    hits = sum(sim.run(p, HIGH_OVERLAP.prefix_repetition_output_len) for p in prompts)
    assert _ratio(hybrid) == f"predicted ratio: {hits / sim.query_tokens_total:.4%}"
    assert _ratio(hybrid) != _ratio(full)
    code, wide, _ = _whatif("--capacity-blocks", "600", "--kv-cache", "hybrid",
                            "--sliding-window", "4096")
    assert code == 0 and "sliding window 4096" in wide and _ratio(wide) != _ratio(hybrid)
    code, _, err = _whatif("--kv-cache", "hybrid", "--sliding-window", "1")
    assert code == 2 and "--sliding-window" in err and err.count("\n") == 1


def test_the_capacity_curve_runs_the_model_asked_for() -> None:
    curve = predict_curve(HIGH_OVERLAP, block_size=128, capacities=[300, 600],
                          cache_model=HYBRID)
    for point in (*curve.points, curve.unbounded):
        single = whatif.predict(HIGH_OVERLAP, block_size=128,
                                capacity_blocks=point.capacity_blocks, cache_model=HYBRID)
        assert (point.ratio, point.evicted_blocks) == (single.ratio, single.evicted_blocks)
    full = predict_curve(HIGH_OVERLAP, block_size=128, capacities=[300, 600])
    assert curve.unbounded.ratio is not None and full.unbounded.ratio is not None
    assert curve.unbounded.ratio < full.unbounded.ratio
    _, out, _ = _whatif("--capacity-curve", "600", "--kv-cache", "hybrid")
    assert "hybrid (sliding window 128" in out.splitlines()[0]
    assert f"{curve.unbounded.ratio:.2%}" in out


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("run") / "tokenizer")


def test_the_served_expectation_replays_through_the_servers_model(tok: Path) -> None:
    w = long_prefix()
    full = served_expectation(w, tok, 16)
    assert full == served_expectation(w, tok, 16, cache_model=FULL_ATTENTION)
    hybrid = served_expectation(w, tok, 16, cache_model=HYBRID)
    _, unbounded = served_curve(w, tok, 16, [1], HYBRID)
    assert hybrid.hit_tokens == hybrid.unbounded_hit_tokens == unbounded.hit_tokens
    assert hybrid.hit_tokens < full.hit_tokens
    # The junction counts stay full attention's (re-encoding, not the window group).
    assert (hybrid.lost_blocks, hybrid.gained_blocks, hybrid.junction_resplits) == (
        full.lost_blocks, full.gained_blocks, full.junction_resplits)
    assert hybrid.note is not None and "hybrid (sliding window 128" in hybrid.note
    bounded = served_expectation(w, tok, 16, capacity_blocks=60, cache_model=HYBRID)
    [point], _ = served_curve(w, tok, 16, [60], HYBRID)
    assert bounded.hit_tokens == point.hit_tokens


def test_the_bench_record_uses_the_model_its_server_reported(tok: Path) -> None:
    w = long_prefix()
    run_dir = tok.parent
    got = benchrun.served_expected(w, run_dir, 16, CacheConfig.from_labels(HYBRID_16))
    want = served_expectation(w, tok, 16, capacity_blocks=19999, cache_model=HYBRID)
    assert got["served_ratio"] == want.ratio
    assert "hybrid cache model applies" in got["served_note"]
    full = benchrun.served_expected(w, run_dir, 16, CacheConfig.from_labels(FULL_16))
    assert full["served_ratio"] == served_expectation(w, tok, 16, capacity_blocks=19999).ratio
    assert "served_note" not in full and full["served_ratio"] > got["served_ratio"]
    # The hybrid record keeps full attention's unbounded replay of the same prompts
    # beside its own (the report's sliding-window cause is their difference).
    assert got["served_full_attention_ratio"] == full["served_unbounded_ratio"] \
        > got["served_unbounded_ratio"]


def test_the_sweep_report_curve_uses_the_servers_model(tok: Path) -> None:
    w = long_prefix()
    layout = RunLayout.of(tok.parent)
    hybrid = capacity._curve("w", w, 16, layout, [60], model=HYBRID)
    full = capacity._curve("w", w, 16, layout, [60])
    assert hybrid.unbounded_ratio is not None and full.unbounded_ratio is not None
    assert hybrid.unbounded_ratio < full.unbounded_ratio
    assert hybrid.note is not None and "KV-cache model: hybrid" in hybrid.note
    assert full.note is None or "KV-cache model" not in full.note


def _record(labels: dict[str, str] | None) -> BenchmarkRecord:
    """A test double: kv_cache_of reads only a record's metrics_delta."""
    return cast(BenchmarkRecord, SimpleNamespace(
        metrics_delta={"cache_config": labels} if labels is not None else {}))


def test_the_report_says_which_kv_cache_manager_a_host_ran() -> None:
    assert "hybrid (sliding window + full attention" in kv_cache_line(HYBRID_16)
    assert "sliding window 128" in kv_cache_line(HYBRID_16)
    gpt_oss: dict[str, Any] = {**HYBRID_16, "sliding_window": "None"}
    assert "not reported, gpt-oss's 128 assumed" in kv_cache_line(gpt_oss)
    assert kv_cache_line(RECORDED).startswith("KV cache: full attention (one KV cache group")
    assert "assumed" in kv_cache_line({"block_size": "16", "num_gpu_blocks": "100"})
    assert "not told" in kv_cache_line({"block_size": "16", "num_gpu_blocks": "100",
                                        "sliding_window": "128"})
    assert "not observed" in kv_cache_line(None)
    off = {**RECORDED, "enable_prefix_caching": "False"}
    on = {**HYBRID_16, "enable_prefix_caching": "True"}
    assert kv_cache_of([_record(off), _record(on)]) == kv_cache_line(on)
    assert kv_cache_of([_record(None)]) == kv_cache_line(None)
    assert kv_cache_of([]) is None


def test_the_model_config_tells_the_cache_model(tmp_path: Path) -> None:
    from prefixbench.engines.cachemodel import from_model_config, from_model_dir  # noqa: PLC0415
    from prefixbench_sim import tinyconfig, tinygptoss  # noqa: PLC0415

    gptoss = tinygptoss.model_config(tinygptoss.TinyGptOssSpec(sliding_window=64))
    assert from_model_config(gptoss) == CacheModel("hybrid", sliding_window=64)
    llama = tinyconfig.model_config(tinyconfig.TinyLlamaSpec())
    assert from_model_config(llama) == FULL_ATTENTION
    assert from_model_config({"sliding_window": 4096, "architectures": ["X"]}) is None
    assert from_model_dir(tmp_path) is None
    directory = write_tokenizer(tmp_path / "tok")
    (directory / "config.json").write_text(json.dumps(gptoss))
    assert from_model_dir(directory) == CacheModel("hybrid", sliding_window=64)
    # The what-if without --kv-cache takes it from there; --kv-cache full overrides it.
    out = io.StringIO()
    args = ["whatif", "--platform", "cpu", "--workload", "high_overlap", "--tokenizer",
            str(directory)]
    assert cli.main([*args, "--num-prompts", "10"], out=out, err=io.StringIO()) == 0
    assert "hybrid (sliding window 64" in out.getvalue()
    out = io.StringIO()
    assert cli.main([*args, "--num-prompts", "10", "--kv-cache", "full"], out=out,
                    err=io.StringIO()) == 0
    assert "full attention" in out.getvalue()


def test_the_expectation_at_the_benchs_concurrency(tok: Path) -> None:
    from prefixbench.engines.schedconfig import Serving  # noqa: PLC0415
    from prefixbench.predict.replay import replay_requests  # noqa: PLC0415
    from prefixbench.predict.served import _sent  # noqa: PLC0415

    w = Workload.from_dict({**long_prefix().to_dict(), "max_concurrency": 4})
    four = Serving(concurrency=4, max_num_seqs=4, max_num_batched_tokens=64)
    serial = served_expectation(w, tok, 16, cache_model=HYBRID)
    scheduled = served_expectation(w, tok, 16, cache_model=HYBRID, serving=four)
    # Unbounded: the hits the scheduler model gives (here the same as one at a time).
    assert scheduled.hit_tokens == scheduled.unbounded_hit_tokens == serial.hit_tokens
    assert scheduled.note is not None and "scheduler model at concurrency 4" in scheduled.note
    assert serial.note is not None and "replayed one request at a time" in serial.note
    # Bounded: the scheduler model's replay at that capacity, not the serial one (at 100
    # blocks four requests in flight hold more blocks: 1280 hit tokens against 1536).
    sent = _sent(w, tok, None)
    want = replay_requests(sent.prompts, [4] * len(sent.prompts), block_size=16,
                           capacity_blocks=100, method="x", cache_model=HYBRID, serving=four)
    got = served_expectation(w, tok, 16, capacity_blocks=100, cache_model=HYBRID,
                             serving=four)
    one = served_expectation(w, tok, 16, capacity_blocks=100, cache_model=HYBRID)
    assert got.hit_tokens == want.hit_tokens == 1280 and one.hit_tokens == 1536
    # The bench record asks for the workload's concurrency and the server's limits.
    req = benchrun.BenchRequest(host="h", configuration="cached", workload=w, repetition=1,
                                base_url="http://x", model="m", tokenizer=None,
                                vllm_executable="vllm", max_num_seqs=4,
                                max_num_batched_tokens=64)
    assert req.serving() == four


def test_the_hybrid_model_prefills_in_the_servers_chunks(tok: Path) -> None:
    # The sliding-window group frees blocks between prefill chunks, so in a tight pool
    # the chunk size changes what is evicted (on the fleet: 39.17% measured at 46 usable
    # blocks, 20.00% predicted with one chunk, 39.17% with the server's 1024).
    assert HYBRID.chunked(64) == CacheModel("hybrid", max_chunk_tokens=64)
    assert FULL_ATTENTION.chunked(64) is FULL_ATTENTION and HYBRID.chunked(None) is HYBRID
    w = long_prefix()
    whole = served_expectation(w, tok, 16, capacity_blocks=60, cache_model=HYBRID)
    chunked = served_expectation(w, tok, 16, capacity_blocks=60,
                                 cache_model=HYBRID.chunked(64))
    assert (whole.hit_tokens, chunked.hit_tokens) == (0, 256)
    # The bench record keeps the server's chunk for the report's capacity curve.
    got = benchrun.served_expected(w, tok.parent, 16, CacheConfig.from_labels(HYBRID_16))
    assert got["max_num_batched_tokens"] == 1024
    assert got["served_concurrency"] == 1  # what the capacity verdict needs above 1
    assert "served_band_lo" not in got  # one at a time: no arrival timing to vary
    from prefixbench.engines.schedconfig import Serving  # noqa: PLC0415

    four = Serving(concurrency=4, max_num_seqs=2, max_num_batched_tokens=512)
    got = benchrun.served_expected(w, tok.parent, 16, CacheConfig.from_labels(HYBRID_16),
                                   serving=four)
    assert (got["served_concurrency"], got["max_num_seqs"]) == (4, 2)
    # ... and the range over arrival timings, the point inside it (the capacity verdict
    # and the fleet's departures judge against it).
    assert got["served_band_lo"] <= got["served_ratio"] <= got["served_band_hi"]
    assert got["served_band_variants"] == 33 and "arrival timings" in got["served_band_note"]
