"""engines.schedneuron: admission is bounded by ``max_num_seqs`` and the KV-concurrency cap,
whichever is smaller (aws-neuron-sdk v2.31.1 vllm-neuron/docs/design/vllm/
neuron-scheduler.md, "Admission Control": ``at_capacity`` is ``len(running) >=
max_num_seqs``; "Deadlock Prevention": ``len(running) >= max_kv_concurrent``).

The schedules are worked by hand as in test_schedneuron's cap test: two requests of
8 prompt tokens and 3 output tokens, block size 4, sent together; the second is admitted
at step 2 when both may run, at step 4 (after the first's prefill and two decodes) when
only one may."""

from __future__ import annotations

import pytest

from prefixbench.engines.cachesim import CapacityError
from prefixbench.engines.schedneuron import (
    NeuronAsyncSchedulerSim,
    NeuronSchedulerSim,
    max_kv_concurrent,
    neuron_scheduler_sim,
    prefill_buckets,
)

A = tuple(range(8))
B = tuple(range(100, 108))


@pytest.mark.parametrize(("max_num_seqs", "kv_concurrency", "admitted"), [
    (1, 2, {0: 1, 1: 4}),      # max_num_seqs binds although the KV cache fits two
    (1, None, {0: 1, 1: 4}),   # no cap: max_num_seqs alone
    (2, 1, {0: 1, 1: 4}),      # the KV cap binds
    (2, 2, {0: 1, 1: 2}),
    (4, None, {0: 1, 1: 2}),
])
def test_admission_is_bounded_by_the_smaller_of_max_num_seqs_and_the_kv_cap(
        max_num_seqs: int, kv_concurrency: int | None, admitted: dict[int, int]) -> None:
    sim = NeuronSchedulerSim(4, 100, max_num_seqs=max_num_seqs, max_num_batched_tokens=64,
                             kv_concurrency=kv_concurrency)
    sim.replay([A, B], 3, concurrency=2)
    assert sim.admitted_at == admitted


def test_the_cap_is_checked() -> None:
    with pytest.raises(ValueError, match="kv_concurrency must be >= 1, got 0"):
        NeuronSchedulerSim(4, 100, kv_concurrency=0)
    with pytest.raises(ValueError, match="buckets must be ascending"):
        NeuronSchedulerSim(4, 100, buckets=[256, 128])
    with pytest.raises(ValueError, match="max_num_seqs"):
        max_kv_concurrent(40, 68, 4, 0)
    with pytest.raises(ValueError, match="block_size"):
        max_kv_concurrent(40, 68, 0, 8)


def test_the_factory_caps_with_vllms_concurrency_and_is_async_by_default() -> None:
    # 39 usable blocks + the null block = 40; cdiv(68, 4) = 17 per request -> 2.
    sim = neuron_scheduler_sim(4, 39, max_model_len=68, max_num_seqs=8)
    assert isinstance(sim, NeuronAsyncSchedulerSim) and sim.kv_concurrency == 2
    # A cache too small for one request at max_model_len: the plugin falls back to
    # max_num_seqs (max_kv_concurrent's "0 -> max_num_seqs").
    small = neuron_scheduler_sim(4, 10, max_model_len=68, max_num_seqs=3)
    assert small.kv_concurrency == 3
    # No max_model_len or an unbounded cache: no cap.
    assert neuron_scheduler_sim(4, 39, max_num_seqs=8).kv_concurrency is None
    assert neuron_scheduler_sim(4, None, max_model_len=68).kv_concurrency is None


# -- The bounds each check draws, and what a deadlock says ------------------------------
# (the survivors of `make mutate` over engines.schedneuron: a check moved by one, a
# message lost, the ceiling of max_model_len / block_size taken as a float)


def test_the_smallest_valid_sizes_are_accepted() -> None:
    # 1 is the bound the checks name (">= 1"): 10 blocks / cdiv(1, 1) = 10.
    assert max_kv_concurrent(10, 1, 1, 1) == 10
    assert prefill_buckets(1) == [1]  # the size itself, below the first bucket (128)
    with pytest.raises(ValueError, match="max_num_batched_tokens must be >= 1, got 0"):
        prefill_buckets(0)


def test_a_max_model_len_off_the_block_size_takes_the_ceiling_in_blocks() -> None:
    # vLLM's cdiv(33, 32) = 2 blocks a request: 10 blocks hold 5 (not 10 // 1.03 = 9).
    assert max_kv_concurrent(10, 33, 32, 8) == 5
    # 68 tokens in blocks of 32: cdiv = 3; 7 blocks hold 2.
    assert max_kv_concurrent(7, 68, 32, 8) == 2


def test_configured_buckets_must_be_ascending_and_end_at_the_size() -> None:
    assert prefill_buckets(1024, None, [128, 256, 1024]) == [128, 256, 1024]
    for bad in ([], [512, 256, 1024], [128, 128, 1024], [128, 512]):
        with pytest.raises(ValueError, match="must be ascending and end at "
                           r"min\(max_num_batched_tokens, max_model_len\) = 1024"):
            prefill_buckets(1024, None, bad)


