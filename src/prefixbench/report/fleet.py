"""Fleet checks: each metric's spread across hosts, its outliers, hit-ratio departures
from the expectation, and fingerprint groups and drift.

:func:`fleet_values` gives each host's value of every metric (its median over
repetitions); :func:`fleet_summary` judges the spread and the drift within each cohort
(hosts of one instance type, release, model and settings: a mixed Trn2/Trn3 fleet is not
one population) against the
:class:`~prefixbench.report.vocab.Thresholds`, into a
:class:`~prefixbench.report.fleet_model.FleetSummary`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from prefixbench.hosts import instances
from prefixbench.hosts.fingerprint import (
    Fingerprint,
    cohorts,
    drift_within_cohorts,
    group_by_identity,
)
from prefixbench.hosts.releases import version_tuple
from prefixbench.measure.stats import coefficient_of_variation, mad, robust_z_scores
from prefixbench.measure.stats import median as _median
from prefixbench.report.bench_model import agg_median
from prefixbench.report.fleet_model import FleetMetric, FleetOutlier, FleetSummary, HitDeparture
from prefixbench.report.load import RunData
from prefixbench.report.model import HostSummary
from prefixbench.report.vocab import CACHED, Thresholds

__all__ = ["MIN_HOSTS", "departure_rule", "fleet_summary", "fleet_values", "outlier_rule",
           "release_groups", "releases_line"]

#: Outliers are looked for among at least this many hosts of one family.
MIN_HOSTS: Final = 3


def outlier_rule(t: Thresholds) -> str:
    """When :func:`fleet_summary` flags a host as an outlier, in words."""
    return (f"a host whose value of a metric has |robust z| > {t.outlier_z:g}, or (except "
            f"hit ratios and TTFT reductions) lies more than {t.outlier_rel:.0%} from the "
            f"median of its instance family ({MIN_HOSTS}+ hosts of that family)")


def departure_rule(t: Thresholds) -> str:
    """When :func:`fleet_summary` lists a hit-ratio departure, in words."""
    return (f"a cached run whose measured hit ratio (either signal) is more than "
            f"{t.hit_ratio_max_abs_diff * 100:.1f} percentage point(s) from its expectation "
            f"(the one the hit-rate verdict uses)")


def release_groups(fps: Sequence[Fingerprint]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each Neuron release the hosts' fingerprints name, with its hosts, oldest first
    (a host whose fingerprint names none is under ``unknown``)."""
    groups: dict[str, list[str]] = {}
    for fp in fps:
        groups.setdefault(fp.neuron_release or "unknown", []).append(fp.host)

    def order(name: str) -> tuple[int, tuple[int, ...], str]:
        return (name == "unknown", version_tuple(name), name)
    return tuple((rel, tuple(sorted(groups[rel]))) for rel in sorted(groups, key=order))


def releases_line(f: FleetSummary) -> str:
    """One sentence on the Neuron releases of the fleet ("" for a single release)."""
    if not f.mixed_releases:
        return ""
    parts = "; ".join(f"{rel} ({', '.join(hosts)})" for rel, hosts in f.releases)
    return (f"The fleet mixes Neuron releases: {parts}. Each release runs its own vLLM, "
            "plugin and compiler builds: compare hosts within a release, not across.")


