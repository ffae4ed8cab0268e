"""Aggregate a host's records over repetitions, and lay out the tutorial's tables.

:func:`bench_summary` folds the :class:`~prefixbench.report.records.RecordView` of each
repetition of one (host, configuration, workload) into a
:class:`~prefixbench.report.bench_model.BenchSummary` (medians, summed counters, pooled
per-request times with the cold/warm split). :class:`HostView` is one host's summaries by
configuration and criterion role, read by the tables, the verdicts and the common issues;
:func:`step7_of` and :func:`step9_of` are the tutorial's step-7 and step-9 tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prefixbench.measure.stats import median as _median
from prefixbench.measure.stats import percentile
from prefixbench.report.bench_model import (
    BenchSummary,
    ColdWarm,
    Step7,
    Step7Row,
    Step9Row,
    agg,
    agg_median,
)
from prefixbench.report.records import RecordView, as_float
from prefixbench.report.vocab import BASELINE, CACHED, HIGH_OVERLAP, NO_OVERLAP

__all__ = ["STEP7_ROWS", "HostView", "bench_summary", "step7_of", "step9_of"]


@dataclass
class HostView:
    """One host's benchmark summaries by (configuration, workload), and the workload
    that serves each criterion kind: what the tables, verdicts and common issues read."""

    name: str
    benches: dict[tuple[str, str], BenchSummary]
    #: Criterion kind -> the workload that serves it (prefixbench.bench.criteria).
    roles: Mapping[str, str] = field(default_factory=dict)

    def get(self, configuration: str, workload: str) -> BenchSummary | None:
        return self.benches.get((configuration, workload))

    def role(self, configuration: str, role: str) -> BenchSummary | None:
        name = self.roles.get(role)
        return None if name is None else self.benches.get((configuration, name))


def _cold_warm(values: Sequence[float], cold: Sequence[bool], source: str) -> ColdWarm:
    cold_ms = tuple(v for v, c in zip(values, cold, strict=True) if c)
    warm_ms = tuple(v for v, c in zip(values, cold, strict=True) if not c)
    slowest = max(range(len(values)), key=lambda i: values[i])
    return ColdWarm(
        source=source, cold_ms=cold_ms, warm_ms=warm_ms,
        p99_all_ms=percentile(values, 99),
        p99_warm_ms=percentile(warm_ms, 99) if warm_ms else None,
        median_cold_ms=_median(cold_ms) if cold_ms else None,
        median_warm_ms=_median(warm_ms) if warm_ms else None,
        slowest_is_cold=bool(cold[slowest]) and bool(warm_ms))


def _median_or_none(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return _median(kept) if kept else None


def _sum(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return math.fsum(kept) if kept else None


def bench_summary(views: Sequence[RecordView]) -> BenchSummary:
    """One (host, configuration, workload) over its repetitions (``views``: not empty)."""
    views = sorted(views, key=lambda v: v.record.key.repetition)
    first = views[0]
    key = first.record.key
    results = [v.record.bench_result for v in views]
    values: list[float] = []
    colds: list[bool] = []
    sources = {v.per_request_source for v in views if v.per_request_source}
    all_flags = True
    notes: list[str] = []
    for v in views:
        values.extend(v.per_request_ms)
        if v.per_request_cold is None:
            all_flags = False
        else:
            colds.extend(v.per_request_cold)
        if v.note:
            notes.append(f"rep{v.record.key.repetition}: {v.note}")
    source = "ttfts" if sources == {"ttfts"} else ("latencies" if sources else None)
    cold_warm = None
    if all_flags and values and source is not None and len(colds) == len(values):
        cold_warm = _cold_warm(values, colds, source)
    w = first.workload
    kv = [v.kv_cache_usage for v in views if v.kv_cache_usage is not None]
    predictions = [v.predicted for v in views if v.predicted is not None]
    prediction_notes = sorted({p.note for p in predictions if p.note})
    return BenchSummary(
        host=key.host, configuration=key.configuration, workload=key.workload,
        repetitions=tuple(v.record.key.repetition for v in views),
        median_ttft_ms=agg([r.median_ttft_ms for r in results]),
        p99_ttft_ms=agg([r.p99_ttft_ms for r in results]),
        mean_ttft_ms=agg([as_float(r.data.get("mean_ttft_ms")) for r in results]),
        output_throughput=agg([r.output_throughput for r in results]),
        completed=sum(r.completed for r in results),
        failed=sum(r.failed for r in results),
        hit_ratio_queries=agg([v.hit_ratio_queries for v in views]),
        hit_ratio_by_source=agg([v.hit_ratio_by_source for v in views]),
        expected_block_aligned=first.expected_block_aligned,
        expected_tutorial=first.expected_tutorial,
        block_size=first.block_size,
        prefix_caching_enabled=first.prefix_caching_enabled,
        preemptions=_sum(v.preemptions for v in views),
        evictions_sampled=_sum(v.evictions_sampled for v in views),
        kv_cache_usage_max=max(kv) if kv else None,
        hit_tokens=_sum(v.hit_tokens for v in views),
        query_tokens=_sum(v.query_tokens for v in views),
        request_rate=None if w is None else w.request_rate,
        output_len=None if w is None else w.output_len,
        max_concurrency=None if w is None else w.max_concurrency,
        cold_warm=cold_warm,
        per_request_ms=tuple(values),
        per_request_cold=tuple(colds) if cold_warm is not None else (),
        notes=tuple(notes),
        predicted_hit_ratio=agg([p.ratio for p in predictions]),
        prediction_note="; ".join(prediction_notes) or None,
        ttft_by_rep=tuple(v.ttft_aligned for v in views if v.ttft_aligned),
        expected_served=_median_or_none([v.expected_served for v in views]),
        junction_lost_blocks=_sum(v.junction_lost_blocks for v in views),
        expected_served_unbounded=_median_or_none(
            [v.expected_served_unbounded for v in views]),
        expected_served_full_attention=_median_or_none(
            [v.expected_served_full_attention for v in views]),
        expected_served_band=_band([v.expected_served_band for v in views]),
        other_load=agg([_other_share(v.record.extra) for v in views]))


def _band(bands: Sequence[tuple[float, float] | None]) -> tuple[float, float] | None:
    """The repetitions' bands together; ``None`` unless every repetition has one."""
    if not bands or any(b is None for b in bands):
        return None
    known = [b for b in bands if b is not None]
    return min(b[0] for b in known), max(b[1] for b in known)


