"""The Neuron scheduler model (prefixbench.engines.schedneuron) on hand-worked cases;
tests/integration/test_schedneuron_vs_vllm.py holds it to vLLM's own Scheduler running
the bundle's reading of the plugin's NeuronScheduler."""

from __future__ import annotations

import pytest
from test_schedsim import _workload

from prefixbench.engines.cachesim import CapacityError
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedneuron import (
    NeuronAsyncSchedulerSim,
    NeuronSchedulerSim,
    max_kv_concurrent,
    neuron_scheduler_sim,
    prefill_buckets,
    resolve_prefill_buckets,
)
from prefixbench.engines.schedsim import SchedulerSim

A = tuple(range(1, 9))
B = tuple(range(11, 19))


@pytest.mark.parametrize("kind", [NeuronSchedulerSim, NeuronAsyncSchedulerSim])
def test_one_prefill_per_step_and_it_hides_the_decodes(kind: type[NeuronSchedulerSim]
                                                        ) -> None:
    """A (3 out) and B (1 out) sent at once, budget for both: vLLM admits both in step 1
    and is done in 3 steps; Neuron admits A in step 1, B alone in step 2 (A's decode
    hidden: B finishes there), then decodes A in steps 3 and 4."""
    sim = kind(4, max_num_seqs=4, max_num_batched_tokens=64)
    got = sim.replay([A, B], [3, 1], concurrency=2)
    assert sim.admitted_at == {0: 1, 1: 2}
    assert sim.prefill_steps == 2
    vllms = SchedulerSim if kind is NeuronSchedulerSim else AsyncSchedulerSim
    plain = vllms(4, max_num_seqs=4, max_num_batched_tokens=64).replay(
        [A, B], [3, 1], concurrency=2)
    assert (got.steps, plain.steps) == ((4, 3) if kind is NeuronSchedulerSim else (5, 4))


def test_no_admission_while_a_prefill_is_chunked() -> None:
    """A: 40 tokens in chunks of 16 (steps 1-3); B waits until A's prefill is done
    although budget is left in step 3, and is admitted in step 4."""
    sim = NeuronSchedulerSim(4, max_num_seqs=4, max_num_batched_tokens=16)
    sim.replay([tuple(range(1, 41)), B], 5, concurrency=2)
    assert sim.admitted_at == {0: 1, 1: 4}
    assert sim.prefill_tokens == 40 + 8
    # Chunks 16, 16, 8 and 8: each padded to the one default bucket, 16.
    assert sim.padded_tokens == 4 * 16


def test_the_kv_concurrency_cap_holds_admission_back() -> None:
    """Cap 1: B is admitted only after A (3 output tokens) has finished."""
    sim = NeuronSchedulerSim(4, 100, max_num_seqs=4, max_num_batched_tokens=64,
                             kv_concurrency=1)
    sim.replay([A, B], 3, concurrency=2)
    assert sim.admitted_at == {0: 1, 1: 4}
    free = NeuronSchedulerSim(4, 100, max_num_seqs=4, max_num_batched_tokens=64,
                              kv_concurrency=2)
    free.replay([A, B], 3, concurrency=2)
    assert free.admitted_at == {0: 1, 1: 2}


def test_max_kv_concurrent_is_vllms_concurrency_at_max_model_len() -> None:
    # 40 blocks (null block included) / cdiv(68, 4) = 17 blocks per request -> 2.
    assert max_kv_concurrent(40, 68, 4, 8) == 2
    assert max_kv_concurrent(34, 68, 4, 8) == 2
    assert max_kv_concurrent(33, 68, 4, 8) == 1
    assert max_kv_concurrent(16, 68, 4, 8) == 8  # 0 -> max_num_seqs, as the plugin
    assert max_kv_concurrent(None, 68, 4, 8) is None
    with pytest.raises(ValueError, match="max_model_len"):
        max_kv_concurrent(40, 0, 4, 8)
    sim = neuron_scheduler_sim(4, 39, max_model_len=68, max_num_seqs=8)
    assert sim.kv_concurrency == 2 and sim.buckets == [68]


def test_default_buckets_are_powers_of_two_up_to_the_budget() -> None:
    assert prefill_buckets(1024) == [128, 256, 512, 1024]
    assert prefill_buckets(1000) == [128, 256, 512, 1000]
    assert prefill_buckets(8192, 2048) == [128, 256, 512, 1024, 2048]
    assert prefill_buckets(256, None, [64, 256]) == [64, 256]
    with pytest.raises(ValueError, match="ascending"):
        prefill_buckets(256, None, [256, 64])


def test_padding_costs_tokens_of_time_not_hits() -> None:
    """The same prompts under buckets [128, 256] and [256]: the same hits and steps,
    more padded tokens with the coarser buckets."""
    prompts = _workload(3, 200, 4, 16, 4)
    fine = NeuronSchedulerSim(4, 60, max_num_batched_tokens=256, buckets=[128, 256])
    coarse = NeuronSchedulerSim(4, 60, max_num_batched_tokens=256, buckets=[256])
    a = fine.replay(prompts, 4, concurrency=4)
    b = coarse.replay(prompts, 4, concurrency=4)
    assert (a.hit_tokens, a.steps) == (b.hit_tokens, b.steps)
    assert fine.prefill_tokens == coarse.prefill_tokens < fine.padded_tokens
    assert fine.padded_tokens < coarse.padded_tokens == 256 * coarse.prefill_steps


