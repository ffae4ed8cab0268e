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

from prefixbench.engines.schedneuron import (
    NeuronAsyncSchedulerSim,
    NeuronSchedulerSim,
    max_kv_concurrent,
    neuron_scheduler_sim,
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
