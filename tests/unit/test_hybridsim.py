"""The hybrid KV-cache manager model on hand-worked cases (vLLM 0.32's own behaviour is
checked request by request in ``tests/integration/test_cachesim_vs_vllm.py``)."""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixbench.engines.cachemodel import CacheModel
from prefixbench.engines.cachesim import CapacityError, PrefixCacheSim
from prefixbench.engines.hybridsim import HybridCacheSim, admission_cap, cache_sim_for
from prefixbench.predict.replay import replay_requests


def _words(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(1, 1 << 30) for _ in range(n))


def test_reference_eviction_case_hybrid_zero_full_attention_512() -> None:
    # REFERENCE.md, measured on the fleet: A, B (A's prefix), C, D, then A again with
    # --num-gpu-blocks-override 18 (17 usable) hit 0 with the hybrid manager, 512 with
    # it disabled, 512 with 36 blocks. By hand, block 128, A = C = D = 640 tokens:
    # A takes 5 sliding-window + 5 full-attention blocks and caches window block 3 and
    # full blocks 0-4; freed window group first: queue [S3, F4..F0]. B (600 tokens) hits
    # 512 and moves S3, F3..F0 to the back. C takes 10 never-used blocks. D needs 10
    # with 5 uncached left: it evicts F4, S3, F3, F2, F1, so A's window block is gone.
    rng = random.Random(5)  # noqa: S311 - test data
    a = _words(rng, 640)
    c, d = _words(rng, 640), _words(rng, 640)
    seq = [a, a[:600], c, d, a]
    hybrid = HybridCacheSim(128, 17)
    assert [hybrid.run(p, 1) for p in seq[:4]] == [0, 512, 0, 0]
    assert hybrid.evicted_blocks == 5
    assert hybrid.run(a, 1) == 0
    full = PrefixCacheSim(128, 17)
    assert [full.run(p, 1) for p in seq] == [0, 512, 0, 0, 512]
    same_bytes = HybridCacheSim(128, 35)
    assert [same_bytes.run(p, 1) for p in seq] == [0, 512, 0, 0, 512]


def test_a_finishing_request_frees_the_window_group_first() -> None:
    # P (5 blocks of 128) caches window block 3 and full blocks 0-4; freed window group
    # first, so S3 is the front of the cached queue. Q (6 + 6 blocks) finds 11 never-used
    # blocks in the pool of 17 and evicts one: S3, and P's resend hits 0 (vLLM: 0).
    # Were full attention freed first, Q would evict F4, which the resend never needs.
    rng = random.Random(9)  # noqa: S311
    p, q = _words(rng, 640), _words(rng, 768)
    sim = HybridCacheSim(128, 17)
    assert [sim.run(x) for x in (p, q, p)] == [0, 0, 0]
    other = HybridCacheSim(128, 17, group_order=("full", "sliding"))
    assert [other.run(x) for x in (p, q, p)] == [0, 0, 512]


def test_two_prompts_sharing_600_tokens_hit_512() -> None:
    # REFERENCE.md: two 640-token prompts sharing 600 tokens, block 128: 512.
    rng = random.Random(1)  # noqa: S311
    shared = _words(rng, 600)
    sim = HybridCacheSim(128)
    assert sim.run(shared + _words(rng, 40)) == 0
    assert sim.run(shared + _words(rng, 40)) == 512


def test_window_group_keeps_only_the_tail_before_the_prompt_end() -> None:
    # Block 16, window 128: a hit needs 8 contiguous cached window blocks. A prompt of
    # 321 tokens caches window blocks 12-19 only (the 8 before token 320).
    rng = random.Random(2)  # noqa: S311
    p = _words(rng, 321)
    sim = HybridCacheSim(16)
    assert sim.run(p) == 0
    assert sim.run(p) == 320  # a resend: 20 blocks, the window tail is cached
    # A prefix ending inside the tail: full attention hits 12 blocks, the window group
    # has no 8-block run in blocks 0-11 and no leading run: 0 (full attention: 192).
    assert sim.run(p[:200]) == 0
    assert PrefixCacheSim(16).replay([p, p[:200]]).hit_tokens == [0, 192]


def test_a_block_aligned_resend_stops_one_block_short() -> None:
    rng = random.Random(3)  # noqa: S311
    p = _words(rng, 320)  # 20 whole blocks: the hit is capped at 319 tokens
    sim = HybridCacheSim(16)
    assert [sim.run(p), sim.run(p)] == [0, 304]


def test_a_shared_prefix_the_window_group_lacks_is_pinned_for_the_next_sibling() -> None:
    # The second sibling finds 10 full-attention blocks but no window run: it hits 0
    # and caches the window tail ending at the shared prefix (shared_prefix_boundary),
    # so the third sibling hits the whole shared prefix.
    rng = random.Random(4)  # noqa: S311
    shared = _words(rng, 160)
    sim = HybridCacheSim(16)
    hits = [sim.run(shared + _words(rng, 240)) for _ in range(3)]
    assert hits == [0, 0, 160]


