"""Benefit at a latency target: the goodput ladder's rungs read back into one answer.

For each goodput workload and configuration the ladder (:mod:`prefixbench.bench.goodput`)
ran one bench per request rate. A rung *meets* the target when the configured TTFT
percentile of its requests (pooled over repetitions) is at most the target and no
request failed. A configuration's **goodput rate** is the highest rate of the unbroken run
of met rungs from the lowest rate up (a miss below a met rung is noise or a ladder too
coarse, and is not jumped over). The **uplift** is cached / baseline goodput rate.

Two checks state what the tutorial's logic implies:

* ``no_overlap_no_uplift``: caching has nothing to reuse on the no-overlap workload, so
  its cached goodput rate must not be above the baseline's: PASS when it is not,
  INCONCLUSIVE one rung above (the ladder's resolution), FAIL further up.
* the **break-even hit ratio**, from a linear model stated so it can be judged, fitted to
  the concurrency-1 runs of the same prompt length: a cached request's TTFT falls linearly
  with its hit ratio, ``T(h) = T_cached_no - s x h``, where the slope ``s`` comes from the
  two cached runs (``s = (T_cached_no - T_cached_high) / h_high``) and the cost of
  caching is ``o = T_cached_no - T_base_no`` (the no-overlap workload, where nothing is
  reused). ``T(h)`` is below the baseline's ``T_base_no`` for ``h > o / s``: below that
  hit ratio caching stops paying. Fixed per-request costs (scheduling, HTTP, sampling)
  are not assumed away: only what the two cached runs differ by is attributed to hits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.bench.criteria import HIGH_OVERLAP, NO_OVERLAP
from prefixbench.bench.goodput import Ladder, parse_rung
from prefixbench.measure.stats import percentile
from prefixbench.report.bench_model import BenchSummary, agg_median
from prefixbench.report.vocab import BASELINE, CACHED, FAIL, INCONCLUSIVE, PASS, Status

__all__ = ["BreakEven", "GoodputHost", "GoodputRow", "Rung", "goodput_of", "goodput_rate",
           "ladder_of_run"]

CONFIGURATIONS: Final = (BASELINE, CACHED)


@dataclass(frozen=True)
class Rung:
    """One rate of one configuration: the TTFT percentile and whether it met the target."""

    rate: float
    configuration: str
    ttft_ms: float | None
    completed: int
    failed: int
    met: bool | None
    hit_ratio: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"rate": self.rate, "configuration": self.configuration,
                "ttft_ms": self.ttft_ms, "completed": self.completed, "failed": self.failed,
                "met": self.met, "hit_ratio": self.hit_ratio}


def rung_of(rate: float, b: BenchSummary, ladder: Ladder) -> Rung:
    values = [v for v in b.per_request_ms if v == v]  # noqa: PLR0124 - drops NaN
    ttft = percentile(values, ladder.percentile) if values else None
    met = None if ttft is None else (b.failed == 0 and ttft <= ladder.ttft_ms)
    return Rung(rate=rate, configuration=b.configuration, ttft_ms=ttft, completed=b.completed,
                failed=b.failed, met=met, hit_ratio=agg_median(b.hit_ratio_queries))


def goodput_rate(rungs: Sequence[Rung], rates: Sequence[float]) -> tuple[float | None, int]:
    """The highest of ``rates`` in the unbroken run of met rungs from the lowest, and its
    index (-1: the lowest rate already misses, or was not measured). A rate without a
    result ends the run like a miss."""
    by_rate = {r.rate: r for r in rungs}
    best, index = None, -1
    for i, rate in enumerate(sorted(rates)):
        r = by_rate.get(rate)
        if r is None or not r.met:
            break
        best, index = rate, i
    return best, index


@dataclass(frozen=True)
class GoodputRow:
    """One goodput workload on one host: both configurations' ladders and the uplift."""

    workload: str
    role: str | None
    rungs: tuple[Rung, ...]
    baseline_rate: float | None
    cached_rate: float | None
    #: How many rungs of the ladder each configuration met (for the no-uplift check).
    baseline_index: int
    cached_index: int
    rates: tuple[float, ...]

    @property
    def uplift(self) -> float | None:
        if self.baseline_rate is None or self.cached_rate is None:
            return None
        return self.cached_rate / self.baseline_rate

    @property
    def hit_ratio(self) -> float | None:
        ratios = [r.hit_ratio for r in self.rungs
                  if r.configuration == CACHED and r.hit_ratio is not None]
        return sorted(ratios)[len(ratios) // 2] if ratios else None

    def line(self, ladder: Ladder) -> str:
        target = f"p{ladder.percentile:g} TTFT <= {ladder.ttft_ms:g} ms"

        def said(rate: float | None) -> str:
            return f"{rate:g} req/s" if rate is not None else \
                f"none of the rates (from {self.rates[0]:g} req/s)"

        up = (f"uplift {self.uplift:.2f}x" if self.uplift is not None else
              "uplift: more than the ladder measures" if self.cached_rate is not None
              else "no uplift to state")
        return (f"{self.workload}: highest rate within {target}: baseline "
                f"{said(self.baseline_rate)}, cached {said(self.cached_rate)}; {up}")

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "role": self.role,
                "baseline_rate": self.baseline_rate, "cached_rate": self.cached_rate,
                "uplift": self.uplift, "hit_ratio": self.hit_ratio,
                "rungs": [r.to_dict() for r in self.rungs]}


