"""Small, numpy-free statistics for benchmark results and fleet reproducibility.

Percentiles use linear interpolation between closest ranks (Hyndman & Fan type 7, the
default of ``numpy.percentile`` and of R's ``quantile``): for sorted ``x`` of length
``n`` and ``q`` in [0, 100], ``h = (n - 1) * q / 100`` and the result is
``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. It is the method
``vllm bench serve`` uses for its ``p99_*`` figures, so a p99 computed here from the
per-request TTFTs equals the one in the result file.

Cold and warm requests of a ``prefix_repetition`` run
-----------------------------------------------------
vLLM's per-request detail (``--save-detailed``: ``ttfts``, ``input_lens``, ...; and
``latencies``, always saved) is in send order but does not say which prefix a request
used, and no saved key holds the prompt text (``generated_texts`` is the *output*). The
prefix of each request is reconstructed from the seed instead: the dataset builds its
requests prefix by prefix and then applies Python's ``random.shuffle`` seeded with
``--seed`` (see :mod:`prefixbench.engines.prefix_repetition`). That permutation depends only on
the seed and the request count, not on the tokenizer or on numpy, so it is exact for any
model. A request is *cold* when it is the first in send order to use its prefix; this
holds at concurrency 1 and is the intended meaning under load too. It assumes the server
holds nothing of this workload beforehand (distinct seeds per workload, see
:mod:`prefixbench.engines.workloads`) and accounts for ready-check / warmup requests, which warm
the first prompt's prefix before the measured run.

Checked on the recorded fixtures (which keep ``latencies`` in send order): in the
cached high-overlap runs the five reconstructed cold requests are the slowest ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ColdWarmSplit",
    "Summary",
    "coefficient_of_variation",
    "mad",
    "mean",
    "median",
    "outliers",
    "percentile",
    "robust_z_scores",
    "split_cold_warm",
    "stdev",
    "summarize",
]

#: 0.6745 = Phi^-1(0.75): makes MAD-based z comparable to a standard z under normality.
MAD_Z_FACTOR = 0.6745
#: Iglewicz & Hoaglin's fallback when MAD is 0: z = (x - median) / (1.253314 * MeanAD).
MEANAD_FACTOR = 1.253314
#: The usual cut-off for modified z-scores (Iglewicz & Hoaglin).
DEFAULT_Z_THRESHOLD = 3.5


def _need(xs: Sequence[float], what: str) -> list[float]:
    values = [float(x) for x in xs]
    if not values:
        raise ValueError(f"{what} of an empty sequence")
    if any(math.isnan(v) for v in values):
        raise ValueError(f"{what}: NaN in the data")
    return values


def mean(xs: Sequence[float]) -> float:
    values = _need(xs, "mean")
    return math.fsum(values) / len(values)


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default); ``q`` in [0, 100]."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    values = sorted(_need(xs, "percentile"))
    h = (len(values) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (h - lo) * (values[hi] - values[lo])


def median(xs: Sequence[float]) -> float:
    return percentile(xs, 50)


def stdev(xs: Sequence[float], ddof: int = 1) -> float:
    """Standard deviation; ``ddof=1`` sample (default), ``ddof=0`` population (np.std)."""
    values = _need(xs, "stdev")
    if len(values) - ddof <= 0:
        raise ValueError(f"stdev with ddof={ddof} needs more than {ddof} values")
    m = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - ddof))


def coefficient_of_variation(xs: Sequence[float]) -> float | None:
    """Sample stdev / mean; ``None`` for fewer than 2 values or a zero mean."""
    if len(xs) < 2:
        return None
    m = mean(xs)
    if m == 0:
        return None
    return stdev(xs) / abs(m)


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    values = _need(xs, "mad")
    med = median(values)
    return median([abs(v - med) for v in values])


def robust_z_scores(xs: Sequence[float]) -> list[float]:
    """Modified z-scores ``0.6745 * (x - median) / MAD``.

    Guard for ``MAD == 0`` (more than half the values equal): fall back to
    ``(x - median) / (1.253314 * MeanAD)``; when that is 0 too, every value equals the
    median and every score is 0.0.
    """
    values = _need(xs, "robust_z_scores")
    med = median(values)
    m = mad(values)
    if m > 0:
        return [MAD_Z_FACTOR * (v - med) / m for v in values]
    mean_ad = math.fsum(abs(v - med) for v in values) / len(values)
    if mean_ad > 0:
        return [(v - med) / (MEANAD_FACTOR * mean_ad) for v in values]
    return [0.0] * len(values)


def outliers(xs: Sequence[float], threshold: float = DEFAULT_Z_THRESHOLD) -> list[int]:
    """Indices whose modified z-score exceeds ``threshold`` in absolute value."""
    return [i for i, z in enumerate(robust_z_scores(xs)) if abs(z) > threshold]


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    median: float
    p90: float
    p99: float
    min: float
    max: float
    stdev: float | None

    def to_dict(self) -> dict[str, float | int | None]:
        return {"n": self.n, "mean": self.mean, "median": self.median, "p90": self.p90,
                "p99": self.p99, "min": self.min, "max": self.max, "stdev": self.stdev}


def summarize(xs: Sequence[float]) -> Summary:
    values = _need(xs, "summarize")
    return Summary(
        n=len(values), mean=mean(values), median=median(values),
        p90=percentile(values, 90), p99=percentile(values, 99),
        min=min(values), max=max(values),
        stdev=stdev(values) if len(values) > 1 else None)


# -- cold / warm ------------------------------------------------------------------------

@dataclass(frozen=True)
class ColdWarmSplit:
    """Per-request values split by whether the request was its prefix's first use."""

    cold: list[float]
    warm: list[float]
    cold_indices: list[int]

    def to_dict(self) -> dict[str, object]:
        return {
            "cold": summarize(self.cold).to_dict() if self.cold else None,
            "warm": summarize(self.warm).to_dict() if self.warm else None,
            "cold_indices": list(self.cold_indices),
        }