def _other_share(extra: Mapping[str, Any]) -> float | None:
    """The record's ``host_load.other_share`` (prefixbench.measure.hostload), if any."""
    load = extra.get("host_load")
    return as_float(load.get("other_share")) if isinstance(load, Mapping) else None


# -- tables --------------------------------------------------------------------------------

#: The step-7 table's rows: label, configuration, criterion kind.
STEP7_ROWS: Final = (
    ("baseline (high overlap)", BASELINE, HIGH_OVERLAP),
    ("cached (high overlap)", CACHED, HIGH_OVERLAP),
    ("baseline (no overlap)", BASELINE, NO_OVERLAP),
    ("cached (no overlap)", CACHED, NO_OVERLAP),
)


def step7_of(host: HostView) -> Step7:
    """The tutorial's step-7 table, with the TTFT reduction and throughput gain."""
    rows = []
    for label, conf, role in STEP7_ROWS:
        b = host.role(conf, role)
        rows.append(Step7Row(label=label, configuration=conf,
                             workload=host.roles.get(role, role),
                             median_ttft_ms=None if b is None else b.median_ttft_ms,
                             output_throughput=None if b is None else b.output_throughput))
    reduction: dict[str, float | None] = {}
    gain: dict[str, float | None] = {}
    for wl in (HIGH_OVERLAP, NO_OVERLAP):
        base, cached = host.role(BASELINE, wl), host.role(CACHED, wl)
        bt = agg_median(base.median_ttft_ms) if base else None
        ct = agg_median(cached.median_ttft_ms) if cached else None
        reduction[wl] = (1 - ct / bt) * 100 if bt and ct is not None else None
        bo = agg_median(base.output_throughput) if base else None
        co = agg_median(cached.output_throughput) if cached else None
        gain[wl] = co / bo if bo and co is not None else None
    return Step7(rows=tuple(rows), ttft_reduction_pct=reduction, throughput_gain=gain)


def step9_of(benches: Sequence[BenchSummary]) -> tuple[Step9Row, ...]:
    """Step 9: both hit-ratio signals of every benchmark against the expectations."""
    rows = []
    for b in benches:
        # A server without prefix caching is expected to hit nothing.
        off = b.configuration == BASELINE or b.prefix_caching_enabled is False
        rows.append(Step9Row(
            configuration=b.configuration, workload=b.workload,
            hit_ratio_queries=agg_median(b.hit_ratio_queries),
            hit_ratio_by_source=agg_median(b.hit_ratio_by_source),
            expected_block_aligned=0.0 if off else b.expected_block_aligned,
            expected_tutorial=0.0 if off else b.expected_tutorial,
            hit_tokens=b.hit_tokens, query_tokens=b.query_tokens,
            predicted=None if off else agg_median(b.predicted_hit_ratio),
            prediction_note=None if off else b.prediction_note,
            expected_served=0.0 if off else b.expected_served))
    return tuple(rows)
