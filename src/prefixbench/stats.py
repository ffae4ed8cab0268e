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
``--seed`` (see :mod:`prefixbench.prefix_repetition`). That permutation depends only on
the seed and the request count, not on the tokenizer or on numpy, so it is exact for any
model. A request is *cold* when it is the first in send order to use its prefix; this
holds at concurrency 1 and is the intended meaning under load too. It assumes the server
holds nothing of this workload beforehand (distinct seeds per workload, see
:mod:`prefixbench.workloads`) and accounts for ready-check / warmup requests, which warm
the first prompt's prefix before the measured run.

Checked on the recorded fixtures (which keep ``latencies`` in send order): in the
cached high-overlap runs the five reconstructed cold requests are the slowest ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from prefixbench.prefix_repetition import cold_flags, prefix_order

__all__ = [
    "ColdWarmSplit",
    "Summary",
    "coefficient_of_variation",
    "mad",
    "mean",
    "median",
    "outliers",
    "percentile",
    "prefix_repetition_cold_flags",
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

def prefix_repetition_cold_flags(
    seed: int,
    num_prompts: int,
    num_prefixes: int,
    *,
    shuffle: bool = True,
    pre_requests: int = 0,
) -> list[bool]:
    """For each measured request of a prefix_repetition run (send order): is it cold?

    ``pre_requests`` > 0 (a ready check or warmups, which send the first prompt before
    the measured run) makes the first request warm.
    """
    order = [p for p, _ in prefix_order(seed, num_prompts, num_prefixes, shuffle=shuffle)]
    flags = cold_flags(order)
    if pre_requests > 0 and flags:
        flags[0] = False
    return flags


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