def test_a_short_shared_prefix_hits_without_a_full_window() -> None:
    # Fewer than 8 leading blocks: a leading run of cached window blocks is a hit.
    rng = random.Random(6)  # noqa: S311
    p = _words(rng, 90)  # window tail: blocks 0-4 (the 8 before token 89, clipped)
    sim = HybridCacheSim(16)
    assert [sim.run(p), sim.run(p[:81] + _words(rng, 30))] == [0, 80]


def test_decode_and_window_freeing_keep_the_pool_consistent() -> None:
    rng = random.Random(7)  # noqa: S311
    sim = HybridCacheSim(16, 40)
    prompts = [_words(rng, rng.randrange(1, 300)) for _ in range(60)]
    prompts += prompts[::3]
    for p in prompts:
        sim.run(p, 25)
        assert sim._held == 0  # every block is back in the free queue
        assert len(sim._lru) == sim.cached_blocks <= 40
    assert sim.evicted_blocks > 0


def test_capacity_errors_name_the_blocks() -> None:
    rng = random.Random(8)  # noqa: S311
    p = _words(rng, 100)  # 7 blocks of 16 in each group
    with pytest.raises(CapacityError, match="needs 14 free KV blocks"):
        HybridCacheSim(16, 10).run(p)
    # Window 32, chunks of 16: vLLM caps the window group's admission at
    # cdiv(31 + 16, 16) + 1 = 4 blocks (7 + 4 = 11). A whole-prompt prefill still needs
    # 14; a chunked one frees window blocks as it goes and peaks at 11.
    with pytest.raises(CapacityError, match="prefill of 100 tokens"):
        HybridCacheSim(16, 11, sliding_window=32, max_admission_blocks=4).run(p)
    chunked = HybridCacheSim(16, 11, sliding_window=32, max_admission_blocks=4,
                             max_chunk_tokens=16)
    assert [chunked.run(p), chunked.run(p)] == [0, 96]


def test_a_chunked_server_s_admission_cap_is_the_default() -> None:
    """A server always builds its manager with ``max_in_flight_tokens``: chunks of 16
    (one batch in flight) cap the window group's admission as vLLM does, so the pool of
    11 a server serves is not refused; without chunks the cap never binds."""
    p = _words(random.Random(8), 100)  # noqa: S311
    chunked = HybridCacheSim(16, 11, sliding_window=32, max_chunk_tokens=16)
    assert chunked.max_admission_blocks == admission_cap(32, 16, 16) == 4
    assert [chunked.run(p), chunked.run(p)] == [0, 96]
    assert HybridCacheSim(16, 11, sliding_window=32).max_admission_blocks is None
    assert admission_cap(128, 64, 16) == 13
    assert admission_cap(128, 2 * 64, 16, max_model_len=100) == 8
    # The what-if's replay at a server's chunk size predicts the pool, not refuses it.
    hybrid = CacheModel("hybrid", sliding_window=32).chunked(16)
    got = replay_requests([array("q", p)] * 2, [1, 1], block_size=16, capacity_blocks=11,
                          method="test", cache_model=hybrid)
    assert (got.ratio, got.hit_tokens) == (96 / 200, 96)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([4, 16]), st.sampled_from([16, 128]))
def test_unbounded_equals_a_pool_too_big_to_evict_and_never_beats_full_attention(
        seed: int, block_size: int, window: int) -> None:
    rng = random.Random(seed)  # noqa: S311
    roots = [_words(rng, 400) for _ in range(3)]
    prompts = [rng.choice(roots)[:rng.randrange(1, 400)] + _words(rng, rng.randrange(0, 40))
               for _ in range(30)]
    unbounded = HybridCacheSim(block_size, sliding_window=window).replay(prompts)
    big = HybridCacheSim(block_size, 10_000, sliding_window=window).replay(prompts, 7)
    assert big.hit_tokens == unbounded.hit_tokens and big.evicted_blocks == 0
    full = PrefixCacheSim(block_size).replay(prompts)
    assert all(h <= f for h, f in zip(unbounded.hit_tokens, full.hit_tokens, strict=True))


def test_factory_and_argument_errors() -> None:
    assert isinstance(cache_sim_for("full", 16, 10), PrefixCacheSim)
    sim = cache_sim_for("hybrid", 16, 10, sliding_window=64, max_chunk_tokens=32)
    assert isinstance(sim, HybridCacheSim)
    assert (sim.sliding_window, sim.need, sim.max_chunk_tokens) == (64, 4, 32)
    assert cache_sim_for("hybrid", 128).need == 1  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="unknown KV-cache manager kind"):
        cache_sim_for("mamba", 16)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group_order"):
        HybridCacheSim(16, group_order=("full", "full"))
    with pytest.raises(ValueError, match="sliding_window"):
        HybridCacheSim(16, sliding_window=1)
    with pytest.raises(TypeError, match="one representation"):
        s = HybridCacheSim(16)
        s.run((1, 2, 3))
        s.run(__import__("array").array("q", [1, 2, 3]))
