"""Typed pieces of a run summary (see ``docs/summary-schema.md`` for the JSON form).

Every class has ``to_dict()`` producing the JSON shape of ``summary.json``; NaN never
appears (``None`` instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from prefixbench.fingerprint import Drift, Fingerprint, FingerprintGroup
from prefixbench.report.economics import HostTime
from prefixbench.stats import median

__all__ = [
    "BASELINE",
    "CACHED",
    "FAIL",
    "HIGH_OVERLAP",
    "INCONCLUSIVE",
    "NOT_RUN",
    "NO_OVERLAP",
    "PASS",
    "SUMMARY_SCHEMA_VERSION",
    "SUSTAINED",
    "Agg",
    "BenchSummary",
    "ColdWarm",
    "FailureInfo",
    "FleetMetric",
    "FleetOutlier",
    "FleetSummary",
    "HitDeparture",
    "HostSummary",
    "Issue",
    "Status",
    "Step7",
    "Step7Row",
    "Step9Row",
    "Summary",
    "Thresholds",
    "Verdict",
    "agg",
]

#: Version of ``summary.json``; bump on an incompatible change.
SUMMARY_SCHEMA_VERSION: Final = 1

BASELINE: Final = "baseline"
CACHED: Final = "cached"
#: The criteria's workload kinds (prefixbench.criteria): not workload names.
HIGH_OVERLAP: Final = "high_overlap"
NO_OVERLAP: Final = "no_overlap"
SUSTAINED: Final = "sustained"

Status = Literal["PASS", "FAIL", "INCONCLUSIVE", "NOT_RUN"]
PASS: Final[Status] = "PASS"  # noqa: S105 - a verdict, not a password
FAIL: Final[Status] = "FAIL"
#: The interval straddles the threshold, or a result the criterion needs is missing.
INCONCLUSIVE: Final[Status] = "INCONCLUSIVE"
#: No workload of the criterion's kind in the run.
NOT_RUN: Final[Status] = "NOT_RUN"


def _f(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True)
class Thresholds:
    """Every threshold a verdict, issue or fleet flag uses (documented in RUNBOOK.md)."""

    #: Confirmation 1: cached high-overlap median TTFT <= this x baseline ("measurably
    #: lower"); with more than one repetition each side, the slowest cached repetition
    #: must also be faster than the fastest baseline one (outside repetition noise).
    lower_ttft_max_ratio: float = 0.90
    #: Confirmation 2: cached / baseline no-overlap median TTFT at most 1 + this (one-sided:
    #: a regression is what the criterion guards against).
    no_overlap_max_rel_diff: float = 0.10
    #: Confirmation 3: both measured hit ratios within this (absolute, 0.01 = 1 point) of
    #: the block-aligned expectation, on the cached high- and no-overlap runs.
    hit_ratio_max_abs_diff: float = 0.01
    #: Confirmation 4: sustained c=4 output throughput >= this x cached c=1 ...
    throughput_min_ratio: float = 1.0
    #: ... or >= this fraction of the offered load (request_rate x output_len): the
    #: server served everything offered, so c=4 throughput is capped by the rate.
    rate_bound_fraction: float = 0.95
    #: Confirmation 4 (caching's benefit under load): cached / baseline median TTFT of the
    #: sustained workload at most this ...
    sustained_ttft_max_ratio: float = 1.0
    #: ... and cached output throughput at least this x baseline's (unless rate-capped).
    sustained_throughput_min_ratio: float = 0.95
    #: Confidence of every timing interval (paired two-stage bootstrap).
    confidence: float = 0.95
    #: Common issue "hits but no TTFT gain": high-overlap TTFT reduction below this.
    no_gain_max_reduction: float = 0.10
    #: Fleet outliers: |robust z| above this ...
    outlier_z: float = 3.5
    #: ... or the host departs from the fleet median by more than this fraction (robust z
    #: cannot exceed 2.39 with 3 hosts when two are equal, so small fleets need this).
    outlier_rel: float = 0.25

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


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


def _agg_dict(a: Agg | None) -> dict[str, Any] | None:
    return None if a is None else a.to_dict()


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
    #: The what-if analyzer's hit ratio for the same requests (prefixbench.whatif),
    #: median over repetitions; ``prediction_note`` says why there is none, or its limits.
    predicted_hit_ratio: Agg | None = None
    prediction_note: str | None = None
    #: Per-request TTFT (ms) of each repetition in send order, ``None`` for a failed
    #: request: what the paired intervals are built from (not in summary.json).
    ttft_by_rep: tuple[tuple[float | None, ...], ...] = ()
    #: The expected ratio from the tokens the server sees (the prompts the bench sends,
    #: re-encoded and replayed: prefixbench.whatif.served_expectation), and the blocks
    #: lost where prefix and suffix re-split; ``None`` where it was not made.
    expected_served: float | None = None
    junction_lost_blocks: float | None = None

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
            "median_ttft_ms": _agg_dict(self.median_ttft_ms),
            "p99_ttft_ms": _agg_dict(self.p99_ttft_ms),
            "mean_ttft_ms": _agg_dict(self.mean_ttft_ms),
            "output_throughput": _agg_dict(self.output_throughput),
            "completed": self.completed, "failed": self.failed,
            "hit_ratio_queries": _agg_dict(self.hit_ratio_queries),
            "hit_ratio_by_source": _agg_dict(self.hit_ratio_by_source),
            "expected_block_aligned": _f(self.expected_block_aligned),
            "expected_tutorial": _f(self.expected_tutorial),
            "block_size": self.block_size,
            "prefix_caching_enabled": self.prefix_caching_enabled,
            "preemptions": _f(self.preemptions),
            "evictions_sampled": _f(self.evictions_sampled),
            "kv_cache_usage_max": _f(self.kv_cache_usage_max),
            "hit_tokens": _f(self.hit_tokens), "query_tokens": _f(self.query_tokens),
            "request_rate": _f(self.request_rate),
            "output_len": self.output_len,
            "max_concurrency": self.max_concurrency,
            "offered_output_rate": _f(self.offered_output_rate),
            "cold_warm": None if self.cold_warm is None else self.cold_warm.to_dict(),
            "notes": list(self.notes),
            "predicted_hit_ratio": _agg_dict(self.predicted_hit_ratio),
            "prediction_note": self.prediction_note,
            "expected_served": _f(self.expected_served),
            "junction_lost_blocks": _f(self.junction_lost_blocks),
        }


@dataclass(frozen=True)
class Step7Row:
    label: str
    configuration: str
    workload: str
    median_ttft_ms: Agg | None
    output_throughput: Agg | None

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "configuration": self.configuration,
                "workload": self.workload, "median_ttft_ms": _agg_dict(self.median_ttft_ms),
                "output_throughput": _agg_dict(self.output_throughput)}


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
                "ttft_reduction_pct": {k: _f(v) for k, v in self.ttft_reduction_pct.items()},
                "throughput_gain": {k: _f(v) for k, v in self.throughput_gain.items()}}


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
            "hit_ratio_queries": _f(self.hit_ratio_queries),
            "hit_ratio_by_source": _f(self.hit_ratio_by_source),
            "expected_block_aligned": _f(self.expected_block_aligned),
            "expected_tutorial": _f(self.expected_tutorial),
            "diff_pp_queries": _f(self.diff_pp(self.hit_ratio_queries)),
            "diff_pp_by_source": _f(self.diff_pp(self.hit_ratio_by_source)),
            "hit_tokens": _f(self.hit_tokens), "query_tokens": _f(self.query_tokens),
            "predicted": _f(self.predicted),
            "predicted_diff_pp": _f(self.predicted_diff_pp),
            "prediction_note": self.prediction_note,
            "expected_served": _f(self.expected_served),
        }

    @property
    def predicted_diff_pp(self) -> float | None:
        """Measured (hits/queries) minus predicted, in percentage points."""
        if self.hit_ratio_queries is None or self.predicted is None:
            return None
        return (self.hit_ratio_queries - self.predicted) * 100


@dataclass(frozen=True)
class Verdict:
    """One of the tutorial's four confirmation criteria, decided on the data."""

    name: str
    criterion: str
    threshold: str
    status: Status
    detail: str
    numbers: Mapping[str, float | str | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "criterion": self.criterion, "threshold": self.threshold,
                "status": self.status, "detail": self.detail,
                "numbers": {k: (_f(v) if isinstance(v, float) else v)
                            for k, v in self.numbers.items()}}


