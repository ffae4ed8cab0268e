"""The report of a segment-size sweep: every point reported as a run, then compared.

A sweep run holds one run directory per point (``<run>/sweep/seg<size>/``, see
:mod:`prefixbench.servers.sweep`). Each point gets the plain report (tables, verdicts, fleet
checks) in its own directory; the run's own report puts the points side by side: per
segment size, host and workload, the median TTFT of both servers, the reduction the
cache brings and the measured hit ratio, and names the best segment size.

The best segment size is the one whose *cached* server has the lowest median TTFT on the
reference workload (``high_overlap`` when the run has it, otherwise the workload with the
highest measured hit ratio), taking the median over hosts: that is the server one would
deploy. Ties go to the larger TTFT reduction. Points without a cached result for the
reference workload are not ranked.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import json_safe
from prefixbench.report.bench_model import Agg
from prefixbench.report.build import build_summary
from prefixbench.report.doclinks import docs_base, html_docs_base, verdict_link
from prefixbench.report.document import (
    Block,
    Bullets,
    Heading,
    Para,
    html_of,
    markdown_of,
    with_explanations,
)
from prefixbench.report.load import ReportInputError
from prefixbench.report.model import Summary
from prefixbench.report.tables import Table, fmt
from prefixbench.report.vocab import (
    BASELINE,
    CACHED,
    HIGH_OVERLAP,
    INCONCLUSIVE,
    Status,
    overall_status,
)
from prefixbench.report.write import FORMATS, results_csv, write_outputs
from prefixbench.servers.sweep import point_dirs

__all__ = ["SweepBest", "SweepRow", "SweepSummary", "build_sweep", "is_sweep",
           "point_report", "report_sweep", "sweep_blocks"]

SWEEP_SCHEMA_VERSION: Final = 1


def is_sweep(run_dir: str | Path) -> bool:
    """Whether the run directory holds sweep points."""
    return bool(point_dirs(run_dir))


def _segment_size(point_dir: Path) -> int:
    return int(point_dir.name[3:])


def _med(a: Agg | None) -> float | None:
    return None if a is None else a.median


@dataclass(frozen=True)
class SweepRow:
    """One (segment size, host, workload): both servers' TTFT and the cache's effect."""

    segment_size: int
    host: str
    workload: str
    baseline_median_ttft_ms: float | None
    cached_median_ttft_ms: float | None
    hit_ratio: float | None
    #: From the tokens the server sees when the record has it (the bench's prompts
    #: re-encoded and replayed), else the block-aligned formula.
    expected_hit_ratio: float | None
    expected_block_aligned: float | None = None

    @property
    def reduction_pct(self) -> float | None:
        b, c = self.baseline_median_ttft_ms, self.cached_median_ttft_ms
        return (1 - c / b) * 100 if b and c is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"segment_size": self.segment_size, "host": self.host,
                "workload": self.workload,
                "baseline_median_ttft_ms": self.baseline_median_ttft_ms,
                "cached_median_ttft_ms": self.cached_median_ttft_ms,
                "ttft_reduction_pct": self.reduction_pct, "hit_ratio": self.hit_ratio,
                "expected_hit_ratio": self.expected_hit_ratio,
                "expected_block_aligned": self.expected_block_aligned}


@dataclass(frozen=True)
class SweepBest:
    """The segment size the sweep recommends, and on what figures."""

    segment_size: int
    workload: str
    cached_median_ttft_ms: float
    reduction_pct: float | None
    hosts: int
    runner_up: int | None
    runner_up_ttft_ms: float | None

    def line(self) -> str:
        text = (f"best segment size: {self.segment_size} (cached median TTFT "
                f"{self.cached_median_ttft_ms:.1f} ms on {self.workload}, median of "
                f"{self.hosts} host(s)")
        if self.reduction_pct is not None:
            text += f", {self.reduction_pct:.1f}% below its baseline"
        if self.runner_up is not None and self.runner_up_ttft_ms is not None:
            text += f"; next {self.runner_up} at {self.runner_up_ttft_ms:.1f} ms"
        return text + ")"

    def to_dict(self) -> dict[str, Any]:
        return {"segment_size": self.segment_size, "workload": self.workload,
                "cached_median_ttft_ms": self.cached_median_ttft_ms,
                "ttft_reduction_pct": self.reduction_pct, "hosts": self.hosts,
                "runner_up": self.runner_up, "runner_up_ttft_ms": self.runner_up_ttft_ms}


@dataclass(frozen=True)
class SweepPointSummary:
    segment_size: int
    run_dir: Path
    summary: Summary

    @property
    def status(self) -> Status:
        return self.summary.status


@dataclass(frozen=True)
class SweepSummary:
    """Everything the sweep report shows."""

    run_id: str
    run: dict[str, Any]
    generated_at: str
    points: tuple[SweepPointSummary, ...]
    rows: tuple[SweepRow, ...]
    reference_workload: str | None
    best: SweepBest | None

    @property
    def status(self) -> Status:
        return overall_status(p.status for p in self.points)

    @property
    def failed_verdicts(self) -> list[str]:
        return [f"seg{p.segment_size} {h}: {v.name}" for p in self.points
                for h, v in p.summary.failed_verdicts]

    @property
    def inconclusive_verdicts(self) -> list[str]:
        return [f"seg{p.segment_size} {h.host}: {v.name}" for p in self.points
                for h in p.summary.hosts for v in h.verdicts if v.status == INCONCLUSIVE]

    @property
    def failures(self) -> list[str]:
        """The benches of every point without a result (failed, rejected, dropped)."""
        return [f"seg{p.segment_size} {f.host} {f.configuration}/{f.workload} "
                f"rep{f.repetition}: {f.error}" for p in self.points for f in p.summary.failures]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SWEEP_SCHEMA_VERSION, "kind": "sweep",
            "run_id": self.run_id, "run": self.run, "generated_at": self.generated_at,
            "status": self.status, "failures": self.failures,
            "points": [{"segment_size": p.segment_size, "status": p.status,
                        "run_dir": p.run_dir.name,
                        "failed_verdicts": [f"{h}: {v.name}"
                                            for h, v in p.summary.failed_verdicts]}
                       for p in self.points],
            "rows": [r.to_dict() for r in self.rows],
            "reference_workload": self.reference_workload,
            "best": None if self.best is None else self.best.to_dict(),
        }


def _rows(segment_size: int, summary: Summary) -> list[SweepRow]:
    rows = []
    for h in summary.hosts:
        workloads = sorted({b.workload for b in h.benches})
        for wl in workloads:
            base = next((b for b in h.benches
                         if b.configuration == BASELINE and b.workload == wl), None)
            cached = next((b for b in h.benches
                           if b.configuration == CACHED and b.workload == wl), None)
            rows.append(SweepRow(
                segment_size=segment_size, host=h.host, workload=wl,
                baseline_median_ttft_ms=_med(base.median_ttft_ms) if base else None,
                cached_median_ttft_ms=_med(cached.median_ttft_ms) if cached else None,
                hit_ratio=_med(cached.hit_ratio_queries) if cached else None,
                expected_hit_ratio=None if cached is None else (
                    cached.expected_served if cached.expected_served is not None
                    else cached.expected_block_aligned),
                expected_block_aligned=cached.expected_block_aligned if cached else None))
    return rows


def _reference_workload(rows: Sequence[SweepRow], high_overlap: str | None = None
                        ) -> str | None:
    """The workload that ranks the points: the one serving the high-overlap criterion
    (by what it is, prefixbench.bench.criteria), else the one with the highest hit ratio."""
    names = {r.workload for r in rows if r.cached_median_ttft_ms is not None}
    if high_overlap in names:
        return high_overlap
    ranked = sorted(((r.hit_ratio or 0.0, r.workload) for r in rows
                     if r.workload in names), reverse=True)
    return ranked[0][1] if ranked else None


def choose_best(rows: Sequence[SweepRow], workload: str) -> SweepBest | None:
    """The segment size with the lowest cached median TTFT (median over hosts) on
    ``workload``; ties go to the larger TTFT reduction."""
    by_size: dict[int, list[SweepRow]] = {}
    for r in rows:
        if r.workload == workload and r.cached_median_ttft_ms is not None:
            by_size.setdefault(r.segment_size, []).append(r)
    ranked = []
    for size, rs in by_size.items():
        ttft = statistics.median(r.cached_median_ttft_ms for r in rs
                                 if r.cached_median_ttft_ms is not None)
        reductions = [r.reduction_pct for r in rs if r.reduction_pct is not None]
        reduction = statistics.median(reductions) if reductions else None
        ranked.append((ttft, -(reduction if reduction is not None else float("-inf")),
                       size, reduction, len(rs)))
    if not ranked:
        return None
    ranked.sort()
    ttft, _, size, reduction, hosts = ranked[0]
    runner = ranked[1] if len(ranked) > 1 else None
    return SweepBest(segment_size=size, workload=workload, cached_median_ttft_ms=ttft,
                     reduction_pct=reduction, hosts=hosts,
                     runner_up=None if runner is None else runner[2],
                     runner_up_ttft_ms=None if runner is None else runner[0])


def build_sweep(run_dir: str | Path, *, now: datetime | None = None) -> SweepSummary:
    """Summarise every point of a sweep run and compare them."""
    root = Path(run_dir)
    dirs = point_dirs(root)
    if not dirs:
        raise ReportInputError(f"{root}: no sweep points under {root / 'sweep'}")
    run: dict[str, Any] = {}
    meta = RunLayout.of(root).meta_path
    if meta.exists():
        try:
            loaded = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{meta}: unreadable ({exc})") from exc
        run = loaded if isinstance(loaded, dict) else {}
    points = []
    rows: list[SweepRow] = []
    for d in dirs:
        summary = build_summary(d, now=now)
        points.append(SweepPointSummary(segment_size=_segment_size(d), run_dir=d,
                                        summary=summary))
        rows += _rows(_segment_size(d), summary)
    roles = points[0].summary.hosts[0].roles if points and points[0].summary.hosts else {}
    reference = _reference_workload(rows, roles.get(HIGH_OVERLAP))
    return SweepSummary(
        run_id=str(run.get("run_id") or root.name), run=run,
        generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        points=tuple(points), rows=tuple(rows), reference_workload=reference,
        best=None if reference is None else choose_best(rows, reference))


def _pct(x: float | None) -> str:
    return fmt(None if x is None else x * 100, ".2f", "%")


def sweep_table(s: SweepSummary) -> Table:
    rows = tuple(
        (str(r.segment_size), r.host, r.workload, fmt(r.baseline_median_ttft_ms),
         fmt(r.cached_median_ttft_ms), fmt(r.reduction_pct, ".1f", "%"),
         _pct(r.hit_ratio), _pct(r.expected_hit_ratio))
        for r in sorted(s.rows, key=lambda r: (r.workload, r.host, r.segment_size)))
    return Table(("Segment size", "Host", "Workload", "Baseline median TTFT (ms)",
                  "Cached median TTFT (ms)", "TTFT reduction", "Hit ratio (cached)",
                  "Expected hit ratio"), rows, numeric=(0, 3, 4, 5, 6, 7))


def point_report(run_dir: Path, *, link: bool = False) -> str:
    """A point's own report.html, relative to the sweep's run directory (where the
    sweep's report is written): a link when ``link`` (the HTML report), else the path."""
    path = f"sweep/{run_dir.name}/report.html"
    return f"[{path}]({path})" if link else path


def points_table(s: SweepSummary, *, link: bool = False) -> Table:
    rows = tuple(
        (str(p.segment_size), p.status,
         ", ".join(f"{h}: {v.name}" for h, v in p.summary.failed_verdicts) or "none",
         point_report(p.run_dir, link=link))
        for p in s.points)
    return Table(("Segment size", "Verdicts", "Failed verdicts", "Full report"), rows,
                 numeric=(0,), links=(3,) if link else ())


def sweep_blocks(s: SweepSummary, docs: str = "docs/", *, link: bool = False
                 ) -> list[Block]:
    """The sweep's report; ``docs`` is the base of its links to the docs sections that
    explain each point's verdicts (prefixbench.report.doclinks); ``link``: each point's
    report is a relative link (the HTML report), not its path as text."""
    sizes = ", ".join(str(p.segment_size) for p in s.points)
    out: list[Block] = [
        Heading(1, f"Segment-size sweep: {s.run_id}"),
        Para(f"Overall: **{s.status}**. Segment sizes {sizes}; each point is a baseline "
             f"and a cached server with kv_segment_size_buckets = "
             f"num_batched_tokens_buckets = max-num-batched-tokens = the segment size. "
             f"Generated {s.generated_at}."),
        Heading(2, "Best segment size"),
    ]
    if s.best is None:
        out.append(Para("No point has a cached result yet: nothing to rank."))
    else:
        out.append(Para(s.best.line() + ". Ranked by the cached server's median TTFT on "
                        f"`{s.best.workload}` (the server one would deploy), ties by TTFT "
                        "reduction."))
    out += [Heading(2, "TTFT reduction and hit ratio per segment size"), sweep_table(s),
            Heading(2, "Verdicts per point"), points_table(s, link=link)]
    names = dict.fromkeys(v.name for p in s.points for h in p.summary.hosts
                          for v in h.verdicts)
    links = [f"`{n}` {verdict_link(docs, n)}" for n in names if verdict_link(docs, n)]
    if links:
        out.append(Para("How to read each verdict: " + "; ".join(links) + "."))
    failed = s.failed_verdicts
    if failed:
        out += [Heading(3, "Failed verdicts"), Bullets(tuple(failed))]
    return out


def _csv(s: SweepSummary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header_done = False
    for p in s.points:
        reader = csv.reader(io.StringIO(results_csv(p.run_dir)))
        header = next(reader, None)
        if header is None:
            continue
        if not header_done:
            w.writerow(["segment_size", *header])
            header_done = True
        for row in reader:
            w.writerow([str(p.segment_size), *row])
    return buf.getvalue()


def write_sweep(s: SweepSummary, run_dir: str | Path) -> list[Path]:
    """Write the sweep's summary.json, report.md, report.html and results.csv."""
    root = Path(run_dir)
    content = sweep_blocks(s, docs_base(root))
    texts = {
        "json": json.dumps(json_safe(s.to_dict()), indent=2, sort_keys=True,
                           allow_nan=False) + "\n",
        "md": markdown_of(content),
        "html": html_of(with_explanations(sweep_blocks(s, html_docs_base(), link=True)),
                        f"prefixbench sweep {s.run_id}"),
        "csv": _csv(s),
    }
    written = []
    for fmt_name, name in FORMATS.items():
        path = root / name
        write_text_atomic(path, texts[fmt_name])
        written.append(path)
    return written


def report_sweep(run_dir: str | Path) -> tuple[SweepSummary, list[Path]]:
    """Report every point in its own directory, then the sweep in the run directory."""
    s = build_sweep(run_dir)
    written: list[Path] = []
    for p in s.points:
        written += write_outputs(p.summary, p.run_dir, tuple(FORMATS))
    written += write_sweep(s, run_dir)
    return s, written


def sweep_lines(s: SweepSummary) -> list[str]:
    """What the playbook and the CLI print."""
    lines = [f"run {s.run_id}: segment-size sweep, overall {s.status}"]
    for p in s.points:
        for h in p.summary.hosts:
            lines += [f"seg{p.segment_size} {h.host}: {v.status:7} {v.name}: {v.detail}"
                      for v in h.verdicts]
    lines.append(s.best.line() if s.best else "best segment size: none (no cached results)")
    return lines
