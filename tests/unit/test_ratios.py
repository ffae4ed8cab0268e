"""Expected hit ratios: the tutorial's formula and the block-aligned one vLLM counts."""

from __future__ import annotations

import pytest

from prefixbench.measure.ratios import (
    block_aligned_expected,
    block_aligned_hit_tokens,
    prompts_per_prefix,
    tutorial_expected_ratio,
)


def test_tutorial_formula_high_overlap_is_67_5_percent() -> None:
    assert tutorial_expected_ratio(50, 5, 3072, 1024) == pytest.approx(0.675)


def test_tutorial_formula_sustained_is_73_125_percent() -> None:
    assert tutorial_expected_ratio(200, 5, 3072, 1024) == pytest.approx(0.73125)


def test_tutorial_formula_no_overlap_is_zero() -> None:
    assert tutorial_expected_ratio(50, 50, 3072, 1024) == 0.0


def test_block_alignment_example_from_reference() -> None:
    # Prefix 300 with block 128 -> 256 hit tokens per warm request.
    assert block_aligned_hit_tokens(300, 300 + 100, 128) == 256
    exp = block_aligned_expected(50, 5, 300, 100, 128)
    assert exp.hit_tokens_per_warm_request == 256
    assert exp.hit_tokens == 45 * 256
    assert exp.ratio < tutorial_expected_ratio(50, 5, 300, 100)


def test_block_aligned_equals_formula_when_prefix_is_a_block_multiple() -> None:
    exp = block_aligned_expected(50, 5, 3072, 1024, 128)
    # The recorded cached_high_overlap delta: 138240 / 204800.
    assert (exp.hit_tokens, exp.query_tokens) == (138240, 204800)
    assert exp.ratio == pytest.approx(tutorial_expected_ratio(50, 5, 3072, 1024))
    assert (exp.cold_requests, exp.warm_requests) == (5, 45)
    sustained = block_aligned_expected(200, 5, 3072, 1024, 128)
    assert sustained.ratio == pytest.approx(0.73125)
    assert block_aligned_expected(50, 50, 3072, 1024, 128).hit_tokens == 0


def test_remainder_prompts_are_dropped_like_vllm_does() -> None:
    assert prompts_per_prefix(52, 5) == 10
    exp = block_aligned_expected(52, 5, 256, 256, 16)
    assert exp.requests == 50
    assert exp.query_tokens == 50 * 512
    with pytest.raises(ValueError, match="greater than or equal"):
        block_aligned_expected(4, 5, 256, 256, 16)


def test_a_prompt_never_hits_its_own_last_token() -> None:
    # Suffix 0: every prompt equals its prefix; a warm one recomputes the last block.
    assert block_aligned_hit_tokens(256, 256, 128) == 128
    assert block_aligned_expected(10, 1, 256, 0, 128).hit_tokens == 9 * 128


def test_ready_check_and_warmups_warm_the_first_prompt() -> None:
    base = block_aligned_expected(50, 5, 3072, 1024, 128)
    one = block_aligned_expected(50, 5, 3072, 1024, 128, pre_requests=1)
    # The ready check is cold; the measured copy of prompt 0 then hits 31 whole blocks.
    assert one.requests == 51
    assert one.query_tokens == 51 * 4096
    assert one.hit_tokens == base.hit_tokens + (4095 // 128) * 128
    three = block_aligned_expected(50, 5, 3072, 1024, 128, pre_requests=3)
    assert three.hit_tokens == base.hit_tokens + 3 * 3968


def test_bos_token_shifts_block_alignment() -> None:
    exp = block_aligned_expected(50, 5, 127, 100, 128, bos_tokens=1)
    assert exp.hit_tokens_per_warm_request == 128
    assert exp.query_tokens == 50 * 228
