"""Typed figures of one benchmark: a figure across repetitions, one (host, configuration,
workload) summarised, and the tutorial's step-7 and step-9 rows.

An :class:`Agg` is a median over repetitions; :class:`BenchSummary` aggregates one
benchmark's repetitions (made by :mod:`prefixbench.report.aggregate`); :class:`Step7` and
:class:`Step9Row` are the tables the tutorial prints. Every ``to_dict()`` gives the JSON
shape of ``summary.json`` (``docs/summary-schema.md``), with ``None`` for NaN
(:func:`finite`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.measure.stats import median

__all__ = [
    "Agg",
    "BenchSummary",
    "ColdWarm",
    "Step7",
    "Step7Row",
    "Step9Row",
    "agg",
    "agg_dict",
    "agg_median",
    "finite",
]


def finite(x: float | None) -> float | None:
    """``x`` as a float for JSON; ``None`` for ``None``, NaN or infinity."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True)
class Agg:
    """One figure across repetitions: the median of the per-repetition values."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def n(self) -> int:
        return len(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "n": self.n,
                "values": list(self.values)}


def agg(values: Sequence[float | None]) -> Agg | None:
    """An :class:`Agg` of the finite values; ``None`` when there are none."""
    kept = tuple(float(v) for v in values if v is not None and math.isfinite(v))
    return Agg(kept) if kept else None


def agg_dict(a: Agg | None) -> dict[str, Any] | None:
    return None if a is None else a.to_dict()


def agg_median(a: Agg | None) -> float | None:
    """The median of ``a``; ``None`` when there is no figure."""
    return None if a is None else a.median


@dataclass(frozen=True)
class ColdWarm:
    """Per-request TTFT (ms) split into cold (first use of a prefix) and warm requests.

    ``source`` is ``"ttfts"`` (``--save-detailed``) or ``"latencies"`` (end-to-end
    latency, the only per-request time saved without it: a stand-in that keeps the
    ordering but includes decode time).
    """

    source: str
    cold_ms: tuple[float, ...]
    warm_ms: tuple[float, ...]
    p99_all_ms: float
    p99_warm_ms: float | None
    median_cold_ms: float | None
    median_warm_ms: float | None
    #: The slowest request of the run is a cold one: its p99 is set by first use of a
    #: prefix, not by a regression.
    slowest_is_cold: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "cold_n": len(self.cold_ms), "warm_n": len(self.warm_ms),
            "p99_all_ms": self.p99_all_ms, "p99_warm_ms": self.p99_warm_ms,
            "median_cold_ms": self.median_cold_ms, "median_warm_ms": self.median_warm_ms,
            "max_cold_ms": max(self.cold_ms) if self.cold_ms else None,
            "slowest_is_cold": self.slowest_is_cold,
        }


@dataclass(frozen=True)
class BenchSummary:
    """One (host, configuration, workload), aggregated over its repetitions."""

    host: str
    configuration: str
    workload: str
    repetitions: tuple[int, ...]
    median_ttft_ms: Agg | None
    p99_ttft_ms: Agg | None
    mean_ttft_ms: Agg | None
    output_throughput: Agg | None
    completed: int
    failed: int
    hit_ratio_queries: Agg | None
    hit_ratio_by_source: Agg | None
    expected_block_aligned: float | None
    expected_tutorial: float | None
    block_size: int | None
    prefix_caching_enabled: bool | None
    preemptions: float | None
    evictions_sampled: float | None
    kv_cache_usage_max: float | None
    request_rate: float | None
    output_len: int | None
    max_concurrency: int | None
    cold_warm: ColdWarm | None
    #: Hit and query tokens summed over repetitions (``None`` without the counters).
    hit_tokens: float | None = None
    query_tokens: float | None = None
    #: Per-request times (ms) of every repetition, pooled, and their cold flags (plots).
    per_request_ms: tuple[float, ...] = ()
    per_request_cold: tuple[bool, ...] = ()
    notes: tuple[str, ...] = ()
    #: The what-if analyzer's hit ratio for the same requests (prefixbench.predict.whatif),
    #: median over repetitions; ``prediction_note`` says why there is none, or its limits.
    predicted_hit_ratio: Agg | None = None
    prediction_note: str | None = None
    #: Per-request TTFT (ms) of each repetition in send order, ``None`` for a failed
    #: request: what the paired intervals are built from (not in summary.json).
    ttft_by_rep: tuple[tuple[float | None, ...], ...] = ()
    #: The expected ratio from the tokens the server sees (the prompts the bench sends,
    #: re-encoded and replayed: prefixbench.predict.served.served_expectation), and the blocks
    #: lost where prefix and suffix re-split; ``None`` where it was not made.
    expected_served: float | None = None
    junction_lost_blocks: float | None = None
    #: The served expectation with an unbounded cache (``None`` in older records): below
    #: it, ``expected_served`` is what the server's KV capacity lets the prompts hit.
    expected_served_unbounded: float | None = None
    #: The same prompts replayed with full attention and an unbounded cache (hybrid
    #: servers' records only): above ``expected_served_unbounded`` by what the
    #: sliding-window layers do not keep.
    expected_served_full_attention: float | None = None
    #: The range arrival timing gives ``expected_served`` above concurrency 1 (lowest of
    #: the repetitions' lows, highest of their highs); ``None`` where not made.
    expected_served_band: tuple[float, float] | None = None
    #: Share of the machine's CPU that others used during each repetition
    #: (prefixbench.measure.hostload); ``None`` when the records do not say.
    other_load: Agg | None = None

    @property
    def verdict_expectation(self) -> tuple[float, str] | None:
        """The expected hit ratio the hit-rate verdict holds this bench to, and its name:
        the served expectation (the prompts the bench sent, re-encoded and replayed) when
        the record has one, else the block-aligned formula; ``None`` without either."""
        if self.expected_served is not None:
            return self.expected_served, "expected (served tokens: the verdict's)"
        if self.expected_block_aligned is not None:
            return self.expected_block_aligned, "expected (block-aligned: the verdict's)"
        return None

    @property
    def offered_output_rate(self) -> float | None:
        """``request_rate x output_len`` (tokens/s): the most a rate-limited run yields."""
        if self.request_rate is None or not math.isfinite(self.request_rate):
            return None
        if self.output_len is None:
            return None
        return self.request_rate * self.output_len

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "configuration": self.configuration,
            "workload": self.workload, "repetitions": list(self.repetitions),
            "median_ttft_ms": agg_dict(self.median_ttft_ms),
            "p99_ttft_ms": agg_dict(self.p99_ttft_ms),
            "mean_ttft_ms": agg_dict(self.mean_ttft_ms),
            "output_throughput": agg_dict(self.output_throughput),
            "completed": self.completed, "failed": self.failed,
            "hit_ratio_queries": agg_dict(self.hit_ratio_queries),
            "hit_ratio_by_source": agg_dict(self.hit_ratio_by_source),
            "expected_block_aligned": finite(self.expected_block_aligned),
            "expected_tutorial": finite(self.expected_tutorial),
            "block_size": self.block_size,
            "prefix_caching_enabled": self.prefix_caching_enabled,
            "preemptions": finite(self.preemptions),
            "evictions_sampled": finite(self.evictions_sampled),
            "kv_cache_usage_max": finite(self.kv_cache_usage_max),
            "hit_tokens": finite(self.hit_tokens), "query_tokens": finite(self.query_tokens),
            "request_rate": finite(self.request_rate),
            "output_len": self.output_len,
            "max_concurrency": self.max_concurrency,
            "offered_output_rate": finite(self.offered_output_rate),
            "cold_warm": None if self.cold_warm is None else self.cold_warm.to_dict(),
            "notes": list(self.notes),
            "predicted_hit_ratio": agg_dict(self.predicted_hit_ratio),
            "prediction_note": self.prediction_note,
            "expected_served": finite(self.expected_served),
            "junction_lost_blocks": finite(self.junction_lost_blocks),
            "expected_served_unbounded": finite(self.expected_served_unbounded),
            "expected_served_full_attention": finite(self.expected_served_full_attention),
            "expected_served_band": (None if self.expected_served_band is None
                                     else list(self.expected_served_band)),
        } | ({} if self.other_load is None else {"other_load": agg_dict(self.other_load)})


@dataclass(frozen=True)
class Step7Row:
    label: str
    configuration: str
    workload: str
    median_ttft_ms: Agg | None
    output_throughput: Agg | None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "configuration": self.configuration,
                "workload": self.workload, "median_ttft_ms": agg_dict(self.median_ttft_ms),
                "output_throughput": agg_dict(self.output_throughput)}


@dataclass(frozen=True)
class Step7:
    """The tutorial's step-7 table and its two derived figures per workload."""

    rows: tuple[Step7Row, ...]
    #: ``(1 - cached / baseline) * 100`` of the median TTFT, per workload (positive:
    #: cached is faster). The tutorial prints it for high overlap.
    ttft_reduction_pct: Mapping[str, float | None]
    #: ``cached / baseline`` output throughput, per workload.
    throughput_gain: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows],
                "ttft_reduction_pct": {k: finite(v) for k, v in self.ttft_reduction_pct.items()},
                "throughput_gain": {k: finite(v) for k, v in self.throughput_gain.items()}}