@dataclass(frozen=True)
class BreakEven:
    """The hit ratio below which caching stops paying, from the concurrency-1 runs."""

    #: Cached minus baseline median TTFT on the no-overlap workload (ms).
    overhead_ms: float
    baseline_ms: float
    #: Median TTFT saved per unit of hit ratio (ms), from the two cached runs; ``None``
    #: when the high-overlap run is missing or hit nothing.
    saving_ms: float | None
    #: The break-even hit ratio; ``None`` when the runs show no saving to set against it.
    hit_ratio: float | None
    high_hit_ratio: float | None = None

    def line(self) -> str:
        cost = (f"its cost per request {self.overhead_ms:+.1f} ms on the no-overlap "
                f"workload's {self.baseline_ms:.1f} ms baseline median TTFT")
        if self.hit_ratio is None or self.saving_ms is None:
            return (f"break-even hit ratio: not estimated ({cost}; the high-overlap runs "
                    f"show no TTFT saved per hit)")
        return (f"caching stops paying below a hit ratio of {self.hit_ratio:.1%} ({cost}; "
                f"each 10 points of hit ratio save {self.saving_ms / 10:.1f} ms, from the "
                f"cached runs at 0% and {self.high_hit_ratio or 0:.1%} hits)")

    def to_dict(self) -> dict[str, Any]:
        return {"overhead_ms": self.overhead_ms, "baseline_ms": self.baseline_ms,
                "saving_ms": self.saving_ms, "hit_ratio": self.hit_ratio,
                "high_hit_ratio": self.high_hit_ratio}


@dataclass(frozen=True)
class GoodputHost:
    """One host's goodput answer."""

    ladder: Ladder
    rows: tuple[GoodputRow, ...]
    break_even: BreakEven | None
    no_uplift_status: Status | None
    no_uplift_detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"ladder": self.ladder.to_dict(), "rows": [r.to_dict() for r in self.rows],
                "break_even": None if self.break_even is None else self.break_even.to_dict(),
                "no_overlap_no_uplift": {"status": self.no_uplift_status,
                                         "detail": self.no_uplift_detail}}


def ladder_of_run(run: Mapping[str, Any]) -> Ladder | None:
    """The ladder ``run.json`` records (``None``: the run had none)."""
    data = run.get("goodput")
    if not isinstance(data, Mapping):
        return None
    try:
        return Ladder.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None


def _break_even(benches: Sequence[BenchSummary], roles: Mapping[str, str]
                ) -> BreakEven | None:
    def med(configuration: str, role: str) -> float | None:
        name = roles.get(role)
        b = next((b for b in benches if b.workload == name
                  and b.configuration == configuration), None)
        return None if b is None else agg_median(b.median_ttft_ms)

    base_no, cached_no = med(BASELINE, NO_OVERLAP), med(CACHED, NO_OVERLAP)
    if base_no is None or cached_no is None or base_no <= 0:
        return None
    overhead = cached_no - base_no
    cached_high = med(CACHED, HIGH_OVERLAP)
    high = next((b for b in benches if b.workload == roles.get(HIGH_OVERLAP)
                 and b.configuration == CACHED), None)
    h = agg_median(high.hit_ratio_queries) if high is not None else None
    saving = ((cached_no - cached_high) / h
              if cached_high is not None and h is not None and h > 0 else None)
    h_star = (min(1.0, max(0.0, overhead / saving))
              if saving is not None and saving > 0 else None)
    return BreakEven(overhead_ms=overhead, baseline_ms=base_no, saving_ms=saving,
                     hit_ratio=h_star, high_hit_ratio=h)


