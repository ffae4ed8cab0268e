"""The block-hash prefix cache model: fixtures, the block-aligned formula, LRU details."""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.cachesim import CapacityError, PrefixCacheSim, block_hashes, replay
from prefixbench.engines.hybridsim import HybridCacheSim
from prefixbench.engines.kvcapacity import capacity_note, kv_cache_kind, usable_blocks
from prefixbench.engines.prefix_repetition import generate_prompts
from prefixbench.measure.ratios import block_aligned_expected

VOCAB = 2048  # the recorded fixtures' word-level tokenizer
TUTORIAL = {"prefix_len": 3072, "suffix_len": 1024, "vocab_size": VOCAB}


def _run(sim: PrefixCacheSim, seed: int, num_prompts: int, num_prefixes: int) -> tuple[int, int]:
    prompts = generate_prompts(seed, num_prompts, num_prefixes, **TUTORIAL)  # type: ignore[arg-type]
    result = sim.replay(p.tokens for p in prompts)
    return result.total_hit_tokens, result.query_tokens


@pytest.mark.parametrize("capacity", [None, 8192])
def test_replays_the_recorded_cached_server_to_the_token(capacity: int | None) -> None:
    # One server: high overlap, then no overlap, then sustained; all seed 0 (the fixtures).
    sim = PrefixCacheSim(128, capacity)
    assert _run(sim, 0, 50, 5) == (138240, 204800)
    assert _run(sim, 0, 50, 50) == (7936, 204800)  # 3.88%: the seed-0 contamination
    assert _run(sim, 0, 200, 5) == (615040, 819200)  # 75.08%, not the formula's 73.125%


@pytest.mark.parametrize("capacity", [None, 8192])
def test_replays_the_recorded_contamination_server(capacity: int | None) -> None:
    sim = PrefixCacheSim(128, capacity)
    assert _run(sim, 0, 50, 5) == (138240, 204800)
    assert _run(sim, 12345, 50, 50) == (0, 204800)
    assert _run(sim, 0, 50, 50) == (7936, 204800)


def _workload(
    num_prompts: int, num_prefixes: int, prefix_len: int, suffix_len: int, order_seed: int
) -> list[tuple[int, ...]]:
    """prefix_repetition-shaped prompts with distinct token ids (no accidental sharing)."""
    ppp = num_prompts // num_prefixes
    next_id = 0
    prompts: list[tuple[int, ...]] = []
    for _ in range(num_prefixes):
        prefix = tuple(range(next_id, next_id + prefix_len))
        next_id += prefix_len
        for _ in range(ppp):
            prompts.append(prefix + tuple(range(next_id, next_id + suffix_len)))
            next_id += suffix_len
    random.Random(order_seed).shuffle(prompts)  # noqa: S311 - test data order
    return prompts