@dataclass(frozen=True)
class Issue:
    """A "common issue" (the tutorial's, or one the bundle knows) seen in the data."""

    code: str
    title: str
    host: str
    evidence: str
    fix: str
    #: ``"tutorial"`` when the issue and its fix are the tutorial's "Common issues".
    source: str = "tutorial"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "title": self.title, "host": self.host,
                "evidence": self.evidence, "fix": self.fix, "source": self.source}


@dataclass(frozen=True)
class FailureInfo:
    host: str
    configuration: str
    workload: str
    repetition: int
    error: str
    returncode: int | None
    path: str
    log_tail: str

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "configuration": self.configuration,
                "workload": self.workload, "repetition": self.repetition,
                "error": self.error, "returncode": self.returncode, "path": self.path,
                "log_tail": self.log_tail}


@dataclass(frozen=True)
class HostSummary:
    host: str
    benches: tuple[BenchSummary, ...]
    step7: Step7
    step9: tuple[Step9Row, ...]
    verdicts: tuple[Verdict, ...]
    issues: tuple[Issue, ...]
    fingerprint: Fingerprint | None
    failures: tuple[FailureInfo, ...]
    #: Criterion kind -> the workload that serves it (prefixbench.criteria).
    roles: Mapping[str, str] = field(default_factory=dict)
    #: Bench wall, server start-ups, instance-hours and cost (prefixbench.report.economics).
    time: HostTime | None = None

    def bench(self, configuration: str, workload: str) -> BenchSummary | None:
        for b in self.benches:
            if b.configuration == configuration and b.workload == workload:
                return b
        return None

    @property
    def status(self) -> Status:
        return overall_status(v.status for v in self.verdicts)

    def role(self, configuration: str, role: str) -> BenchSummary | None:
        name = self.roles.get(role)
        return None if name is None else self.bench(configuration, name)

    def step8(self) -> tuple[BenchSummary | None, BenchSummary | None]:
        """Step 8's two runs: the cached high-overlap (c=1) and sustained workloads."""
        return self.role(CACHED, HIGH_OVERLAP), self.role(CACHED, SUSTAINED)

    def step8_dict(self) -> dict[str, Any]:
        c1, c4 = self.step8()

        def side(b: BenchSummary | None) -> dict[str, Any] | None:
            if b is None:
                return None
            cw = b.cold_warm
            return {
                "workload": b.workload,
                "max_concurrency": b.max_concurrency,
                "median_ttft_ms": _agg_dict(b.median_ttft_ms),
                "p99_ttft_ms": _agg_dict(b.p99_ttft_ms),
                "output_throughput": _agg_dict(b.output_throughput),
                "p99_warm_ms": None if cw is None else cw.p99_warm_ms,
                "slowest_is_cold": None if cw is None else cw.slowest_is_cold,
                "per_request_source": None if cw is None else cw.source,
            }

        return {"concurrency_1": side(c1), "concurrency_4": side(c4)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "status": self.status,
            "benchmarks": [b.to_dict() for b in self.benches],
            "step7": self.step7.to_dict(),
            "step8": self.step8_dict(),
            "step9": [r.to_dict() for r in self.step9],
            "verdicts": [v.to_dict() for v in self.verdicts],
            "issues": [i.to_dict() for i in self.issues],
            "fingerprint": None if self.fingerprint is None else self.fingerprint.to_dict(),
            "failures": [f.to_dict() for f in self.failures],
            "roles": dict(self.roles),
            "time": None if self.time is None else self.time.to_dict(),
        }


