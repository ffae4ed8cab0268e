"""The scheduler model with vLLM's hybrid KV-cache manager (gpt-oss's sliding-window and
full-attention groups in one pool): its reduction to the one-request-at-a-time hybrid
model, its admission cap, and skipped decode steps."""

from __future__ import annotations

import pytest
from test_schedsim import _workload

from prefixbench.engines.hybridsim import HybridCacheSim
from prefixbench.engines.schedconfig import SchedModelError
from prefixbench.engines.schedhybrid import HybridSchedulerSim, scheduler_sim_for
from prefixbench.engines.schedsim import SchedulerSim

# (block size, max prompt blocks, usable capacity, output_len, vocab, window, budget)
SHAPES = [(16, 24, None, 0, 1 << 30, 128, 1024), (16, 20, 47, 0, 1 << 30, 128, 1024),
          (16, 16, 49, 20, 1 << 30, 128, 1024), (4, 16, 35, 3, 3, 16, 1024),
          (16, 24, 59, 10, 1 << 30, 128, 64), (16, 24, 59, 10, 1 << 30, 128, 40)]


@pytest.mark.parametrize("shape", SHAPES)
def test_concurrency_1_is_the_one_at_a_time_hybrid_model(
        shape: tuple[int, int, int | None, int, int, int, int]) -> None:
    """Given the scheduler's chunk size (its token budget) and its admission cap, the
    one-at-a-time HybridCacheSim hits and evicts exactly the same."""
    bs, max_blocks, capacity, out, vocab, window, budget = shape
    prompts = _workload(bs * 7 + out, 400, bs, max_blocks, out, vocab=vocab)
    sim = HybridSchedulerSim(bs, capacity, sliding_window=window, max_num_seqs=4,
                             max_num_batched_tokens=budget)
    want = HybridCacheSim(bs, capacity, sliding_window=window, max_chunk_tokens=budget,
                          max_admission_blocks=sim.admission_cap).replay(prompts, out)
    got = sim.replay(prompts, out, concurrency=1)
    assert got.hit_tokens == want.hit_tokens
    assert got.evicted_blocks == want.evicted_blocks
    if capacity is not None:
        assert want.evicted_blocks > 100


def test_the_sliding_window_admission_cap() -> None:
    """cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1:
    what a request's sliding-window group holds at most while its prefill recycles."""
    assert HybridSchedulerSim(16, 100, sliding_window=128,
                              max_num_batched_tokens=64).admission_cap == 13
    assert HybridSchedulerSim(16, 100, sliding_window=128, max_num_batched_tokens=64,
                              max_model_len=100).admission_cap == 8


@pytest.mark.parametrize("budget", [64, 40])
def test_skipped_decode_steps_change_nothing(budget: int) -> None:
    """Bulk-skipped decode steps leave the same hits, evictions, steps and free queue as
    stepping one at a time, though decoding requests free sliding-window blocks."""
    prompts = _workload(11, 150, 16, 20, 30)
    outs = [1 + (11 * i) % 30 for i in range(len(prompts))]

    class Counted(HybridSchedulerSim):
        """Counts the steps run one by one."""

        stepped = 0

        def _step(self) -> None:
            self.stepped += 1
            super()._step()

    def fresh() -> Counted:
        return Counted(16, 50, sliding_window=64, max_num_seqs=3,
                       max_num_batched_tokens=budget)

    fast = fresh()
    want = fast.replay(prompts, outs, concurrency=5)
    slow = fresh()
    for i, tokens in enumerate(prompts):
        while slow.in_flight >= 5:
            slow.step()
        slow.send(tokens, outs[i], concurrency=5)
    while slow.in_flight:
        slow.step()
    assert [slow.hit_tokens(i) for i in range(len(prompts))] == want.hit_tokens
    assert (slow.evicted_blocks, slow.steps) == (want.evicted_blocks, want.steps)
    assert list(slow._lru) == list(fast._lru)  # same blocks freed in the same order
    assert fast.stepped < want.steps  # some steps were skipped in bulk
    assert sum(want.preemptions) > 0


def test_the_factory_picks_the_manager() -> None:
    assert type(scheduler_sim_for("full", 16, 10)) is SchedulerSim
    hybrid = scheduler_sim_for("hybrid", 16, 10, sliding_window=32)
    assert isinstance(hybrid, HybridSchedulerSim) and hybrid.need == 2
    assert isinstance(scheduler_sim_for("hybrid", 16, 10), HybridSchedulerSim)
    with pytest.raises(SchedModelError, match="unknown KV-cache manager kind 'mamba'"):
        scheduler_sim_for("mamba", 16, 10)
