"""The clocked Neuron scheduler model: a warm request's TTFT follows the prefill chunks
AWS's design runs (aws-neuron-sdk v2.32.0, vllm-neuron/docs/design/vllm/
prefix-caching.md: the hit is block-aligned, the next chunk starts at
num_computed_tokens, min(remaining, max_num_batched_tokens) tokens padded to the bucket),
so ceil((P - h) / S) chunks instead of ceil(P / S)."""

from __future__ import annotations

from array import array

import pytest

from prefixbench.engines.schedneuron import neuron_scheduler_sim
from prefixbench.engines.steptime import StepCost, replay_seconds, timed

#: The issue's case: an 800-token prefix and a 600-token suffix, S = 1024, block 32.
PREFIX, SUFFIX, S = 800, 600, 1024
#: One microsecond per padded token and nothing else: a TTFT in microseconds is the
#: padded prefill tokens the request ran.
COST = StepCost("neuron", 0.0, 0.0, 1e-6, 0.0, buckets=(S,), segment=S,
                decode_buckets=(1, 4))


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_warm_request_runs_one_padded_chunk_instead_of_two(async_scheduling: bool) -> None:
    shared = array("I", range(1, PREFIX + 1))
    cold = shared + array("I", range(10_000, 10_000 + SUFFIX))
    warm = shared + array("I", range(20_000, 20_000 + SUFFIX))
    sim = timed(neuron_scheduler_sim(32, None, max_num_seqs=4, max_num_batched_tokens=S,
                                     async_scheduling=async_scheduling), COST)
    ttfts = replay_seconds(sim, [cold, warm], [4, 4], arrivals=[0.0, 0.0], concurrency=1)
    # cold: 1400 tokens = chunks of 1024 and 376, both padded to 1024 -> 2048 tokens;
    # warm: 800 hit (25 blocks of 32), 600 left = one chunk padded to 1024
    assert [round(t * 1e6) for t in ttfts] == [2 * S, S]
    assert sim.hit_tokens(1) == PREFIX