def overall_status(statuses: Any) -> Status:
    """FAIL if any verdict failed, else INCONCLUSIVE if any is, else PASS; NOT_RUN when
    no criterion was judged at all."""
    seen = [s for s in statuses if s != NOT_RUN]
    if FAIL in seen:
        return FAIL
    if INCONCLUSIVE in seen:
        return INCONCLUSIVE
    return PASS if seen else NOT_RUN


@dataclass(frozen=True)
class FleetOutlier:
    host: str
    value: float
    robust_z: float
    rel_dev: float | None
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "value": self.value, "robust_z": self.robust_z,
                "rel_dev": _f(self.rel_dev), "reasons": list(self.reasons)}


@dataclass(frozen=True)
class FleetMetric:
    """One metric across hosts (each host's median over repetitions)."""

    name: str
    values: Mapping[str, float]
    median: float
    cv: float | None
    mad: float
    robust_z: Mapping[str, float]
    outliers: tuple[FleetOutlier, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "values": dict(self.values), "median": self.median,
                "cv": _f(self.cv), "mad": self.mad, "robust_z": dict(self.robust_z),
                "outliers": [o.to_dict() for o in self.outliers]}


@dataclass(frozen=True)
class HitDeparture:
    host: str
    configuration: str
    workload: str
    signal: str
    measured: float
    expected: float

    @property
    def diff_pp(self) -> float:
        return (self.measured - self.expected) * 100

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "configuration": self.configuration,
                "workload": self.workload, "signal": self.signal,
                "measured": self.measured, "expected": self.expected,
                "diff_pp": self.diff_pp}