def split_cold_warm(
    values: Sequence[float],
    cold: Sequence[bool],
    succeeded: Sequence[bool] | None = None,
) -> ColdWarmSplit:
    """Split per-request ``values`` (TTFTs, latencies) by the ``cold`` flags.

    Requests that failed (``succeeded[i]`` false) are left out of both groups.
    """
    if len(values) != len(cold):
        raise ValueError(
            f"{len(values)} per-request values but {len(cold)} cold/warm flags: the "
            f"workload parameters or seed do not match this result")
    ok = [True] * len(values) if succeeded is None else list(succeeded)
    if len(ok) != len(values):
        raise ValueError("succeeded flags and values differ in length")
    cold_vals: list[float] = []
    warm_vals: list[float] = []
    cold_idx: list[int] = []
    for i, (v, is_cold, good) in enumerate(zip(values, cold, ok, strict=True)):
        if not good:
            continue
        if is_cold:
            cold_vals.append(float(v))
            cold_idx.append(i)
        else:
            warm_vals.append(float(v))
    return ColdWarmSplit(cold=cold_vals, warm=warm_vals, cold_indices=cold_idx)


# --------------------------------------------------------------------------- intervals
#
# Paired comparisons of two servers. Both configurations run every (workload,
# repetition) with the same seed, so request i of repetition r carries the same prompt on
# both: the comparison is paired. The interval of ``median(cached) / median(baseline)``
# comes from a two-stage percentile bootstrap: repetitions are resampled with replacement
# (run-to-run noise, when there are two or more), then, within each drawn repetition, the
# request pairs (request-to-request noise). With one repetition the interval only holds
# the request-to-request noise; the verdict text says so.

#: Bootstrap draws: enough for stable 95% bounds (their Monte Carlo error is well under
#: the width of any interval the verdicts compare) at a fraction of a second per figure.
BOOTSTRAP_DRAWS: Final = 1000
#: Fixed seed: the same run directory always gives the same intervals and verdicts.
BOOTSTRAP_SEED: Final = 20260601


