"""Compare a run against a reference run, metric by metric, with tolerances.

Metrics (per host present in both runs, and for the fleet = the median over hosts):

* ``<configuration>/<workload>/median_ttft_ms`` - lower is better
* ``<configuration>/<workload>/output_throughput`` - higher is better
* ``<workload>/ttft_reduction_pct`` - higher is better (step 7's reduction)
* ``cached/<workload>/hit_ratio`` - two-sided: a hit ratio that moved either way means
  the cache behaves differently (more hits than before is carry-over, not a gain)

A metric regresses when it is worse than the reference by more than
``max(rel x |reference|, abs)``. Defaults (:data:`DEFAULT_TOLERANCES`) are overridable
per metric kind from a YAML file::

    tolerances:
      median_ttft_ms: {rel: 0.10, abs: 1.0}
      output_throughput: {rel: 0.10}
      ttft_reduction_pct: {abs: 5.0}
      hit_ratio: {abs: 0.01}
    scope: both          # fleet | hosts | both
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from prefixbench.measure.stats import median
from prefixbench.report.build import build_summary
from prefixbench.report.fleet import fleet_values
from prefixbench.report.model import Summary

__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "MetricComparison",
    "Tolerance",
    "ToleranceError",
    "Tolerances",
    "compare",
    "compare_summaries",
    "load_tolerances",
]

Direction = Literal["lower", "higher", "both"]

#: Which way is better, per metric kind (the last component of a metric name).
DIRECTIONS: Final[dict[str, Direction]] = {
    "median_ttft_ms": "lower",
    "output_throughput": "higher",
    "ttft_reduction_pct": "higher",
    "hit_ratio": "both",
}


class ToleranceError(ValueError):
    """The tolerance file is malformed; names the file and key."""


@dataclass(frozen=True)
class Tolerance:
    """Allowed worsening: ``max(rel * |reference|, abs)``."""

    rel: float = 0.0
    abs: float = 0.0

    def allowed(self, reference: float) -> float:
        return max(self.rel * abs(reference), self.abs)


#: 10% on TTFT and throughput (the recorded CPU run varied 28% in throughput between two
#: identical single runs, so gate on repetitions), 5 points of TTFT reduction, 1 point of
#: hit ratio (what "matches expected" allows).
DEFAULT_TOLERANCES: Final[Mapping[str, Tolerance]] = {
    "median_ttft_ms": Tolerance(rel=0.10, abs=1.0),
    "output_throughput": Tolerance(rel=0.10),
    "ttft_reduction_pct": Tolerance(abs=5.0),
    "hit_ratio": Tolerance(abs=0.01),
}


@dataclass(frozen=True)
class Tolerances:
    per_metric: Mapping[str, Tolerance] = field(
        default_factory=lambda: dict(DEFAULT_TOLERANCES))
    #: ``fleet``, ``hosts`` or ``both``.
    scope: str = "both"

    def for_metric(self, name: str) -> Tolerance:
        return self.per_metric.get(name.rsplit("/", 1)[-1], Tolerance())

    def to_dict(self) -> dict[str, Any]:
        return {"tolerances": {k: {"rel": v.rel, "abs": v.abs}
                               for k, v in sorted(self.per_metric.items())},
                "scope": self.scope}


def load_tolerances(path: str | Path) -> Tolerances:
    """Defaults overridden by a YAML file (see the module docstring)."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ToleranceError(f"{p}: unreadable ({exc})") from exc
    if not isinstance(data, Mapping):
        raise ToleranceError(f"{p}: expected a mapping with 'tolerances' and/or 'scope'")
    unknown = set(data) - {"tolerances", "scope"}
    if unknown:
        raise ToleranceError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}")
    per = dict(DEFAULT_TOLERANCES)
    for name, spec in (data.get("tolerances") or {}).items():
        if name not in DIRECTIONS:
            raise ToleranceError(f"{p}: unknown metric {name!r}; known: "
                                 f"{', '.join(sorted(DIRECTIONS))}")
        if not isinstance(spec, Mapping) or set(spec) - {"rel", "abs"}:
            raise ToleranceError(f"{p}: {name} must be a mapping with 'rel' and/or 'abs'")
        values: dict[str, float] = {}
        for k, v in spec.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ToleranceError(f"{p}: {name}.{k} must be a number >= 0, got {v!r}")
            values[k] = float(v)
        per[name] = replace(per.get(name, Tolerance()), **values)
    scope = data.get("scope", "both")
    if scope not in ("fleet", "hosts", "both"):
        raise ToleranceError(f"{p}: scope must be fleet, hosts or both, got {scope!r}")
    return Tolerances(per_metric=per, scope=str(scope))