@dataclass(frozen=True)
class FleetSummary:
    hosts: tuple[str, ...]
    metrics: tuple[FleetMetric, ...]
    hit_departures: tuple[HitDeparture, ...]
    fingerprint_groups: tuple[FingerprintGroup, ...]
    drift: tuple[Drift, ...]
    hosts_without_fingerprint: tuple[str, ...]

    @property
    def outlier_hosts(self) -> list[str]:
        return sorted({o.host for m in self.metrics for o in m.outliers})

    @property
    def flagged(self) -> bool:
        return bool(self.outlier_hosts or self.hit_departures or self.drift)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": list(self.hosts),
            "metrics": [m.to_dict() for m in self.metrics],
            "outlier_hosts": self.outlier_hosts,
            "hit_ratio_departures": [d.to_dict() for d in self.hit_departures],
            "fingerprint_groups": [g.to_dict() for g in self.fingerprint_groups],
            "drift": [d.to_dict() for d in self.drift],
            "hosts_without_fingerprint": list(self.hosts_without_fingerprint),
        }


@dataclass(frozen=True)
class Summary:
    """Everything ``report.md`` / ``report.html`` / ``summary.json`` show."""

    run_id: str
    run: Mapping[str, Any]
    generated_at: str
    thresholds: Thresholds
    hosts: tuple[HostSummary, ...]
    fleet: FleetSummary
    failures: tuple[FailureInfo, ...]
    warnings: tuple[str, ...]

    @property
    def status(self) -> Status:
        return overall_status(v.status for h in self.hosts for v in h.verdicts)

    @property
    def failed_verdicts(self) -> list[tuple[str, Verdict]]:
        return [(h.host, v) for h in self.hosts for v in h.verdicts if v.status == FAIL]

    def host(self, name: str) -> HostSummary:
        for h in self.hosts:
            if h.host == name:
                return h
        raise KeyError(f"no host {name!r} in run {self.run_id}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SUMMARY_SCHEMA_VERSION,
            "run_id": self.run_id,
            "run": dict(self.run),
            "generated_at": self.generated_at,
            "status": self.status,
            "thresholds": self.thresholds.to_dict(),
            "hosts": [h.to_dict() for h in self.hosts],
            "fleet": self.fleet.to_dict(),
            "failures": [f.to_dict() for f in self.failures],
            "warnings": list(self.warnings),
        }