def _no_uplift(rows: Sequence[GoodputRow]) -> tuple[Status | None, str]:
    row = next((r for r in rows if r.role == NO_OVERLAP), None)
    if row is None:
        return None, "no goodput workload of the no-overlap kind"
    if row.baseline_index < 0 and row.cached_index < 0:
        return INCONCLUSIVE, (f"{row.workload}: neither configuration meets the target at "
                              f"the lowest rate: lower the rates or raise the target")
    above = row.cached_index - row.baseline_index
    if above <= 0:
        return PASS, f"{row.workload}: cached {above:+d} rung(s) against baseline"
    if above == 1:
        return INCONCLUSIVE, (f"{row.workload}: cached one rung above baseline, the ladder's "
                              f"resolution: rerun with repetitions or finer rates")
    return FAIL, (f"{row.workload}: cached {above} rungs above baseline with nothing to "
                  f"reuse: noise (another load on the host) or carry-over hits")


def goodput_of(benches: Sequence[BenchSummary], ladder: Ladder | None,
               roles: Mapping[str, str]) -> GoodputHost | None:
    """One host's goodput answer from its benches (``None``: the run had no ladder);
    ``roles`` maps each criterion to the workload serving it."""
    if ladder is None:
        return None
    workload_roles = {name: role for role, name in roles.items()}
    found: dict[str, list[Rung]] = {}
    for b in benches:
        parsed = parse_rung(b.workload)
        if parsed is None or parsed[0] not in ladder.workloads \
                or b.configuration not in CONFIGURATIONS:
            continue
        found.setdefault(parsed[0], []).append(rung_of(parsed[1], b, ladder))
    rows = []
    for name in ladder.workloads:
        rungs = sorted(found.get(name, []), key=lambda r: (r.configuration, r.rate))
        base_rate, base_i = goodput_rate([r for r in rungs if r.configuration == BASELINE],
                                         ladder.rates)
        cached_rate, cached_i = goodput_rate([r for r in rungs if r.configuration == CACHED],
                                             ladder.rates)
        rows.append(GoodputRow(workload=name, role=workload_roles.get(name), rungs=tuple(rungs),
                               baseline_rate=base_rate, cached_rate=cached_rate,
                               baseline_index=base_i, cached_index=cached_i,
                               rates=ladder.rates))
    status, detail = _no_uplift(rows)
    return GoodputHost(ladder=ladder, rows=tuple(rows), break_even=_break_even(benches, roles),
                       no_uplift_status=status, no_uplift_detail=detail)


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def goodput_table_rows(g: GoodputHost) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The goodput table's header and rows: one per workload and rate, both servers."""
    p = f"p{g.ladder.percentile:g}"
    header: tuple[str, ...] = (
        "Workload", "Rate (req/s)", f"Baseline {p} TTFT (ms)", f"Cached {p} TTFT (ms)",
        "Hit ratio (cached)", f"Within {g.ladder.ttft_ms:g} ms")
    rows: list[tuple[str, ...]] = []
    for row in g.rows:
        by = {(r.configuration, r.rate): r for r in row.rungs}
        for rate in g.ladder.rates:
            b, c = by.get((BASELINE, rate)), by.get((CACHED, rate))

            def met(r: Rung | None) -> str:
                return "n/a" if r is None or r.met is None else ("yes" if r.met else "no")

            rows.append((row.workload, f"{rate:g}", _ms(b.ttft_ms if b else None),
                         _ms(c.ttft_ms if c else None),
                         "n/a" if c is None or c.hit_ratio is None else f"{c.hit_ratio:.1%}",
                         f"baseline {met(b)}, cached {met(c)}"))
    return header, rows


def goodput_lines(g: GoodputHost) -> list[str]:
    """The answer in sentences: per workload, then the break-even hit ratio and the
    no-uplift check."""
    out = [row.line(g.ladder) for row in g.rows]
    if g.break_even is not None:
        out.append(g.break_even.line())
    if g.no_uplift_status is not None:
        out.append(f"no_overlap_no_uplift: {g.no_uplift_status}: {g.no_uplift_detail}")
    return out
