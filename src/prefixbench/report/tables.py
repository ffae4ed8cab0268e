"""The report's tables as plain data (headers and rows of strings), shared by the
Markdown and HTML renderers so both show the same figures."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefixbench.report.bench_model import Agg
from prefixbench.report.doclinks import failure_link, verdict_link
from prefixbench.report.economics import cost_per_million
from prefixbench.report.fleet_model import FleetSummary
from prefixbench.report.model import HostSummary, Summary
from prefixbench.report.vocab import BASELINE, CACHED, HIGH_OVERLAP, NO_OVERLAP

__all__ = [
    "Table",
    "bench_table",
    "coldwarm_table",
    "departures_table",
    "drift_table",
    "failures_table",
    "fleet_table",
    "fmt",
    "groups_table",
    "issues_table",
    "shortfall_lines",
    "step7_lines",
    "step7_table",
    "step8_lines",
    "step8_table",
    "step9_table",
    "time_cost_table",
    "verdict_table",
]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    #: Column indices holding numbers (right-aligned).
    numeric: tuple[int, ...] = ()
    #: Column indices holding a Markdown link (``[page](url)``; HTML renders an anchor).
    links: tuple[int, ...] = ()


def fmt(x: float | None, spec: str = ".1f", suffix: str = "") -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:{spec}}{suffix}"


def _agg(a: Agg | None, spec: str = ".1f") -> str:
    if a is None:
        return "n/a"
    if a.n == 1:
        return fmt(a.median, spec)
    return f"{fmt(a.median, spec)} [{fmt(a.min, spec)}-{fmt(a.max, spec)}]"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f}%"


def step7_table(h: HostSummary) -> Table:
    rows = tuple((r.label, _agg(r.median_ttft_ms), _agg(r.output_throughput, ".2f"))
                 for r in h.step7.rows)
    return Table(("Run", "median_ttft_ms", "output_throughput"), rows, (1, 2))


def step7_lines(h: HostSummary) -> list[str]:
    red, gain = h.step7.ttft_reduction_pct, h.step7.throughput_gain
    return [
        f"High-overlap TTFT reduction: {fmt(red.get(HIGH_OVERLAP), '+.1f', '%')}",
        f"High-overlap throughput gain: {fmt(gain.get(HIGH_OVERLAP), '.2f', 'x')}",
        f"No-overlap TTFT reduction: {fmt(red.get(NO_OVERLAP), '+.1f', '%')}",
        f"No-overlap throughput gain: {fmt(gain.get(NO_OVERLAP), '.2f', 'x')}",
    ]


def step8_table(h: HostSummary) -> Table:
    c1, c4 = h.step8()
    rows = []
    for label in ("median_ttft_ms", "p99_ttft_ms", "output_throughput"):
        cells = [_agg(getattr(b, label)) if b is not None else "n/a" for b in (c1, c4)]
        rows.append((label, *cells))
    return Table(("Metric", "concurrency=1", "concurrency=4"), tuple(rows), (1, 2))


def step8_lines(h: HostSummary) -> list[str]:
    """What explains the tail: is the p99 set by cold requests?"""
    out = []
    for b in h.step8():
        if b is None or b.cold_warm is None:
            continue
        cw = b.cold_warm
        what = "TTFT" if cw.source == "ttfts" else "latency (per-request TTFT not saved)"
        line = (f"{b.workload} (c={b.max_concurrency}): per-request {what} p99 "
                f"{fmt(cw.p99_all_ms)} ms all, {fmt(cw.p99_warm_ms)} ms warm only; "
                f"median cold {fmt(cw.median_cold_ms)} ms vs warm {fmt(cw.median_warm_ms)} ms")
        if cw.slowest_is_cold:
            line += ("; the slowest request is a cold one (first use of a prefix): the tail "
                     "is the cold start, not a regression")
        out.append(line)
    return out


def step9_table(h: HostSummary) -> Table:
    """Step 9; the what-if columns only when a row has a what-if replay (a custom
    workload's prompts file, :func:`prefixbench.report.records.record_prediction`),
    each with the note that says what it replayed."""
    replayed = any(r.predicted is not None or r.prediction_note for r in h.step9)
    rows = []
    for r in h.step9:
        row: tuple[str, ...] = (
            f"{r.configuration} / {r.workload}", _pct(r.hit_ratio_queries),
            _pct(r.hit_ratio_by_source), _pct(r.expected_served),
            _pct(r.expected_block_aligned), _pct(r.expected_tutorial),
            fmt(r.diff_pp(r.hit_ratio_by_source), "+.2f", " pp"))
        if replayed:
            row += (_pct(r.predicted), fmt(r.predicted_diff_pp, "+.2f", " pp"),
                    r.prediction_note or "")
        rows.append(row)
    head = ("Run", "hits/queries", "cache_hit/(hit+compute)", "expected (served tokens)",
            "expected (block-aligned)", "expected (tutorial formula)", "by_source - expected")
    if not replayed:
        return Table(head, tuple(rows), (1, 2, 3, 4, 5, 6))
    return Table((*head, "what-if replay (custom prompts)", "measured - what-if",
                  "what the what-if replayed"), tuple(rows), (1, 2, 3, 4, 5, 6, 7, 8))


def shortfall_lines(h: HostSummary) -> list[str]:
    """One line per cached workload whose hit ratio differs from the formula: each cause
    and its points (prefixbench.report.shortfall)."""
    out = []
    for r in h.step9:
        causes = h.shortfalls.get(r.workload) if r.configuration == CACHED else None
        if not causes:
            continue
        start = r.expected_tutorial if r.expected_tutorial is not None \
            else r.expected_block_aligned
        head = (f"{r.workload}: formula {_pct(r.expected_tutorial)}, measured "
                f"{_pct(r.hit_ratio_queries)}")
        if start is not None and r.hit_ratio_queries is not None:
            head += f" ({(r.hit_ratio_queries - start) * 100:+.2f} pp, the causes' sum)"
        out.append(head + "; " + "; ".join(f"{c.points:+.2f} pp {c.code.replace('_', ' ')}: "
                                           f"{c.text}" for c in causes))
    return out


def verdict_table(h: HostSummary, docs: str = "docs/") -> Table:
    """The host's verdicts, each with the docs section that explains it (``docs``: the
    docs' base, prefixbench.report.doclinks)."""
    rows = tuple((v.status, v.criterion, v.detail, v.threshold, verdict_link(docs, v.name))
                 for v in h.verdicts)
    return Table(("Verdict", "Criterion (tutorial)", "Numbers", "Threshold", "Explained in"),
                 rows, links=(4,))


def issues_table(h: HostSummary) -> Table:
    rows = tuple((i.title, i.evidence, i.fix, i.source) for i in h.issues)
    return Table(("Issue", "Evidence", "Fix", "Source"), rows)


def coldwarm_table(h: HostSummary) -> Table:
    rows = []
    for b in h.benches:
        cw = b.cold_warm
        if cw is None:
            rows.append((f"{b.configuration} / {b.workload}", "n/a", "", "", "", "", "",
                         "; ".join(b.notes) or "no per-request detail"))
            continue
        rows.append((f"{b.configuration} / {b.workload}", cw.source,
                     f"{len(cw.cold_ms)} / {len(cw.warm_ms)}", fmt(cw.median_cold_ms),
                     fmt(cw.median_warm_ms), fmt(cw.p99_all_ms), fmt(cw.p99_warm_ms),
                     "slowest request is cold" if cw.slowest_is_cold else ""))
    return Table(("Run", "per-request", "cold / warm", "median cold ms", "median warm ms",
                  "p99 all ms", "p99 warm ms", "note"), tuple(rows), (3, 4, 5, 6))


def bench_table(h: HostSummary) -> Table:
    rows = []
    for b in h.benches:
        rows.append((f"{b.configuration} / {b.workload}", str(len(b.repetitions)),
                     _agg(b.median_ttft_ms), _agg(b.p99_ttft_ms),
                     _agg(b.output_throughput), f"{b.completed}/{b.completed + b.failed}",
                     fmt(b.preemptions, ".0f"), fmt(b.evictions_sampled, ".0f")))
    # No KV-usage column: vllm:kv_cache_usage_perc is a gauge, and the snapshots are
    # taken when the server is idle (before and after a bench), where it reads 0%.
    return Table(("Run", "reps", "median TTFT ms [min-max]", "p99 TTFT ms [min-max]",
                  "output tok/s [min-max]", "completed", "preemptions",
                  "block evictions (sampled)"), tuple(rows), (1, 2, 3, 4, 6, 7))


def fleet_table(f: FleetSummary) -> Table:
    rows = []
    for m in f.metrics:
        outs = "; ".join(f"{o.host}: {', '.join(o.reasons)}" for o in m.outliers)
        spec = ".4f" if m.name.endswith("hit_ratio") else ".1f"
        rows.append((m.name, str(len(m.values)), fmt(m.median, spec),
                     fmt(m.cv * 100 if m.cv is not None else None, ".1f", "%"),
                     fmt(m.mad, spec), outs or "-"))
    return Table(("Metric", "hosts", "median", "CV", "MAD", "outliers"), tuple(rows),
                 (1, 2, 3, 4))


def groups_table(f: FleetSummary) -> Table:
    """Each group of identical fingerprints, with its cohort; a group is ``drift`` when
    its hosts differ from their cohort's majority."""
    cohort = {h: c.label for c in f.cohorts for h in c.hosts}
    drifting = {d.host for d in f.drift}
    rows = tuple((str(i + 1), ", ".join(g.hosts), cohort.get(g.hosts[0]) or "the fleet",
                  "drift" if drifting & set(g.hosts) else "reference")
                 for i, g in enumerate(f.fingerprint_groups))
    return Table(("Group", "Hosts", "Cohort", "Role"), rows)


def drift_table(f: FleetSummary) -> Table:
    rows = tuple((d.host, d.cohort or "the fleet", d.field, str(d.value),
                  str(d.majority_value)) for d in f.drift)
    return Table(("Host", "Cohort", "Field", "Value", "Cohort's majority value"), rows)


def departures_table(f: FleetSummary) -> Table:
    rows = tuple((d.host, f"{d.configuration} / {d.workload}", d.signal, _pct(d.measured),
                  _pct(d.expected) if d.band is None else
                  f"{_pct(d.expected)} ({_pct(d.band[0])} to {_pct(d.band[1])} by arrival "
                  f"timing)", f"{d.diff_pp:+.2f} pp") for d in f.hit_departures)
    return Table(("Host", "Run", "Signal", "Measured", "Expected", "Difference"), rows)


def failures_table(s: Summary, docs: str = "docs/") -> Table:
    """Every bench without a result, each with the docs section on what to do."""
    rows = tuple((f.host, f"{f.configuration} / {f.workload} rep{f.repetition}", f.error,
                  "" if f.returncode is None else str(f.returncode), f.path,
                  failure_link(docs, f.error))
                 for f in s.failures)
    return Table(("Host", "Benchmark", "Reason", "rc", "File", "What to do"), rows,
                 links=(5,))


def time_cost_table(s: Summary) -> Table:
    """Per host: bench wall, server start-ups, instance-hours, cost, the time its servers
    sat healthy before their first bench (and its cost), and the cost of a million output
    tokens of the high-overlap workload on each server."""
    rows = []
    for h in s.hosts:
        t = h.time
        if t is None:
            continue
        kind = h.fingerprint.instance_type if h.fingerprint else None
        per_m = []
        for conf in (BASELINE, CACHED):
            b = h.role(conf, HIGH_OVERLAP)
            tput = b.output_throughput.median if b and b.output_throughput else None
            per_m.append(fmt(cost_per_million(t.price_per_hour, tput), ".2f"))
        startups = ", ".join(
            f"{c} {v:.0f} s" + (f" ({t.graphs[c]})" if c in t.graphs else "")
            for c, v in sorted(t.startup_s.items()))
        idle = fmt(t.idle_total_s, ".0f", " s")
        if t.idle_cost is not None:
            idle += f" ({t.idle_cost:.2f})"
        rows.append((h.host, kind or "?", fmt(t.bench_wall_s, ".0f", " s"), startups or "n/a",
                     fmt(t.instance_hours, ".3f"), fmt(t.price_per_hour, ".2f"),
                     fmt(t.cost, ".2f"), idle, *per_m))
    return Table(("Host", "Instance type", "Bench wall", "Server start-ups (compile)",
                  "Instance-hours", "Price / hour", "Cost",
                  "Idle for other hosts: compile leader + healthy before first bench (cost)",
                  "Per M output tokens, baseline", "Per M output tokens, cached"),
                 tuple(rows), (2, 4, 5, 6, 7, 8, 9))
