"""The scheduler model (vLLM's v1 Scheduler + the full-attention prefix cache) on
hand-worked cases, and its reduction to the one-request-at-a-time cache model."""

from __future__ import annotations

import random
from array import array

import pytest

from prefixbench.engines.cachesim import CapacityError, PrefixCacheSim
from prefixbench.engines.schedsim import SchedulerSim, sched_replay


def _workload(seed: int, n: int, bs: int, max_blocks: int, out: int, *,
              vocab: int = 1 << 30) -> list[tuple[int, ...]]:
    """Prompts sharing prefixes of a few roots, cut anywhere or at block boundaries,
    with random suffixes and exact repeats; each fits ``max_blocks`` with its output."""
    rng = random.Random(seed)  # noqa: S311 - test data
    max_len = max_blocks * bs - max(out - 1, 0)
    roots = [[rng.randrange(1, vocab + 1) for _ in range(max_len)] for _ in range(8)]
    prompts: list[tuple[int, ...]] = []
    for _ in range(n):
        if prompts and rng.random() < 0.15:
            prompts.append(rng.choice(prompts[-30:]))
            continue
        root = roots[min(int(rng.expovariate(0.5)), len(roots) - 1)]
        suffix = rng.choice([0, rng.randrange(1, 3 * bs)])
        shared = (bs * rng.randrange(0, max_len // bs + 1) if rng.random() < 0.4
                  else rng.randrange(0, max_len + 1))
        shared = min(shared, max_len - min(suffix, max_len))
        tail = [rng.randrange(1, vocab + 1) for _ in range(min(suffix, max_len - shared))]
        prompts.append(tuple(root[:shared] + tail) or (1,))
    return prompts


# (block size, max prompt blocks, usable capacity, output_len, vocab)
SHAPES = [(4, 24, None, 0, 1 << 30), (4, 20, 47, 0, 1 << 30), (16, 12, 63, 20, 1 << 30),
          (2, 16, 29, 3, 3)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("budget", [1024, 16, 7])
def test_concurrency_1_is_the_one_at_a_time_cache_model(
        shape: tuple[int, int, int | None, int, int], budget: int) -> None:
    """Whatever the token budget (whole prompts or chunks of 16 or 7 tokens): the same
    hits and evictions as PrefixCacheSim.replay."""
    bs, max_blocks, capacity, out, vocab = shape
    prompts = _workload(bs * 1000 + out, 600, bs, max_blocks, out, vocab=vocab)
    want = PrefixCacheSim(bs, capacity).replay(prompts, out)
    got = SchedulerSim(bs, capacity, max_num_seqs=4, max_num_batched_tokens=budget
                       ).replay(prompts, out, concurrency=1)
    assert got.hit_tokens == want.hit_tokens
    assert got.evicted_blocks == want.evicted_blocks
    assert got.query_tokens == want.query_tokens
    assert not any(got.preemptions)
    if capacity is not None:
        assert want.evicted_blocks > 100  # the bounded shapes do evict


@pytest.mark.parametrize("concurrency", [2, 8, 32])
def test_an_unbounded_cache_hits_what_one_at_a_time_hits(concurrency: int) -> None:
    """Full attention caches a block when its computation is scheduled, and FCFS gives
    an earlier request the budget first, so without eviction concurrency changes no hit."""
    prompts = _workload(7, 400, 4, 24, 0)
    want = PrefixCacheSim(4, None).replay(prompts)
    got = SchedulerSim(4, None, max_num_seqs=8, max_num_batched_tokens=24
                       ).replay(prompts, [1 + i % 9 for i in range(len(prompts))],
                                concurrency=concurrency)
    assert got.hit_tokens == want.hit_tokens


PREFIX = tuple(range(1, 33))  # 8 blocks of 4


def test_a_request_admitted_in_the_same_step_hits_blocks_scheduled_before_it() -> None:
    """A and B share an uncached 32-token prefix and are admitted in one step: vLLM
    caches A's full blocks inside allocate_slots, when the step is scheduled, so B (after
    A in the step) hits all 8. (The integration test shows vLLM doing it.)"""
    sim = SchedulerSim(4, None, max_num_seqs=4, max_num_batched_tokens=100)
    sim.send(PREFIX + tuple(range(100, 108)), 3, concurrency=2)
    sim.send(PREFIX + tuple(range(200, 208)), 3, concurrency=2)
    sim.step()
    assert sim.running == 2 and sim.waiting == 0
    assert (sim.hit_tokens(0), sim.hit_tokens(1)) == (0, 32)


def test_a_request_waiting_for_budget_hits_the_whole_chunked_prefix() -> None:
    """Chunked prefill: A's 40-token prompt takes 16 + 16 + 8 tokens of a 16-token
    budget; B (same prompt) is admitted in step 3 with the 8 tokens A left, and hits
    (40 - 1) // 4 = 9 blocks: it needs 4 tokens, so both prefills end in step 3."""
    prompt = tuple(range(1, 41))
    sim = SchedulerSim(4, None, max_num_seqs=4, max_num_batched_tokens=16)
    sim.send(prompt, 1, concurrency=2)
    sim.send(prompt, 1, concurrency=2)
    sim.step()
    sim.step()
    assert (sim.running, sim.waiting, sim.hit_tokens(1)) == (1, 1, -1)
    sim.step()
    assert sim.hit_tokens(1) == 36
    assert sim.in_flight == 0  # one output token each: both finished in step 3
    assert sim.steps == 3


def test_max_num_seqs_queues_requests_until_one_finishes() -> None:
    """max_num_seqs 2, four requests in flight: two run; the others wait until the first
    two finish (5 tokens: step 1 prefill, steps 2-5 decode) and are admitted in step 6,
    hitting the finished requests' prompt."""
    prompt = tuple(range(1, 21))
    sim = SchedulerSim(4, 64, max_num_seqs=2, max_num_batched_tokens=256)
    for _ in range(4):
        sim.send(prompt, 5, concurrency=4)
    sim.step()
    assert (sim.running, sim.waiting) == (2, 2)
    assert [sim.hit_tokens(i) for i in range(4)] == [0, 16, -1, -1]
    for _ in range(4):
        sim.step()
    assert (sim.running, sim.waiting, sim.in_flight) == (0, 2, 2)
    sim.step()
    assert [sim.hit_tokens(i) for i in range(4)] == [0, 16, 16, 16]
    sim.drain()
    assert sim.steps == 10


def test_preemption_frees_the_last_admitted_request_which_rehits_its_own_blocks() -> None:
    """6 usable blocks of 4 tokens; A and B (8 distinct prompt tokens, 9 output tokens:
    4 blocks each) are admitted together and take 2 + 2 blocks, then 1 + 1 in step 2.
    In step 6 A needs its 4th block with none free: B (the last running) is preempted,
    freeing its 3 cached blocks tail first, and A evicts B's decode block. B is admitted
    again only once A has finished (its 13 tokens need 4 blocks): it hits its 2 prompt
    blocks, still cached (counted apart, as vLLM's preempted_hits), evicting 2 of A's."""
    sim = SchedulerSim(4, 6, max_num_seqs=2, max_num_batched_tokens=64)
    result = sim.replay([tuple(range(1, 9)), tuple(range(11, 19))], 9, concurrency=2)
    assert result.hit_tokens == [0, 0]
    assert result.preemptions == [0, 1]
    assert (result.preempted_hit_tokens, result.preempted_query_tokens) == (8, 13)
    assert result.evicted_blocks == 3
    # A: 9 steps; B again from step 10: recompute 5 tokens (+1 output), 3 decode steps.
    assert result.steps == 13


def test_the_last_running_request_is_the_one_preempted() -> None:
    """Three one-block prompts with 9 output tokens (3 blocks each) in 7 usable blocks:
    in step 6 the second request needs its third block with none free, and the third
    (admitted last) is preempted, not the first, already scheduled in the step."""
    sim = SchedulerSim(4, 7, max_num_seqs=3, max_num_batched_tokens=64)
    result = sim.replay([(1, 2, 3, 4), (11, 12, 13, 14), (21, 22, 23, 24)], 9,
                        concurrency=3)
    assert result.preemptions == [0, 0, 1]
    assert result.steps == 13


PROMPT_8 = tuple(range(1, 9))


def test_no_request_is_admitted_in_a_step_that_preempted() -> None:
    """5 usable blocks. A (P + 2 tokens) and V (P, 8 tokens) are admitted in step 1; V
    hits P's first block and recomputes the second into a copy of its own. In step 4 A
    needs a 4th block: V is preempted (its copy goes to the free queue, its partial
    block to A). V could be admitted again at once (its hit, P's blocks held by A,
    leaves it 1 block to find, and 1 is free), but vLLM admits nothing in a step that
    preempted: V waits for step 5."""
    sim = SchedulerSim(4, 5, max_num_seqs=2, max_num_batched_tokens=64)
    sim.send((*PROMPT_8, 100, 101), 9, concurrency=2)
    sim.send(PROMPT_8, 9, concurrency=2)
    for _ in range(4):
        sim.step()
    assert (sim.running, sim.waiting, sim.preempted_hit_tokens) == (1, 1, 0)
    sim.step()
    assert (sim.running, sim.waiting, sim.preempted_hit_tokens) == (2, 0, 8)


def test_a_request_that_cannot_fit_alone_is_refused() -> None:
    with pytest.raises(CapacityError, match="needs more KV blocks than the cache has"):
        SchedulerSim(4, 2).replay([tuple(range(10))])
    with pytest.raises(CapacityError, match="even alone"):
        SchedulerSim(4, 3).replay([tuple(range(10))], 8)


def test_arrival_steps_hold_requests_back() -> None:
    """A request arriving at step 10 (after the first finished at step 1) is admitted
    then, and the idle steps are counted."""
    prompt = tuple(range(1, 9))
    result = SchedulerSim(4, None).replay([prompt, prompt], 1, concurrency=4,
                                          release=[0, 10])
    assert result.hit_tokens == [0, 4]
    assert result.steps == 11


@pytest.mark.parametrize("budget", [20, 7])
def test_skipped_decode_steps_change_nothing(budget: int) -> None:
    """Bulk-skipped decode steps give the same hits, evictions and step count as
    stepping one at a time (step() never skips); with a budget of 7 tokens, chunks end
    inside blocks, and a prefill is never skipped as if it decoded."""
    prompts = _workload(3, 150, 4, 16, 12)
    outs = [1 + (7 * i) % 12 for i in range(len(prompts))]
    fast = SchedulerSim(4, 30, max_num_seqs=3, max_num_batched_tokens=budget)
    want = fast.replay(prompts, outs, concurrency=5)
    slow = SchedulerSim(4, 30, max_num_seqs=3, max_num_batched_tokens=budget)
    for i, tokens in enumerate(prompts):
        while slow.in_flight >= 5:
            slow.step()
        slow.send(tokens, outs[i], concurrency=5)
    while slow.in_flight:
        slow.step()
    assert [slow.hit_tokens(i) for i in range(len(prompts))] == want.hit_tokens
    assert (slow.evicted_blocks, slow.steps) == (want.evicted_blocks, want.steps)
    assert sum(want.preemptions) > 0 or budget == 7


def test_array_prompts_hit_as_tuples_do() -> None:
    prompts = _workload(5, 200, 4, 16, 4)
    tuples = sched_replay(prompts, 4, 40, 4, concurrency=4)
    arrays = sched_replay([array("I", p) for p in prompts], 4, 40, 4, concurrency=4)
    assert tuples.hit_tokens == arrays.hit_tokens
