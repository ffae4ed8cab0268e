"""The scheduler model under vLLM's AsyncScheduler (prefixbench.engines.schedasync) on
hand-worked cases; tests/integration/test_schedsim_vs_vllm.py holds it to vLLM's own."""

from __future__ import annotations

import pytest
from test_schedsim import _workload

from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedhybrid import (
    AsyncHybridSchedulerSim,
    HybridSchedulerSim,
    scheduler_sim_for,
)
from prefixbench.engines.schedsim import SchedulerSim


def test_a_request_finishes_one_step_later() -> None:
    """Prefill samples token 1 (step 1), decodes sample 2 and 3 (steps 2, 3); its last
    output is processed after step 4 is scheduled, in which it is skipped."""
    sync = SchedulerSim(4).replay([(1, 2, 3, 4)], 3)
    done = AsyncSchedulerSim(4).replay([(1, 2, 3, 4)], 3)
    assert (sync.steps, done.steps) == (3, 4)
    assert done.hit_tokens == sync.hit_tokens == [0]


def test_a_finishing_request_holds_its_seat_a_step_longer() -> None:
    """max_num_seqs 1: the second request waits for the first one's last output to be
    processed, one step after its last token was scheduled."""
    prompts = [(1, 2, 3, 4), (1, 2, 3, 4, 5)]
    kw = {"max_num_seqs": 1, "max_num_batched_tokens": 64}
    sync = SchedulerSim(4, **kw).replay(prompts, 5, concurrency=2)
    done = AsyncSchedulerSim(4, **kw).replay(prompts, 5, concurrency=2)
    assert (sync.steps, done.steps) == (10, 12)
    assert done.hit_tokens == sync.hit_tokens == [0, 4]


def test_a_preempted_request_whose_last_token_was_in_flight_finishes_waiting() -> None:
    """3 blocks of 4. A (4 tokens, 3 out) and B (8 tokens, 1 out) are admitted in step 1.
    Synchronously B has finished before step 2, where A's first decode takes the block
    B freed. Asynchronously B is still running (skipped, its token in flight) when A
    needs a block: B is preempted, then its stale token ends it in the waiting queue,
    never admitted again."""
    prompts = [(1, 2, 3, 4), tuple(range(11, 19))]
    kw = {"max_num_seqs": 2, "max_num_batched_tokens": 64}
    sync = SchedulerSim(4, 3, **kw).replay(prompts, [3, 1], concurrency=2)
    done = AsyncSchedulerSim(4, 3, **kw).replay(prompts, [3, 1], concurrency=2)
    assert (sync.preemptions, done.preemptions) == ([0, 0], [0, 1])
    assert done.preempted_query_tokens == 0  # B is never looked up again
    assert (sync.steps, done.steps) == (3, 4)


@pytest.mark.parametrize(("capacity", "out"), [(None, 0), (47, 5), (29, 3)])
def test_concurrency_1_hits_as_the_synchronous_model(capacity: int | None, out: int
                                                     ) -> None:
    """One request at a time, full attention: the same hits and evictions, one more
    step per request."""
    prompts = _workload(7 + out, 300, 4, 16, out)
    want = SchedulerSim(4, capacity, max_num_batched_tokens=16).replay(prompts, out)
    got = AsyncSchedulerSim(4, capacity, max_num_batched_tokens=16).replay(prompts, out)
    assert got.hit_tokens == want.hit_tokens
    assert got.evicted_blocks == want.evicted_blocks
    assert got.steps == want.steps + len(prompts)


class _OneByOne(AsyncSchedulerSim):
    def _decode_only_steps(self) -> int:
        return 0


class _HybridOneByOne(AsyncHybridSchedulerSim):
    def _decode_only_steps(self) -> int:
        return 0


class _Counted(AsyncSchedulerSim):
    """Counts the steps run one by one."""

    stepped = 0

    def _step(self) -> None:
        self.stepped += 1
        super()._step()


class _HybridCounted(_Counted, AsyncHybridSchedulerSim):
    pass


@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize("budget", [64, 7])
def test_skipped_decode_steps_change_nothing(hybrid: bool, budget: int) -> None:
    """Bulk-skipped decode steps leave the same hits, preemptions, evictions, steps and
    free queue as stepping one at a time."""
    bs = 16 if hybrid else 4
    prompts = _workload(13, 200, bs, 12 if hybrid else 16, 20)
    outs = [1 + (7 * i) % 20 for i in range(len(prompts))]
    kw = {"max_num_seqs": 3, "max_num_batched_tokens": budget}
    if hybrid:
        fast: _Counted = _HybridCounted(bs, 28, sliding_window=64, **kw)
        slow: AsyncSchedulerSim = _HybridOneByOne(bs, 28, sliding_window=64, **kw)
    else:
        fast, slow = _Counted(bs, 30, **kw), _OneByOne(bs, 30, **kw)
    want = fast.replay(prompts, outs, concurrency=5)
    got = slow.replay(prompts, outs, concurrency=5)
    assert got.hit_tokens == want.hit_tokens and got.preemptions == want.preemptions
    assert (got.evicted_blocks, got.steps) == (want.evicted_blocks, want.steps)
    assert got.preempted_hit_tokens == want.preempted_hit_tokens
    assert list(slow._lru) == list(fast._lru) and slow._key_of == fast._key_of
    assert fast.stepped < want.steps  # some steps were skipped in bulk
    assert sum(want.preemptions) > 0


def test_the_hybrid_admission_cap_counts_two_batches_in_flight() -> None:
    """cdiv(min(window - 1 + 2 x max_num_batched_tokens, max_model_len), bs) + 1."""
    kw = {"sliding_window": 128, "max_num_batched_tokens": 64}
    assert HybridSchedulerSim(16, 100, **kw).admission_cap == 13
    assert AsyncHybridSchedulerSim(16, 100, **kw).admission_cap == 17


def test_the_factory_and_the_serving_default() -> None:
    assert type(scheduler_sim_for("full", 16, async_scheduling=True)) is AsyncSchedulerSim
    assert type(scheduler_sim_for("hybrid", 16, async_scheduling=True)
                ) is AsyncHybridSchedulerSim
    assert type(scheduler_sim_for("full", 16)) is SchedulerSim
    # vLLM's CPU platform, the bundle's servers', turns async scheduling off.
    assert Serving().async_scheduling is False
    assert Serving(4, async_scheduling=True).describe().startswith(
        "vLLM async scheduler model at concurrency 4")