@dataclass(frozen=True)
class RatioInterval:
    """A ratio of medians with its bootstrap confidence interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    repetitions: int
    pairs: int

    def to_dict(self) -> dict[str, float | int]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high,
                "confidence": self.confidence, "repetitions": self.repetitions,
                "pairs": self.pairs}


def _pairs(base: Sequence[float | None], cached: Sequence[float | None]
           ) -> tuple[list[float], list[float], bool]:
    """Index-aligned pairs where both requests succeeded; unpaired when lengths differ."""
    if len(base) == len(cached):
        kept = [(b, c) for b, c in zip(base, cached, strict=True)
                if b is not None and c is not None]
        return [b for b, _ in kept], [c for _, c in kept], True
    return ([b for b in base if b is not None], [c for c in cached if c is not None], False)


def paired_ratio_interval(
    base: Sequence[Sequence[float | None]],
    cached: Sequence[Sequence[float | None]],
    *,
    confidence: float = 0.95,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> RatioInterval | None:
    """``median(cached) / median(base)`` over all requests, with its interval.

    ``base[r]`` and ``cached[r]`` are repetition ``r`` of each configuration, request by
    request in send order (``None`` for a failed request). ``None`` when a side has no
    value or the baseline median is 0.
    """
    import random  # noqa: PLC0415 - only the bootstrap needs it

    reps = [_pairs(b, c) for b, c in zip(base, cached, strict=False)]
    reps = [r for r in reps if r[0] and r[1]]
    if not reps:
        return None
    pooled_b = [x for r in reps for x in r[0]]
    pooled_c = [x for r in reps for x in r[1]]
    mb = median(pooled_b)
    if mb <= 0:
        return None
    estimate = median(pooled_c) / mb
    rng = random.Random(seed)  # noqa: S311 - a seeded resampler, not cryptography
    # randrange(n) is _randbelow(n) after checking n: the same draws, a third of the time
    # (the bootstrap is most of a fleet report's CPU).
    below = getattr(rng, "_randbelow", rng.randrange)
    ratios = []
    n_reps = len(reps)
    for _ in range(draws):
        chosen = [reps[below(n_reps)] for _ in range(n_reps)] if n_reps > 1 else reps
        sb: list[float] = []
        sc: list[float] = []
        for b, c, paired in chosen:
            if paired:
                n = len(b)
                idx = [below(n) for _ in range(n)]
                sb.extend(map(b.__getitem__, idx))
                sc.extend(map(c.__getitem__, idx))
            else:
                sb.extend(rng.choices(b, k=len(b)))
                sc.extend(rng.choices(c, k=len(c)))
        m = _median_checked(sb)
        if m > 0:
            ratios.append(_median_checked(sc) / m)
    if not ratios:
        return None
    alpha = (1 - confidence) / 2
    return RatioInterval(estimate=estimate, low=percentile(ratios, alpha * 100),
                         high=percentile(ratios, (1 - alpha) * 100),
                         confidence=confidence, repetitions=n_reps,
                         pairs=sum(len(r[0]) for r in reps))


def _median_checked(values: list[float]) -> float:
    """:func:`median` of values already checked (finite floats, not empty): the same
    arithmetic, without checking them again on every bootstrap draw."""
    ordered = sorted(values)
    h = (len(ordered) - 1) * 50 / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def repetitions_to_decide(interval: RatioInterval, threshold: float,
                          limit: int = 100) -> int | None:
    """How many repetitions would bring the interval clear of ``threshold``.

    Intervals narrow as the square root of the data: with ``R`` repetitions and a
    half-width ``h`` on the threshold's side, about ``R * (h / gap)**2`` repetitions
    put the bound at the threshold, ``gap`` being the distance from the estimate to it,
    if the effect stays what it is. ``None`` when the estimate sits on the threshold or
    more than ``limit`` would be needed.
    """
    gap = abs(interval.estimate - threshold)
    if gap <= 1e-12:
        return None
    half = (interval.high - interval.estimate if interval.estimate < threshold
            else interval.estimate - interval.low)
    need = math.ceil(interval.repetitions * (half / gap) ** 2)
    need = max(need, interval.repetitions + 1)
    return need if need <= limit else None