def fleet_values(hosts: Sequence[HostSummary]) -> dict[str, dict[str, float]]:
    """Per metric name, each host's value (its median over repetitions)."""
    metrics: dict[str, dict[str, float]] = {}

    def put(name: str, host: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            metrics.setdefault(name, {})[host] = value

    for h in hosts:
        for b in h.benches:
            prefix = f"{b.configuration}/{b.workload}"
            put(f"{prefix}/median_ttft_ms", h.host, agg_median(b.median_ttft_ms))
            put(f"{prefix}/p99_ttft_ms", h.host, agg_median(b.p99_ttft_ms))
            put(f"{prefix}/output_throughput", h.host, agg_median(b.output_throughput))
            if b.configuration == CACHED:
                put(f"{prefix}/hit_ratio", h.host,
                    agg_median(b.hit_ratio_by_source) if b.hit_ratio_by_source
                    else agg_median(b.hit_ratio_queries))
        for wl, v in h.step7.ttft_reduction_pct.items():
            put(f"{wl}/ttft_reduction_pct", h.host, v)
    return metrics


def _fleet_metric(name: str, values: Mapping[str, float], t: Thresholds) -> FleetMetric:
    hosts = sorted(values)
    xs = [values[h] for h in hosts]
    med = _median(xs)
    zs = robust_z_scores(xs) if len(xs) >= MIN_HOSTS else [0.0] * len(xs)
    outs: list[FleetOutlier] = []
    relative_ok = not name.endswith(("hit_ratio", "ttft_reduction_pct"))
    for h, x, z in zip(hosts, xs, zs, strict=True):
        rel = (x / med - 1) if med else None
        reasons = []
        if len(xs) >= MIN_HOSTS and abs(z) > t.outlier_z:
            reasons.append(f"robust z {z:+.1f} (> {t.outlier_z})")
        if len(xs) >= MIN_HOSTS and relative_ok and rel is not None and abs(rel) > t.outlier_rel:
            reasons.append(f"{rel * 100:+.0f}% from the fleet median (> {t.outlier_rel:.0%})")
        if reasons:
            outs.append(FleetOutlier(host=h, value=x, robust_z=z, rel_dev=rel,
                                     reasons=tuple(reasons)))
    return FleetMetric(name=name, values=dict(zip(hosts, xs, strict=True)), median=med,
                       cv=coefficient_of_variation(xs), mad=mad(xs),
                       robust_z=dict(zip(hosts, zs, strict=True)), outliers=tuple(outs))


def _family(h: HostSummary) -> str:
    fp = h.fingerprint
    if fp is not None and fp.family:
        return fp.family
    return instances.family(fp.instance_type) if fp is not None and fp.instance_type else "?"


def fleet_summary(hosts: Sequence[HostSummary], data: RunData, t: Thresholds) -> FleetSummary:
    """The fleet's spread, outliers, hit-ratio departures and fingerprint drift, each
    within a cohort (:func:`~prefixbench.hosts.fingerprint.cohorts`: the hosts that should
    be equal)."""
    # Trn2 and Trn3 hosts, two releases, two models or two sets of settings are different
    # populations: spread, outliers and drift are computed within each cohort (metric
    # names prefixed with its label when there are several).
    fps = [data.fingerprints[h.host] for h in hosts if h.host in data.fingerprints]
    groups = cohorts(fps)
    label = {host: c.label for c in groups for host in c.hosts}
    families: dict[str, list[HostSummary]] = {}
    for h in hosts:
        families.setdefault(label.get(h.host, f"no fingerprint ({_family(h)})"), []).append(h)
    metrics = []
    for fam, members in sorted(families.items()):
        prefix = f"{fam}: " if len(families) > 1 else ""
        metrics += [_fleet_metric(prefix + n, v, t)
                    for n, v in sorted(fleet_values(members).items())]
    departures: list[HitDeparture] = []
    for h in hosts:
        for b in h.benches:
            exp = (b.expected_served if b.expected_served is not None
                   else b.expected_block_aligned)
            if b.configuration != CACHED or exp is None:
                continue
            # Above concurrency 1 the expectation is a range over arrival timings.
            band = b.expected_served_band if b.expected_served is not None else None
            lo, hi = band if band is not None else (exp, exp)
            for sig, a in (("queries", b.hit_ratio_queries), ("by_source", b.hit_ratio_by_source)):
                if a is not None and not (lo - t.hit_ratio_max_abs_diff - 1e-12 <= a.median
                                          <= hi + t.hit_ratio_max_abs_diff + 1e-12):
                    departures.append(HitDeparture(
                        host=h.host, configuration=b.configuration, workload=b.workload,
                        signal=sig, measured=a.median, expected=exp, band=band))
    return FleetSummary(
        hosts=tuple(h.host for h in hosts), metrics=tuple(metrics),
        hit_departures=tuple(departures),
        fingerprint_groups=tuple(group_by_identity(fps)),
        drift=tuple(drift_within_cohorts(fps)), cohorts=tuple(groups),
        hosts_without_fingerprint=tuple(h.host for h in hosts
                                        if h.host not in data.fingerprints),
        releases=release_groups(fps))