@settings(max_examples=300, deadline=None)
@given(
    num_prefixes=st.integers(1, 6),
    extra=st.integers(0, 30),
    prefix_len=st.integers(0, 300),
    suffix_len=st.integers(0, 300),
    block_size=st.sampled_from([1, 2, 3, 7, 16, 32, 64, 128]),
    order_seed=st.integers(0, 2**32 - 1),
    pre_requests=st.integers(0, 3),
    bounded=st.booleans(),
)
def test_agrees_exactly_with_the_block_aligned_formula(
    *,
    num_prefixes: int,
    extra: int,
    prefix_len: int,
    suffix_len: int,
    block_size: int,
    order_seed: int,
    pre_requests: int,
    bounded: bool,
) -> None:
    if prefix_len + suffix_len == 0:
        return
    num_prompts = num_prefixes + extra
    prompts = _workload(num_prompts, num_prefixes, prefix_len, suffix_len, order_seed)
    prompts = [prompts[0]] * pre_requests + prompts  # ready check / warmups
    per_prompt = -(-(prefix_len + suffix_len) // block_size)
    capacity = per_prompt * len(prompts) if bounded else None  # never evicts
    got = replay(prompts, block_size, capacity)
    want = block_aligned_expected(num_prompts, num_prefixes, prefix_len, suffix_len,
                                  block_size, pre_requests=pre_requests)
    assert (got.total_hit_tokens, got.query_tokens) == (want.hit_tokens, want.query_tokens)
    assert got.requests == want.requests
    assert got.evicted_blocks == 0


def test_block_hashes_are_chained_and_full_blocks_only() -> None:
    a = block_hashes([1, 2, 3, 4, 5], 2)
    assert len(a) == 2
    b = block_hashes([9, 9, 3, 4], 2)
    assert a[0] != b[0]
    assert a[1] != b[1]  # same tokens 3,4 but a different prefix
    assert block_hashes((1, 2, 3, 4), 2) == a


def test_lru_evicts_least_recent_and_tail_blocks_first() -> None:
    sim = PrefixCacheSim(block_size=4, capacity_blocks=3)
    a = tuple(range(8))  # blocks a0 a1
    b = tuple(range(100, 108))  # blocks b0 b1
    assert sim.run((*a, 99)) == 0  # a0 a1 + a partial block
    assert sim.run(b) == 0  # needs 2 blocks: 1 free + evict a1 (the tail of a)
    assert sim.evicted_blocks == 1
    assert sim.run((*a, 98)) == 4  # a0 survived, a1 did not
    assert sim.hit_tokens_total == 4


def test_held_blocks_are_not_evicted_while_a_request_runs() -> None:
    sim = PrefixCacheSim(block_size=4, capacity_blocks=4)
    first = sim.begin(tuple(range(8)))
    assert sim.cached_blocks == 2
    with pytest.raises(CapacityError):
        sim.begin(tuple(range(100, 112)))  # 3 blocks, only 2 free, 2 held
    sim.finish(first)
    again = sim.begin(tuple(range(100, 112)))
    assert sim.evicted_blocks == 1
    sim.finish(again)


def test_decode_blocks_take_room() -> None:
    sim = PrefixCacheSim(block_size=4, capacity_blocks=6)
    a = tuple(range(8))
    sim.run((*a, 50), output_len=8)  # 9 + 7 kv tokens = 4 blocks: 2 prompt, 2 decode
    sim.run((*tuple(range(200, 208)), 51), output_len=8)  # evicts 2 of the first
    assert sim.evicted_blocks == 2
    assert sim.run((*a, 52)) == 8  # decode blocks went first (tail first), prefix stayed


def test_a_prompt_larger_than_the_cache_is_refused() -> None:
    with pytest.raises(CapacityError, match="needs 3 KV blocks"):
        PrefixCacheSim(4, 2).run(tuple(range(12)))


def test_fully_cached_prompt_still_recomputes_its_last_block() -> None:
    sim = PrefixCacheSim(4)
    p = tuple(range(8))
    assert sim.run(p) == 0
    assert sim.run(p) == 4
    bounded = PrefixCacheSim(4, 10)
    assert bounded.run(p) == 0
    assert bounded.run(p) == 4
    assert bounded.run(p) == 4


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    num_prefixes=st.integers(1, 5),
    extra=st.integers(0, 15),
    prefix_len=st.integers(0, 200),
    suffix_len=st.integers(1, 100),
    block_size=st.sampled_from([4, 16, 32, 128]),
)
def test_vllm_generated_prompts_agree_with_the_block_aligned_formula(
    *, seed: int, num_prefixes: int, extra: int, prefix_len: int, suffix_len: int,
    block_size: int,
) -> None:
    num_prompts = num_prefixes + extra
    prompts = generate_prompts(seed, num_prompts, num_prefixes, prefix_len=prefix_len,
                               suffix_len=suffix_len, vocab_size=1 << 20)
    got = replay([p.tokens for p in prompts], block_size)
    want = block_aligned_expected(num_prompts, num_prefixes, prefix_len, suffix_len,
                                  block_size)
    assert (got.total_hit_tokens, got.query_tokens) == (want.hit_tokens, want.query_tokens)


