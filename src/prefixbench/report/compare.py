"""Compare a run against a reference run, metric by metric, with tolerances: a CI gate.

Metrics (per host present in both runs, and for the fleet = the median over hosts):

* ``<configuration>/<workload>/median_ttft_ms`` - lower is better
* ``<configuration>/<workload>/output_throughput`` - higher is better
* ``<workload>/ttft_reduction_pct`` - higher is better (step 7's reduction)
* ``cached/<workload>/hit_ratio`` - two-sided: a hit ratio that moved either way means
  the cache behaves differently (more hits than before is carry-over, not a gain)

Like figures only: both runs are read with the report's record checks
(:func:`prefixbench.report.load.load_run`: a result edited after it was written, or
without a checksum, is rejected and named), and every figure is taken over the benches
(host, configuration, workload, repetition) that have a result in BOTH runs. A bench with
a result in one run only is missing data (:class:`Gap`), never a regression: a host whose
cached results are gone leaves the fleet's medians to the hosts both runs measured.

The tolerances (:mod:`prefixbench.report.tolerances`) say how much worse is a regression.
Nothing here predicts or bootstraps: compare computes only the figures it compares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.bench import criteria
from prefixbench.measure.records import ResultKey
from prefixbench.measure.stats import median
from prefixbench.report.aggregate import HostView, bench_summary, step7_of
from prefixbench.report.bench_model import agg_median
from prefixbench.report.load import RunData, failure_info, load_run
from prefixbench.report.records import RecordView, record_view
from prefixbench.report.tolerances import (
    DEFAULT_TOLERANCES,
    DIRECTIONS,
    Tolerance,
    ToleranceError,
    Tolerances,
    load_tolerances,
)
from prefixbench.report.vocab import CACHED

__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "Gap",
    "MetricComparison",
    "Tolerance",
    "ToleranceError",
    "Tolerances",
    "compare",
    "compare_runs",
    "load_tolerances",
]

#: The two runs, as lines name them.
RUN: Final = "this run"
REFERENCE: Final = "the reference"


@dataclass(frozen=True)
class Gap:
    """A bench (host, configuration, workload, repetition) without a usable result in at
    least one of the two runs: missing data, left out of every figure compared."""

    key: ResultKey
    #: Why each run lacks it (``None``: that run has the result).
    run_reason: str | None
    reference_reason: str | None

    @property
    def label(self) -> str:
        k = self.key
        return f"{k.host} {k.configuration}/{k.workload} rep{k.repetition}"

    @property
    def rejected(self) -> bool:
        """A result file is there but the record checks refused it (edited, no checksum)."""
        return any(r is not None and "result rejected" in r
                   for r in (self.run_reason, self.reference_reason))

    def line(self) -> str:
        if self.run_reason is None:
            where = f"in this run only; {REFERENCE}: {self.reference_reason}"
        elif self.reference_reason is None:
            where = f"in {REFERENCE} only; {RUN}: {self.run_reason}"
        else:
            where = (f"in neither run; {RUN}: {self.run_reason}; "
                     f"{REFERENCE}: {self.reference_reason}")
        return f"MISSING DATA: {self.label}: {where}"

    def to_dict(self) -> dict[str, Any]:
        k = self.key
        return {"host": k.host, "configuration": k.configuration, "workload": k.workload,
                "repetition": k.repetition, "run": self.run_reason,
                "reference": self.reference_reason}


@dataclass(frozen=True)
class MetricComparison:
    scope: str
    name: str
    current: float | None
    reference: float | None
    allowed: float | None
    #: ``ok``, ``regression``, ``improvement`` or ``missing`` (in one run only).
    status: str
    #: Why the status, in words (what was compared, and the rule).
    why: str = ""

    @property
    def label(self) -> str:
        return f"{self.scope}:{self.name}"

    @property
    def delta(self) -> float | None:
        if self.current is None or self.reference is None:
            return None
        return self.current - self.reference

    def line(self) -> str:
        cur = "n/a" if self.current is None else f"{self.current:.4g}"
        ref = "n/a" if self.reference is None else f"{self.reference:.4g}"
        return f"{self.status.upper()}: {self.label}: {ref} -> {cur}: {self.why}"

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "name": self.name, "current": self.current,
                "reference": self.reference, "delta": self.delta, "allowed": self.allowed,
                "status": self.status, "why": self.why}


@dataclass(frozen=True)
class Comparison:
    run_id: str
    reference_run_id: str
    tolerances: Tolerances
    items: tuple[MetricComparison, ...]
    gaps: tuple[Gap, ...] = ()

    @property
    def regressions(self) -> list[MetricComparison]:
        return [i for i in self.items if i.status == "regression"]

    @property
    def missing(self) -> list[MetricComparison]:
        return [i for i in self.items if i.status == "missing"]

    @property
    def rejected(self) -> list[Gap]:
        return [g for g in self.gaps if g.rejected]

    @property
    def complete(self) -> bool:
        """Every bench has a result in both runs and every metric a value in both."""
        return not self.gaps and not self.missing

    @property
    def ok(self) -> bool:
        return not self.regressions

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "run_id": self.run_id,
                "reference_run_id": self.reference_run_id,
                "tolerances": self.tolerances.to_dict(),
                "regressions": [i.label for i in self.regressions],
                "missing": [i.label for i in self.missing],
                "missing_data": [g.to_dict() for g in self.gaps],
                "items": [i.to_dict() for i in self.items]}


def _judge(name: str, cur: float, ref: float, tol: Tolerance) -> tuple[str, float, str]:
    allowed = tol.allowed(ref)
    direction = DIRECTIONS.get(name.rsplit("/", 1)[-1], "both")
    worse = {"lower": cur - ref, "higher": ref - cur, "both": abs(cur - ref)}[direction]
    rule = f"allowed {allowed:.4g} = {tol.text(ref)}"
    better = {"lower": "lower is better", "higher": "higher is better",
              "both": "either way counts"}[direction]
    if worse > allowed + 1e-12:
        moved = "moved" if direction == "both" else "worse"
        return "regression", allowed, f"{moved} by {worse:.4g} > {rule} ({better})"
    if direction != "both" and -worse > allowed:
        return "improvement", allowed, f"better by {-worse:.4g} > {rule} ({better})"
    return "ok", allowed, f"within {rule} ({better})"


# -- one run's figures over the benches both runs have ------------------------------------

def _reasons(data: RunData) -> dict[ResultKey, str]:
    """Why a bench has no usable result in ``data``: its failure marker, or the record
    check that rejected its result file (named with its path)."""
    out: dict[ResultKey, str] = {}
    infos = [failure_info(f, p, data.run_dir) for f, p in data.failures] + data.rejected
    for f in infos:
        key = ResultKey(f.host, f.configuration, f.workload, f.repetition)
        out[key] = f"{f.error} [{f.path}]"
    return out


def _views(data: RunData) -> dict[ResultKey, RecordView]:
    known = data.workloads()
    return {r.key: record_view(r, known) for r in data.records}


def _metrics(data: RunData, views: Iterable[RecordView]) -> dict[str, dict[str, float]]:
    """host -> metric -> value (its median over the given repetitions), the figures of
    :func:`prefixbench.report.fleet.fleet_values` that compare judges."""
    grouped: dict[str, dict[tuple[str, str], list[RecordView]]] = {}
    for v in views:
        k = v.record.key
        grouped.setdefault(k.host, {}).setdefault((k.configuration, k.workload), []).append(v)
    roles = dict(criteria.assign(list(data.workloads().values())).serving)
    out: dict[str, dict[str, float]] = {}
    for host, by_bench in grouped.items():
        values = out.setdefault(host, {})

        def put(name: str, value: float | None, values: dict[str, float] = values) -> None:
            if value is not None and math.isfinite(value):
                values[name] = value

        benches = {key: bench_summary(vs) for key, vs in by_bench.items()}
        for b in benches.values():
            prefix = f"{b.configuration}/{b.workload}"
            put(f"{prefix}/median_ttft_ms", agg_median(b.median_ttft_ms))
            put(f"{prefix}/output_throughput", agg_median(b.output_throughput))
            if b.configuration == CACHED:
                put(f"{prefix}/hit_ratio", agg_median(b.hit_ratio_by_source)
                    if b.hit_ratio_by_source else agg_median(b.hit_ratio_queries))
        reductions = step7_of(HostView(host, benches, roles)).ttft_reduction_pct
        for wl, pct in reductions.items():
            put(f"{wl}/ttft_reduction_pct", pct)
    return out


def _reps(keys: Iterable[ResultKey]) -> str:
    reps = sorted({k.repetition for k in keys})
    return "rep " + ",".join(str(r) for r in reps) if len(reps) < 2 else \
        f"reps {','.join(str(r) for r in reps)}"


def _gap_reason(data: RunData, reasons: Mapping[ResultKey, str], key: ResultKey) -> str:
    if key in reasons:
        return reasons[key]
    if key.host not in data.hosts:
        return "the host is not in this run"
    if not any(r.key.host == key.host for r in data.records):
        return "no result at all from this host (it dropped out, or its results are gone)"
    return "no result file"


def compare_runs(current: RunData, reference: RunData,
                 tolerances: Tolerances | None = None) -> Comparison:
    """Compare two loaded runs over the benches both have (see the module docstring)."""
    tol = tolerances or Tolerances()
    cv, rv = _views(current), _views(reference)
    c_why, r_why = _reasons(current), _reasons(reference)
    common = set(cv) & set(rv)
    gaps = tuple(Gap(k, None if k in cv else _gap_reason(current, c_why, k),
                     None if k in rv else _gap_reason(reference, r_why, k))
                 for k in sorted(set(cv) | set(rv) | set(c_why) | set(r_why),
                                 key=lambda k: (k.host, k.configuration, k.workload,
                                                k.repetition))
                 if k not in common)
    cur = _metrics(current, (cv[k] for k in common))
    ref = _metrics(reference, (rv[k] for k in common))
    items: list[MetricComparison] = []
    if tol.scope in ("fleet", "both"):
        items += _fleet_items(cur, ref, common, tol)
    if tol.scope in ("hosts", "both"):
        for host in sorted(set(cur) | set(ref)):
            keys = [k for k in common if k.host == host]
            items += _items(host, cur.get(host, {}), ref.get(host, {}), tol,
                            f"{host}'s median over {_reps(keys)}, in both runs")
    return Comparison(run_id=current.run_id, reference_run_id=reference.run_id,
                      tolerances=tol, items=tuple(items), gaps=gaps)


def _items(scope: str, c: Mapping[str, float], r: Mapping[str, float], tol: Tolerances,
           over: str) -> list[MetricComparison]:
    items = []
    for name in sorted(set(c) | set(r)):
        cv, rv = c.get(name), r.get(name)
        if cv is None or rv is None:
            side = RUN if cv is None else REFERENCE
            items.append(MetricComparison(
                scope, name, cv, rv, None, "missing",
                f"no value in {side} (its records lack this figure)"))
            continue
        status, allowed, why = _judge(name, cv, rv, tol.for_metric(name))
        items.append(MetricComparison(scope, name, cv, rv, allowed, status, f"{why}; {over}"))
    return items


def _fleet_items(cur: Mapping[str, Mapping[str, float]], ref: Mapping[str, Mapping[str, float]],
                 common: set[ResultKey], tol: Tolerances) -> list[MetricComparison]:
    """The fleet's median of each metric over the hosts that have it in both runs."""
    names = sorted({n for vs in (*cur.values(), *ref.values()) for n in vs})
    items = []
    for name in names:
        hosts = sorted(h for h in set(cur) & set(ref) if name in cur[h] and name in ref[h])
        if not hosts:
            items.append(MetricComparison("fleet", name, None, None, None, "missing",
                                          "no host has this figure in both runs"))
            continue
        c = median([cur[h][name] for h in hosts])
        r = median([ref[h][name] for h in hosts])
        keys = [k for k in common if k.host in hosts]
        over = (f"median over {len(hosts)} host(s) ({', '.join(hosts)}), {_reps(keys)}, "
                f"the same in both runs")
        status, allowed, why = _judge(name, c, r, tol.for_metric(name))
        items.append(MetricComparison("fleet", name, c, r, allowed, status, f"{why}; {over}"))
    return items


def compare(run_dir: str | Path, reference_dir: str | Path,
            tolerances: Tolerances | None = None, *,
            accept_unchecksummed: bool = False) -> Comparison:
    """Compare the run in ``run_dir`` against the one in ``reference_dir``."""
    return compare_runs(load_run(run_dir, accept_unchecksummed=accept_unchecksummed),
                        load_run(reference_dir, accept_unchecksummed=accept_unchecksummed),
                        tolerances)
