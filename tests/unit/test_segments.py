"""predict.segments: a warm request runs ceil((P - h) / S) prefill chunks, each padded to
its bucket (aws-neuron-sdk v2.31.1 = v2.32.0, vllm-neuron/docs/design/vllm/
prefix-caching.md, "Scheduler Integration": the next chunk starts at num_computed_tokens
and is min(remaining, max_num_batched_tokens) tokens, padded to the bucket).

Every expected figure below is that formula worked by hand, not the module's output."""

from __future__ import annotations

import pytest

from prefixbench.predict.segments import (
    DESIGN_SOURCE,
    PrefillCount,
    chunks,
    padded_tokens,
    warm_request_saving,
)


def test_chunks_are_the_ceiling_of_tokens_over_the_chunk() -> None:
    assert chunks(1400, 1024) == 2     # 800 + 600 cold
    assert chunks(600, 1024) == 1      # the same, 800 hit
    assert chunks(1024, 1024) == 1
    assert chunks(1025, 1024) == 2
    assert chunks(0, 1024) == 0
    with pytest.raises(ValueError, match="at least 1 token, got 0"):
        chunks(10, 0)


def test_each_chunk_pads_to_the_smallest_bucket_that_holds_it() -> None:
    # 1400 tokens at S = 1024: a full chunk (1024) and 376 tokens.
    assert padded_tokens(1400, 1024, [1024]) == 2048          # the tutorial's [1024]
    assert padded_tokens(1400, 1024, [128, 256, 512, 1024]) == 1024 + 512
    assert padded_tokens(600, 1024, [128, 256, 512, 1024]) == 1024
    assert padded_tokens(100, 1024, [128, 256, 512, 1024]) == 128
    assert padded_tokens(512, 1024, [256, 512, 1024]) == 512   # a chunk the size of one
    assert padded_tokens(0, 1024, [128, 1024]) == 0            # nothing left: no chunk
    assert padded_tokens(-3, 1024, [128, 1024]) == 0
    with pytest.raises(ValueError, match=r"^prefill buckets cannot be empty$"):
        padded_tokens(10, 1024, [])


def test_a_replay_counts_chunks_cold_and_as_run() -> None:
    count = PrefillCount(1024, [1024])
    count.add(1400, 0)       # cold: 2 chunks, 2048 padded
    count.add(1400, 800)     # warm, 800 hit: 1 chunk of 600 -> 1024 padded
    count.add(4096, 3072)    # the tutorial's shape: 4 chunks cold, 1 warm
    count.add(2024, 992)     # 1000 + 1024, hit 992: ceil(1032/1024) = 2 = cold's 2
    totals = count.totals()
    assert totals is not None
    assert (totals.requests, totals.cold_chunks, totals.run_chunks) == (4, 2 + 2 + 4 + 2,
                                                                       2 + 1 + 1 + 2)
    assert totals.skipped_chunks == 4
    assert totals.cold_padded == 10 * 1024
    assert totals.run_padded == 6 * 1024
    assert totals.skipping_requests == 2
    assert totals.saved_share == pytest.approx(0.4)


def test_on_the_cpu_platform_nothing_is_counted() -> None:
    count = PrefillCount(None)
    count.add(4096, 3072)
    assert count.totals() is None
    with pytest.raises(ValueError, match="at least 1 token, got 0"):
        PrefillCount(0)