@dataclass(frozen=True)
class Step9Row:
    """Both step-9 signals of one benchmark against both expectations."""

    configuration: str
    workload: str
    hit_ratio_queries: float | None
    hit_ratio_by_source: float | None
    expected_block_aligned: float | None
    expected_tutorial: float | None
    hit_tokens: float | None
    query_tokens: float | None
    #: The what-if analyzer's prediction for the same requests (``None``: none made).
    predicted: float | None = None
    prediction_note: str | None = None
    #: Expected from the tokens the server sees (``None``: not made; see BenchSummary).
    expected_served: float | None = None

    @property
    def expected(self) -> float | None:
        """The expectation measurements are held to: the served one when made, else the
        block-aligned formula."""
        return self.expected_served if self.expected_served is not None \
            else self.expected_block_aligned

    def diff_pp(self, measured: float | None) -> float | None:
        if measured is None or self.expected is None:
            return None
        return (measured - self.expected) * 100

    def to_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.configuration, "workload": self.workload,
            "hit_ratio_queries": finite(self.hit_ratio_queries),
            "hit_ratio_by_source": finite(self.hit_ratio_by_source),
            "expected_block_aligned": finite(self.expected_block_aligned),
            "expected_tutorial": finite(self.expected_tutorial),
            "diff_pp_queries": finite(self.diff_pp(self.hit_ratio_queries)),
            "diff_pp_by_source": finite(self.diff_pp(self.hit_ratio_by_source)),
            "hit_tokens": finite(self.hit_tokens), "query_tokens": finite(self.query_tokens),
            "predicted": finite(self.predicted),
            "predicted_diff_pp": finite(self.predicted_diff_pp),
            "prediction_note": self.prediction_note,
            "expected_served": finite(self.expected_served),
        }

    @property
    def predicted_diff_pp(self) -> float | None:
        """Measured (hits/queries) minus predicted, in percentage points."""
        if self.hit_ratio_queries is None or self.predicted is None:
            return None
        return (self.hit_ratio_queries - self.predicted) * 100