def test_a_deadlock_names_the_request_let_through_and_the_cache() -> None:
    """test_schedneuron's deadlock case: 5 usable blocks of 4, cap 4; B (request 1, 16
    tokens) is let through and its 4 blocks do not fit the 3 left by A."""
    sim = NeuronSchedulerSim(4, 5, max_num_seqs=4, max_num_batched_tokens=64,
                             kv_concurrency=4)
    with pytest.raises(CapacityError) as err:
        sim.replay([A, tuple(range(20, 36))], 4, concurrency=2)
    assert str(err.value) == (
        "the Neuron scheduler deadlocks: request 1 (16 tokens) was let through but its "
        "blocks do not fit, and it hides every running decode (neuron-scheduler.md, "
        "'Deadlock Prevention'); the KV-concurrency cap (4) does not protect this cache "
        "(5 blocks of 4 tokens): requests are longer than the max_model_len it was "
        "computed with")
    # With nothing waiting the message says nothing can be scheduled (not a request).
    idle = NeuronSchedulerSim(4, 5, kv_concurrency=4)
    with pytest.raises(CapacityError, match="deadlocks: nothing can be scheduled, and it "
                       r"hides every running decode"):
        idle._deadlock()


@pytest.mark.parametrize("kind", [NeuronSchedulerSim, NeuronAsyncSchedulerSim])
def test_a_request_that_outgrows_the_cache_alone_is_named(
        kind: type[NeuronSchedulerSim]) -> None:
    """12 prompt tokens fill 3 blocks of 4; the first decode needs a 4th block, and
    there are 3: the plugin would preempt it and wait forever."""
    sim = kind(4, 3, max_num_seqs=4, max_num_batched_tokens=64)
    with pytest.raises(CapacityError) as err:
        sim.replay([tuple(range(1, 13))], 3, concurrency=1)
    assert str(err.value) == (
        "a request of 12 prompt tokens cannot grow to 13 tokens (capacity 3 blocks of 4 "
        "tokens): the Neuron scheduler would preempt it and then wait forever, its "
        "decodes hidden")


def test_the_factory_counts_the_null_block_and_passes_the_servers_limits() -> None:
    # 32 usable blocks + the null block = 33; cdiv(68, 4) = 17 per request -> 1.
    assert neuron_scheduler_sim(4, 32, max_model_len=68, max_num_seqs=8).kv_concurrency == 1
    # max_num_seqs 1 binds as in the table above: B after A's prefill and two decodes.
    one = neuron_scheduler_sim(4, 100, max_num_seqs=1, max_num_batched_tokens=64,
                               async_scheduling=False)
    one.replay([A, B], 3, concurrency=2)
    assert one.admitted_at == {0: 1, 1: 4} and one.max_num_seqs == 1
    # Chunks of 16 (test_schedneuron's chunked case): 40 tokens in 16 + 16 + 8, B (8)
    # after; the one default bucket is 16.
    chunked = neuron_scheduler_sim(4, None, max_num_batched_tokens=16,
                                   async_scheduling=False)
    chunked.replay([tuple(range(1, 41)), B], 5, concurrency=2)
    assert chunked.admitted_at == {0: 1, 1: 4}
    assert (chunked.prefill_steps, chunked.padded_tokens) == (4, 4 * 16)


def test_max_num_seqs_is_checked_and_kept() -> None:
    with pytest.raises(ValueError, match="max_num_seqs and max_num_batched_tokens must be "
                       ">= 1, got 0 and 64"):
        NeuronSchedulerSim(4, 100, max_num_seqs=0, max_num_batched_tokens=64)
    assert NeuronSchedulerSim(4, 100, max_num_seqs=3).max_num_seqs == 3


def test_a_chunk_the_size_of_a_bucket_is_padded_to_that_bucket() -> None:
    """128 prompt tokens in one chunk: the smallest bucket that holds 128 is 128."""
    sim = NeuronSchedulerSim(4, None, max_num_batched_tokens=256, buckets=[128, 256])
    sim.replay([tuple(range(1, 129))], 1)
    assert (sim.prefill_tokens, sim.padded_tokens) == (128, 128)


def test_readmitted_requests_count_as_preempted_not_as_first_admissions() -> None:
    """3 usable blocks of 4, three requests of 4 tokens (1 block each), 2 out each, no
    cap. Steps 1-3 admit R0, R1, R2 one at a time (each 5 tokens after its prefill, 0
    blocks free). Step 4 decodes: R2 needs a 2nd block, vLLM preempts the running tail
    R0 (its block, freed, is the one R2 takes); R1 needs one too and is preempted
    itself; R2 finishes. The preempted go back to the waiting queue's head, R1 first:
    step 5 readmits R1 (5 tokens, its own block still cached: hit 4), step 6 R0 (5
    tokens, its block evicted: hit 0). vLLM counts readmissions apart (preempted hits
    and queries), so: preempted 4 hit of 5 + 5 = 10 queried; first admissions 0 of 12."""
    sim = NeuronSchedulerSim(4, 3, max_num_seqs=4, max_num_batched_tokens=64)
    got = sim.replay([tuple(range(100 * i, 100 * i + 4)) for i in range(3)], 2,
                     concurrency=3)
    assert sim.admitted_at == {0: 1, 1: 2, 2: 3} and got.steps == 6
    assert (sim.preempted_hit_tokens, sim.preempted_query_tokens) == (4, 10)
    assert (sim.hit_tokens_total, sim.query_tokens_total) == (0, 12)