def test_the_saving_reads_per_replay_and_per_request() -> None:
    """The replay above (4 requests): 10 chunks cold, 6 run, 10,240 and 6,144 padded
    tokens; per request 6/4 = 1.50 run, 4/4 = 1.00 skipped, 6,144/4 = 1,536 padded tokens
    run and 4,096/4 = 1,024 saved. One request alone (1400, 800 hit) is divided by 1."""
    count = PrefillCount(1024, [1024])
    for prompt, hit in ((1400, 0), (1400, 800), (4096, 3072), (2024, 992)):
        count.add(prompt, hit)
    totals = count.totals()
    assert totals is not None
    assert totals.lines() == [
        ("prefill saved", "4 of 10 prefill chunks (4,096 of 10,240 padded tokens, 40.00%); "
                          "2 of 4 requests skip at least one"),
        ("per request", "1.50 chunks run and 1.00 skipped (1,536 padded tokens run, 1,024 "
                        "saved), chunks of 1024 tokens padded to buckets [1024]"),
    ]
    one = PrefillCount(1024, [1024])
    one.add(1400, 800)
    alone = one.totals()
    assert alone is not None
    assert alone.lines()[1] == ("per request", "1.00 chunks run and 1.00 skipped (1,024 "
                                "padded tokens run, 1,024 saved), chunks of 1024 tokens "
                                "padded to buckets [1024]")


def test_a_chunk_of_one_token_is_the_smallest_allowed() -> None:
    assert chunks(5, 1) == 5
    count = PrefillCount(1)
    count.add(3, 1)            # 3 chunks of 1 cold, 2 run; each its own bucket (1)
    totals = count.totals()
    assert totals is not None
    assert (totals.chunk, totals.cold_chunks, totals.run_chunks) == (1, 3, 2)
    assert (totals.cold_padded, totals.run_padded) == (3, 2)


def test_without_buckets_each_chunk_is_its_own_bucket() -> None:
    # The tutorial's segment 1024 and no bucket list: 1400 cold = 1024 + 376 -> 2 x 1024.
    count = PrefillCount(1024)
    assert count.buckets == (1024,)
    count.add(1400, 0)
    totals = count.totals()
    assert totals is not None and totals.cold_padded == 2048
    assert PrefillCount(None).buckets == ()


def test_a_warm_request_whose_suffix_spills_into_another_chunk_saves_nothing() -> None:
    """2024 tokens, 1000 of them a cached prefix, blocks of 32: the hit is block-aligned,
    1000 // 32 * 32 = 992 ("Block Alignment"); 2024 - 992 = 1032 tokens still take
    ceil(1032 / 1024) = 2 chunks, as the cold ceil(2024 / 1024) = 2. A prefix of 1024
    leaves 1000: one chunk, a saving."""
    assert warm_request_saving(1000, 2024, 32, 1024, [1024]) == (
        "a warm request of 2024 prompt tokens hits 992 and still runs "
        "ceil((2024 - 992) / 1024) = 2 prefill chunks, as many as a cold one, padded the "
        f"same: prefix caching saves it no prefill on Neuron ({DESIGN_SOURCE})")
    assert warm_request_saving(1024, 2024, 32, 1024, [1024]) is None


def test_the_last_prompt_token_is_never_a_hit() -> None:
    """vLLM hits at most prompt_len - 1 tokens (the last is computed for its logits):
    a one-block prompt (32 tokens, blocks of 32) hits 0 however much is cached; a
    33-token prompt hits 32 and runs the 33rd in a chunk padded to 1024, as a cold one."""
    assert warm_request_saving(32, 32, 32, 1024, [1024]) == (
        "a warm request of 32 prompt tokens hits 0 and still runs "
        "ceil((32 - 0) / 1024) = 1 prefill chunks, as many as a cold one, padded the "
        f"same: prefix caching saves it no prefill on Neuron ({DESIGN_SOURCE})")
    assert warm_request_saving(33, 33, 32, 1024, [1024]) == (
        "a warm request of 33 prompt tokens hits 32 and still runs "
        "ceil((33 - 32) / 1024) = 1 prefill chunks, as many as a cold one, padded the "
        f"same: prefix caching saves it no prefill on Neuron ({DESIGN_SOURCE})")


def test_a_chunk_above_every_bucket_takes_the_largest() -> None:
    # bucket_utils.get_bucket_for_count (as cited in the module): the smallest bucket
    # that holds the count, else the largest: 2048-token chunks on buckets up to 1024.
    assert padded_tokens(2048, 2048, [256, 512, 1024]) == 1024
    assert padded_tokens(2500, 2048, [256, 512, 1024]) == 1024 + 512