@pytest.mark.parametrize("capacity", [None, 47])
def test_one_at_a_time_it_hits_as_vllms_scheduler(capacity: int | None) -> None:
    """Concurrency 1: one request at a time either way, the same hits; Neuron's steps
    are never fewer."""
    prompts = _workload(11, 300, 4, 16, 3)
    want = SchedulerSim(4, capacity, max_num_batched_tokens=16).replay(prompts, 3)
    got = NeuronSchedulerSim(4, capacity, max_num_batched_tokens=16).replay(prompts, 3)
    assert got.hit_tokens == want.hit_tokens
    assert got.steps >= want.steps


@pytest.mark.timeout(60)  # without the model's check it would step forever
def test_a_cap_that_does_not_protect_the_cache_deadlocks() -> None:
    """5 usable blocks of 4 and no real cap: A (8 tokens, 4 out) runs; B (16 tokens) is
    let through, hides A's decodes, and its 4 blocks do not fit the 3 free: the design
    waits forever, the model says so. With the cap at 1 (each fits alone) B waits for
    A instead."""
    prompts = [A, tuple(range(20, 36))]
    sim = NeuronSchedulerSim(4, 5, max_num_seqs=4, max_num_batched_tokens=64,
                             kv_concurrency=4)
    with pytest.raises(CapacityError, match="deadlocks"):
        sim.replay(prompts, 4, concurrency=2)
    capped = NeuronSchedulerSim(4, 5, max_num_seqs=4, max_num_batched_tokens=64,
                                kv_concurrency=1)
    capped.replay(prompts, 4, concurrency=2)
    assert capped.admitted_at == {0: 1, 1: 5}


def test_the_servers_buckets_are_resolved_as_the_plugin_resolves_them() -> None:
    """NeuronScheduler.__init__ with bucket_utils (vllm-neuron 0.24.0.1.1.0): configured
    num_batched_tokens_buckets; else kv_segment_size_buckets; else [max_num_batched_tokens]
    when it is below max_model_len (automatic segmented prefill); else powers of two."""
    tutorial = {"num_batched_tokens_buckets": [1024], "kv_segment_size_buckets": [1024]}
    assert resolve_prefill_buckets(1024, 8192, tutorial) == (1024,)
    assert resolve_prefill_buckets(1024, 8192, {"num_batched_tokens_buckets": [512, 1024]}
                                   ) == (512, 1024)
    assert resolve_prefill_buckets(2048, 8192, {"kv_segment_size_buckets": [2048]}) == (2048,)
    # kv_segment_size_buckets are the prefill buckets, not the automatic [2048].
    assert resolve_prefill_buckets(2048, 8192, {"kv_segment_size_buckets": [1024, 2048]}
                                   ) == (1024, 2048)
    # An empty list configures nothing: the automatic bucket, or the powers of two.
    assert resolve_prefill_buckets(1024, 8192, {"num_batched_tokens_buckets": []}) == (1024,)
    assert resolve_prefill_buckets(2048, 2048, {"kv_segment_size_buckets": []}) == (
        128, 256, 512, 1024, 2048)
    assert resolve_prefill_buckets(1024, 8192) == (1024,)  # automatic
    assert resolve_prefill_buckets(2048, 2048) == (128, 256, 512, 1024, 2048)  # single shot
    assert resolve_prefill_buckets(8192, 2048) == (128, 256, 512, 1024, 2048)


def test_the_engine_model_pads_to_the_servers_buckets_and_hits_the_same() -> None:
    """The tutorial's server pads every chunk to 1024 (num_batched_tokens_buckets
    [1024]), not to the powers of two the model assumed without buckets: a 1400-token
    prompt runs 1024 + 1024 padded tokens, not 1024 + 512. Hits do not change."""
    from prefixbench.engines.cachemodel import FULL_ATTENTION  # noqa: PLC0415
    from prefixbench.engines.platforms import engine_model, scheduler_model  # noqa: PLC0415
    from prefixbench.engines.schedconfig import Serving  # noqa: PLC0415

    engine = engine_model("neuron", serving=Serving(2), max_model_len=8192,
                          neuron_config={"num_batched_tokens_buckets": [1024]})
    assert engine.serving.prefill_buckets == (1024,)
    prompts = [tuple(range(1, 1401)), tuple(range(1, 1401))]
    sim = scheduler_model(32, None, FULL_ATTENTION, engine.serving)
    got = sim.replay(prompts, [2, 2], concurrency=2)
    assert sim.buckets == [1024]
    # First 1400 cold: chunks 1024 + 376; the second hits 1376 (43 blocks): 24 left.
    assert got.hit_tokens == [0, 1376]
    assert sim.padded_tokens == 1024 + 1024 + 1024
    plain = neuron_scheduler_sim(32, None, max_model_len=8192, max_num_seqs=4,
                                 max_num_batched_tokens=1024, buckets=[128, 256, 512, 1024])
    assert plain.replay(prompts, [2, 2], concurrency=2).hit_tokens == got.hit_tokens
    assert plain.padded_tokens == 1024 + 512 + 128
