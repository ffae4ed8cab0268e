"""Statistics, and the cold/warm split checked on the recorded per-request latencies."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixbench.engines.prefix_repetition import prefix_repetition_cold_flags
from prefixbench.measure.stats import (
    coefficient_of_variation,
    mad,
    mean,
    median,
    outliers,
    percentile,
    robust_z_scores,
    split_cold_warm,
    stdev,
    summarize,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"


def test_percentile_is_numpy_linear_interpolation() -> None:
    xs = [15, 20, 35, 40, 50]
    assert percentile(xs, 0) == 15
    assert percentile(xs, 100) == 50
    assert percentile(xs, 40) == 29.0  # h = 1.6 -> 20 + 0.6 * 15
    assert percentile(xs, 99) == pytest.approx(49.6)
    assert median([3, 1, 2, 4]) == 2.5
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile([1], 101)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=60))
def test_median_and_quartiles_agree_with_the_standard_library(xs: list[float]) -> None:
    assert median(xs) == pytest.approx(statistics.median(xs), rel=1e-9, abs=1e-6)
    if len(xs) >= 2:
        q = statistics.quantiles(xs, n=4, method="inclusive")
        assert percentile(xs, 25) == pytest.approx(q[0], rel=1e-9, abs=1e-6)
        assert percentile(xs, 75) == pytest.approx(q[2], rel=1e-9, abs=1e-6)
        assert stdev(xs) == pytest.approx(statistics.stdev(xs), rel=1e-6, abs=1e-6)


def test_spread_measures() -> None:
    xs = [10.0, 11.0, 9.0, 10.0, 30.0]
    assert mean(xs) == 14.0
    assert mad(xs) == 1.0
    assert stdev([1, 2, 3, 4], ddof=0) == pytest.approx(1.118034, rel=1e-6)
    assert coefficient_of_variation([10, 10, 10]) == 0.0
    assert coefficient_of_variation([5]) is None
    assert coefficient_of_variation([-1, 1]) is None
    cv = coefficient_of_variation([9, 10, 11])
    assert cv == pytest.approx(0.1)


def test_robust_z_flags_the_slow_host() -> None:
    ttft = [71.9, 70.5, 73.0, 72.2, 140.0]
    z = robust_z_scores(ttft)
    assert z[-1] > 3.5
    assert outliers(ttft) == [4]
    assert z[0] == pytest.approx(0.6745 * (71.9 - 72.2) / mad(ttft))


def test_robust_z_guards_a_zero_mad() -> None:
    xs = [5.0, 5.0, 5.0, 5.0, 9.0]  # MAD 0: fall back to the mean absolute deviation
    z = robust_z_scores(xs)
    assert z[:4] == [0.0] * 4
    assert z[4] == pytest.approx(4 / (1.253314 * 0.8))
    assert outliers(xs) == [4]
    assert robust_z_scores([3.0, 3.0]) == [0.0, 0.0]


def test_summary() -> None:
    s = summarize([1, 2, 3, 4, 5])
    assert (s.n, s.median, s.min, s.max) == (5, 3, 1, 5)
    assert s.to_dict()["p99"] == pytest.approx(4.96)
    assert summarize([2.0]).stdev is None


def test_cold_flags_of_the_tutorials_high_overlap_run() -> None:
    flags = prefix_repetition_cold_flags(0, 50, 5)
    assert sum(flags) == 5
    # With seed 0 the first five sent requests happen to use five different prefixes.
    assert [i for i, c in enumerate(flags) if c] == [0, 1, 2, 3, 4]
    assert prefix_repetition_cold_flags(0, 50, 50) == [True] * 50
    warmed = prefix_repetition_cold_flags(0, 50, 5, pre_requests=1)
    assert sum(warmed) == 4
    assert warmed[0] is False
    other = prefix_repetition_cold_flags(7, 200, 5)
    assert sum(other) == 5


def _latencies(stem: str) -> list[float]:
    data = json.loads((FIX / f"{stem}.json").read_text())
    lat: list[float] = data["latencies"]
    return lat


def test_reconstructed_cold_requests_are_the_slowest_on_a_fresh_cached_server() -> None:
    # contam_high_overlap ran on a fresh caching server: its 5 slowest requests are
    # exactly the 5 reconstructed first uses of a prefix.
    lat = _latencies("contam_high_overlap")
    split = split_cold_warm(lat, prefix_repetition_cold_flags(0, 50, 5))
    slowest = sorted(range(50), key=lambda i: -lat[i])[:5]
    assert sorted(slowest) == split.cold_indices
    assert min(split.cold) > max(split.warm)


def test_cold_requests_are_slower_in_the_cached_run_but_not_in_the_baseline() -> None:
    cached = split_cold_warm(_latencies("cached_high_overlap"),
                             prefix_repetition_cold_flags(0, 50, 5))
    assert min(cached.cold) > median(cached.warm)
    assert median(cached.cold) - median(cached.warm) > 0.05  # seconds
    # No caching: the same positions are not special.
    base = split_cold_warm(_latencies("baseline_high_overlap"),
                           prefix_repetition_cold_flags(0, 50, 5))
    assert abs(median(base.cold) - median(base.warm)) < 0.05


def test_split_checks_lengths_and_drops_failed_requests() -> None:
    with pytest.raises(ValueError, match="do not match"):
        split_cold_warm([1.0, 2.0], [True])
    split = split_cold_warm([1.0, 2.0, 3.0], [True, False, True], [True, True, False])
    assert split.cold == [1.0]
    assert split.warm == [2.0]
    assert split.cold_indices == [0]
    assert split.to_dict()["cold_indices"] == [0]


def test_paired_interval_holds_the_true_ratio_and_pairing_narrows_it() -> None:
    import random  # noqa: PLC0415

    from prefixbench.measure.stats import paired_ratio_interval  # noqa: PLC0415

    rng = random.Random(7)  # noqa: S311 - test data
    # Prompts of very different lengths: the per-request spread is large, but each
    # cached request is 0.6 x its own baseline request (plus small noise).
    base = [[rng.uniform(50, 500) for _ in range(60)]]
    cached = [[x * 0.6 * rng.uniform(0.97, 1.03) for x in base[0]]]
    iv = paired_ratio_interval(base, cached)
    assert iv is not None and iv.low < 0.6 < iv.high and iv.pairs == 60
    # The same values with the pairing lost (another order on one side) are wider.
    shuffled = [[*reversed(cached[0]), cached[0][0]]]
    unpaired = paired_ratio_interval(base, shuffled)
    assert unpaired is not None
    assert unpaired.high - unpaired.low > 1.5 * (iv.high - iv.low)
    # Deterministic: the same data, the same interval.
    assert paired_ratio_interval(base, cached) == iv
    # A failed request (None) drops its pair only.
    holed = [[None, *cached[0][1:]]]
    assert paired_ratio_interval(base, holed).pairs == 59  # type: ignore[union-attr]


def test_repetitions_to_decide_scales_with_the_square_of_the_width() -> None:
    from prefixbench.measure.stats import RatioInterval, repetitions_to_decide  # noqa: PLC0415

    iv = RatioInterval(estimate=0.80, low=0.70, high=0.95, confidence=0.95,
                       repetitions=2, pairs=100)
    # Half-width 0.15 on the threshold's side, gap 0.10: 2 x (0.15 / 0.10)^2 = 4.5 -> 5.
    assert repetitions_to_decide(iv, 0.90) == 5
    assert repetitions_to_decide(iv, 0.80) is None  # the estimate sits on the threshold
