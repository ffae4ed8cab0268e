"""The run summary and its per-host parts (see ``docs/summary-schema.md`` for the JSON).

:class:`Summary` is everything ``report.md`` / ``report.html`` / ``summary.json`` show;
:class:`HostSummary` is one host's benchmarks, tables, verdicts, common issues and
failures. The pieces they are built from live beside this module: the vocabulary and
thresholds in :mod:`prefixbench.report.vocab`, one benchmark's figures in
:mod:`prefixbench.report.bench_model`, the fleet spread in
:mod:`prefixbench.report.fleet_model`. Every class has ``to_dict()`` producing the JSON
shape of ``summary.json``; NaN never appears (``None`` instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from prefixbench.hosts.fingerprint import Fingerprint
from prefixbench.report.bench_model import BenchSummary, Step7, Step9Row, agg_dict, finite
from prefixbench.report.economics import HostTime
from prefixbench.report.fleet_model import FleetSummary
from prefixbench.report.goodput import GoodputHost
from prefixbench.report.shortfall import Cause
from prefixbench.report.vocab import (
    CACHED,
    FAIL,
    HIGH_OVERLAP,
    SUSTAINED,
    Status,
    Thresholds,
    overall_status,
)

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "FailureInfo",
    "HostSummary",
    "Issue",
    "Summary",
    "Verdict",
]

#: Version of ``summary.json``; bump on an incompatible change.
SUMMARY_SCHEMA_VERSION: Final = 1


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
                "numbers": {k: (finite(v) if isinstance(v, float) else v)
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
    #: Criterion kind -> the workload that serves it (prefixbench.bench.criteria).
    roles: Mapping[str, str] = field(default_factory=dict)
    #: Bench wall, server start-ups, instance-hours and cost (prefixbench.report.economics).
    time: HostTime | None = None
    #: Cached workload -> why its hit ratio differs from the formula
    #: (prefixbench.report.shortfall); workloads without a difference are left out.
    shortfalls: Mapping[str, tuple[Cause, ...]] = field(default_factory=dict)
    #: The goodput ladder's answer (prefixbench.report.goodput); ``None`` without a ladder.
    goodput: GoodputHost | None = None
    #: Which KV-cache manager the host's cached server ran and which cache model the
    #: predictions use (prefixbench.engines.kvcapacity.kv_cache_line); ``None``: no record.
    kv_cache: str | None = None
    #: The cached benches' TTFT predicted from the host's baseline beside the measured
    #: (prefixbench.report.ttft_predicted.TtftRow.as_dict); empty when not predictable.
    ttft_predicted: tuple[Mapping[str, Any], ...] = ()

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
                "median_ttft_ms": agg_dict(b.median_ttft_ms),
                "p99_ttft_ms": agg_dict(b.p99_ttft_ms),
                "output_throughput": agg_dict(b.output_throughput),
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
            "shortfalls": {w: [c.to_dict() for c in causes]
                           for w, causes in self.shortfalls.items()},
            "goodput": None if self.goodput is None else self.goodput.to_dict(),
            "kv_cache": self.kv_cache,
            "ttft_predicted": [dict(r) for r in self.ttft_predicted],
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
    #: Results used although they carry no checksum (``--accept-unchecksummed``), as
    #: paths in the run directory: figures that cannot be shown unedited.
    unchecksummed: tuple[str, ...] = ()

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
            "unchecksummed": list(self.unchecksummed),
        }
