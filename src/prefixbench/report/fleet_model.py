"""Typed fleet spread of a run: each metric across hosts, its outliers, hit-ratio
departures from the expectation, and the fingerprint groups and drift.

:mod:`prefixbench.report.fleet` computes them; every ``to_dict()`` gives the JSON shape
of ``summary.json``'s ``fleet`` (``docs/summary-schema.md``), with ``None`` for NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefixbench.hosts.fingerprint import Cohort, Drift, FingerprintGroup
from prefixbench.report.bench_model import finite

__all__ = ["FleetMetric", "FleetOutlier", "FleetSummary", "HitDeparture"]


@dataclass(frozen=True)
class FleetOutlier:
    host: str
    value: float
    robust_z: float
    rel_dev: float | None
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "value": self.value, "robust_z": self.robust_z,
                "rel_dev": finite(self.rel_dev), "reasons": list(self.reasons)}


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
                "cv": finite(self.cv), "mad": self.mad, "robust_z": dict(self.robust_z),
                "outliers": [o.to_dict() for o in self.outliers]}


@dataclass(frozen=True)
class HitDeparture:
    host: str
    configuration: str
    workload: str
    signal: str
    measured: float
    expected: float
    #: The range arrival timing gives the expectation above concurrency 1; the
    #: departure is then from the range, not only from ``expected``.
    band: tuple[float, float] | None = None

    @property
    def diff_pp(self) -> float:
        """From the expectation, or from the nearer end of the range."""
        if self.band is not None:
            lo, hi = self.band
            return (self.measured - (lo if self.measured < lo else hi)) * 100
        return (self.measured - self.expected) * 100

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "configuration": self.configuration,
                "workload": self.workload, "signal": self.signal,
                "measured": self.measured, "expected": self.expected,
                "band": None if self.band is None else list(self.band),
                "diff_pp": self.diff_pp}


@dataclass(frozen=True)
class FleetSummary:
    hosts: tuple[str, ...]
    metrics: tuple[FleetMetric, ...]
    hit_departures: tuple[HitDeparture, ...]
    fingerprint_groups: tuple[FingerprintGroup, ...]
    drift: tuple[Drift, ...]
    hosts_without_fingerprint: tuple[str, ...]
    #: ``((release, (host, ...)), ...)``: each Neuron release the hosts ran, oldest first.
    releases: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The hosts that should be equal, grouped (instance type, release, model, settings):
    #: spread, outliers and ``drift`` are within each.
    cohorts: tuple[Cohort, ...] = ()

    @property
    def mixed_releases(self) -> bool:
        """Whether the hosts ran more than one Neuron release."""
        return len(self.releases) > 1

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
            "neuron_releases": {rel: list(hosts) for rel, hosts in self.releases},
            "mixed_releases": self.mixed_releases,
            "cohorts": [c.to_dict() for c in self.cohorts],
        }
