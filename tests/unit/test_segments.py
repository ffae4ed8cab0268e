"""predict.segments: a warm request saves only the prefill segments its hit covers whole.

The rule is the tutorial's (aws-neuron-sdk v2.32.0, vllm-neuron/docs/tutorials/
tutorial-prefix-caching-gpt-oss-benchmarking.md, Step 2): "If the prefix fit inside a single
segment, no segment would be fully cached and there would be nothing to skip". The figures
below are that rule worked by hand."""

from __future__ import annotations

import pytest

from prefixbench.predict.segments import SegmentCount


def test_a_hit_counts_only_its_whole_segments() -> None:
    count = SegmentCount(512)
    count.add(511)       # inside one segment: nothing skipped
    assert count.totals() == (0, 0)
    count.add(512)       # exactly one segment
    count.add(1023)      # one whole segment, 511 tokens of the next
    count.add(2600)      # five whole segments (2560)
    count.add(0)
    assert count.totals() == (512 + 512 + 2560, 3)


def test_add_all_is_add_for_each() -> None:
    count = SegmentCount(1024)
    count.add_all([3072, 1000, 2048])
    assert count.totals() == (3072 + 2048, 2)


def test_without_segments_nothing_is_counted() -> None:
    count = SegmentCount(None)
    count.add_all([4096, 8192])
    assert count.totals() == (None, None)
    assert (count.saved_tokens, count.requests) == (0, 0)


def test_a_segment_is_at_least_one_token() -> None:
    with pytest.raises(ValueError, match="a prefill segment is at least 1 token, got 0"):
        SegmentCount(0)
    one = SegmentCount(1)
    one.add(1)           # a one-token hit is one whole one-token segment
    assert one.totals() == (1, 1)
    one.add(7)
    assert one.totals() == (8, 2)