@dataclass(frozen=True)
class MetricComparison:
    scope: str
    name: str
    current: float | None
    reference: float | None
    allowed: float | None
    #: ``ok``, ``regression``, ``improvement`` or ``missing`` (in one run only).
    status: str

    @property
    def label(self) -> str:
        return f"{self.scope}:{self.name}"

    @property
    def delta(self) -> float | None:
        if self.current is None or self.reference is None:
            return None
        return self.current - self.reference

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "name": self.name, "current": self.current,
                "reference": self.reference, "delta": self.delta, "allowed": self.allowed,
                "status": self.status}


@dataclass(frozen=True)
class Comparison:
    run_id: str
    reference_run_id: str
    tolerances: Tolerances
    items: tuple[MetricComparison, ...]

    @property
    def regressions(self) -> list[MetricComparison]:
        return [i for i in self.items if i.status == "regression"]

    @property
    def missing(self) -> list[MetricComparison]:
        return [i for i in self.items if i.status == "missing"]

    @property
    def ok(self) -> bool:
        return not self.regressions

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "run_id": self.run_id,
                "reference_run_id": self.reference_run_id,
                "tolerances": self.tolerances.to_dict(),
                "regressions": [i.label for i in self.regressions],
                "items": [i.to_dict() for i in self.items]}


def _judge(name: str, cur: float, ref: float, tol: Tolerance) -> tuple[str, float]:
    allowed = tol.allowed(ref)
    direction = DIRECTIONS.get(name.rsplit("/", 1)[-1], "both")
    worse = {"lower": cur - ref, "higher": ref - cur, "both": abs(cur - ref)}[direction]
    if worse > allowed + 1e-12:
        return "regression", allowed
    if direction != "both" and -worse > allowed:
        return "improvement", allowed
    return "ok", allowed


def _values(s: Summary) -> dict[str, dict[str, float]]:
    """scope -> metric -> value; scope ``fleet`` is the median over hosts."""
    per_metric = fleet_values(s.hosts)
    out: dict[str, dict[str, float]] = {"fleet": {}}
    for name, by_host in per_metric.items():
        if name.rsplit("/", 1)[-1] not in DIRECTIONS:
            continue
        out["fleet"][name] = median(list(by_host.values()))
        for host, v in by_host.items():
            out.setdefault(host, {})[name] = v
    return out


def compare_summaries(current: Summary, reference: Summary,
                      tolerances: Tolerances | None = None) -> Comparison:
    tol = tolerances or Tolerances()
    cur, ref = _values(current), _values(reference)
    scopes = []
    if tol.scope in ("fleet", "both"):
        scopes.append("fleet")
    if tol.scope in ("hosts", "both"):
        scopes += sorted((set(cur) & set(ref)) - {"fleet"})
    items: list[MetricComparison] = []
    for scope in scopes:
        c, r = cur.get(scope, {}), ref.get(scope, {})
        for name in sorted(set(c) | set(r)):
            cv, rv = c.get(name), r.get(name)
            if cv is None or rv is None or not (math.isfinite(cv) and math.isfinite(rv)):
                items.append(MetricComparison(scope, name, cv, rv, None, "missing"))
                continue
            status, allowed = _judge(name, cv, rv, tol.for_metric(name))
            items.append(MetricComparison(scope, name, cv, rv, allowed, status))
    return Comparison(run_id=current.run_id, reference_run_id=reference.run_id,
                      tolerances=tol, items=tuple(items))


def compare(run_dir: str | Path, reference_dir: str | Path,
            tolerances: Tolerances | None = None) -> Comparison:
    """Compare the run in ``run_dir`` against the one in ``reference_dir``."""
    return compare_summaries(build_summary(run_dir), build_summary(reference_dir), tolerances)