def test_array_prompts_give_the_same_hits_as_tuples() -> None:
    prompts = _workload(40, 4, 300, 77, order_seed=3)
    as_tuples = replay(prompts, 16, 400)
    as_arrays = replay([array("I", p) for p in prompts], 16, 400)
    assert as_arrays.hit_tokens == as_tuples.hit_tokens
    assert as_arrays.evicted_blocks == as_tuples.evicted_blocks
    sim = PrefixCacheSim(16)
    sim.run(array("I", prompts[0]))
    with pytest.raises(TypeError, match="one representation"):
        sim.run(prompts[0])


# -- agreement with vLLM's KVCacheManager (tests/integration/test_cachesim_vs_vllm.py) ------

MINIMAL = [tuple(range(1, 19)), tuple(range(1, 9)), (*range(1, 8), *range(19, 27)),
           tuple(range(1, 19))]


def test_a_recomputed_block_is_a_second_cached_copy_as_in_vllm() -> None:
    # vLLM 0.32's KVCacheManager, block 4, num_gpu_blocks 7 (6 usable): hits 0, 4, 4, 8.
    # Prompt 2 (1..8: two whole blocks, both cached) hits one block and recomputes 5..8
    # into a second physical block, cached too (both copies kept): it takes room, so
    # prompt 3 evicts 9..12 as well as 13..16, and prompt 4 hits 8 tokens, not 12.
    assert replay(MINIMAL, 4, 6).hit_tokens == [0, 4, 4, 8]
    sim = PrefixCacheSim(4, 6)
    hits = []
    for tokens in MINIMAL:  # the begin/finish path agrees with the serial one
        handle = sim.begin(tokens)
        sim.finish(handle)
        hits.append(handle.hit_tokens)
    assert hits == [0, 4, 4, 8]


def test_a_key_stays_cached_while_any_copy_lives() -> None:
    sim = PrefixCacheSim(4, 4)
    a = tuple(range(8))
    assert sim.run(a) == 0  # a0 a1
    assert sim.run(a) == 4  # a1 recomputed: two copies of a1, 3 blocks cached
    assert sim.cached_blocks == 3
    assert sim.run(tuple(range(100, 108))) == 0  # 1 free + evicts the LRU front (old a1)
    assert sim.evicted_blocks == 1
    assert sim.run((*a, 99)) == 8  # the new copy of a1 still serves the hit


def test_usable_capacity_excludes_the_null_block() -> None:
    assert usable_blocks(8192) == 8191
    assert usable_blocks(None) is None
    assert usable_blocks(1) is None


#: ``vllm:cache_config_info`` of the recorded CPU server (full attention only) and, from
#: vLLM 0.32's get_max_concurrency_for_kv_cache_config with 20000 blocks of 16 tokens and
#: max_model_len 8192: full attention alone (512 blocks a request) and full + sliding
#: window 128 (gpt-oss's layout, 2048 tokens in flight: 649 blocks a request).
RECORDED = {"block_size": "128", "num_gpu_blocks": "8192", "kv_cache_max_concurrency": "128.0",
            "kv_cache_size_tokens": "1048576", "sliding_window": "None",
            "mamba_block_size": "None", "mamba_cache_mode": "none",
            "effective_attention_block_size": "128"}
FULL_16 = {"block_size": "16", "num_gpu_blocks": "20000",
           "kv_cache_max_concurrency": "39.0625", "kv_cache_size_tokens": "320000"}
HYBRID_16 = {"block_size": "16", "num_gpu_blocks": "20000", "sliding_window": "128",
             "kv_cache_max_concurrency": "30.816640986132512",
             "kv_cache_size_tokens": "252449"}


def test_capacity_note_names_the_hybrid_kv_cache_manager() -> None:
    assert capacity_note(RECORDED) is None
    assert capacity_note(FULL_16) is None
    assert capacity_note({**FULL_16, "sliding_window": "4096"}) is None  # HMA off
    note = capacity_note(HYBRID_16)
    assert note is not None
    assert "hybrid KV-cache manager is on" in note and "649" in note and "512" in note
    assert "hybrid cache model applies" in note and "does not apply" not in note
    assert [kv_cache_kind(x) for x in (RECORDED, FULL_16, HYBRID_16, None)] == [
        "full", "full", "hybrid", "full"]
    assert capacity_note(None) is None and capacity_note({}) is None
    mamba = capacity_note({**RECORDED, "mamba_cache_mode": "align"})
    assert mamba is not None and "Mamba" in mamba
    assert kv_cache_kind({**RECORDED, "mamba_cache_mode": "align"}) == "mamba"
    old = capacity_note({"block_size": "16", "num_gpu_blocks": "100",
                         "sliding_window": "128"})
    assert old is not None and "cannot be told" in old
    assert kv_cache_kind({"block_size": "16", "num_gpu_blocks": "100",
                          "sliding_window": "128"}) == "unknown"


def test_whatif_models_the_usable_capacity_of_cache_config_info() -> None:
    from prefixbench.engines.workloads import Workload  # noqa: PLC0415
    from prefixbench.measure.metrics import CacheConfig  # noqa: PLC0415
    from prefixbench.predict import whatif  # noqa: PLC0415 - whatif's wiring only

    assert whatif.server_capacity(CacheConfig.from_labels(RECORDED)) == (8191, None)
    assert whatif.server_capacity(None) == (None, None)
    w = Workload.from_dict({"name": "w", "prefix_repetition_prefix_len": 64,
                            "prefix_repetition_suffix_len": 30,
                            "prefix_repetition_num_prefixes": 4,
                            "prefix_repetition_output_len": 8, "num_prompts": 40,
                            "max_concurrency": 1})
    small = CacheConfig.from_labels({**RECORDED, "block_size": "16", "num_gpu_blocks": "20",
                                     "kv_cache_max_concurrency": "None"})
    pred = whatif.predict(w, block_size=16, cache_config=small)
    assert pred.capacity_blocks == 19 and pred.note is None
    assert pred == whatif.predict(w, block_size=16, capacity_blocks=19)
    assert pred.evicted_blocks > 0
    # A hybrid server: its usable capacity, replayed through the hybrid cache model.
    hybrid = whatif.predict(w, block_size=16, cache_config=CacheConfig.from_labels(HYBRID_16))
    assert hybrid.capacity_blocks == 19999
    assert hybrid.note is not None and "hybrid KV-cache manager is on" in hybrid.note
    assert "sliding window 128 (cache_config_info)" in hybrid.note
    assert "hybrid (sliding window 128" in hybrid.method
    long = Workload.from_dict({**w.to_dict(), "prefix_repetition_prefix_len": 320})
    hybrid = whatif.predict(long, block_size=16,
                            cache_config=CacheConfig.from_labels(HYBRID_16))
    sim = HybridCacheSim(16, 19999, sliding_window=128)
    prompts = whatif.prefix_repetition_tokens(long)
    assert hybrid.hit_tokens == sum(sim.run(p, 8) for p in prompts)
    # The second request of a prefix misses in the sliding-window group: fewer hits
    # than full attention's.
    full = whatif.predict(long, block_size=16, capacity_blocks=19999)
    assert hybrid.ratio is not None and full.ratio is not None
    assert hybrid.ratio < full.ratio
    # The window the labels do not report is gpt-oss's, and the note says so.
    unsaid = whatif.server_cache_model(CacheConfig.from_labels(
        {**HYBRID_16, "sliding_window": "None"}))
    assert unsaid[:2] == (19999, CacheModel("hybrid")) and unsaid[2] is not None
    assert "sliding window 128 assumed" in unsaid[2]
    # A kind that cannot be told: full attention, unbounded, and the note says so.
    old = CacheConfig.from_labels({"block_size": "16", "num_gpu_blocks": "100",
                                   "sliding_window": "128"})
    capacity, model, note = whatif.server_cache_model(old)
    assert (capacity, model) == (None, FULL_ATTENTION)
    assert note is not None and "replayed as full attention" in note
