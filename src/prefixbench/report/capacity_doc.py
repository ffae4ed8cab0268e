"""The document of a KV-capacity sweep (:mod:`prefixbench.report.capacity`): its table,
the curve per workload, the lines the CLI and the playbook print, and the files written.

``report.html`` is handed over as one file, like a run's: its link to the explanation of
the ``capacity_curve`` verdict points at the section it carries
(:func:`prefixbench.report.document.with_explanations`), unless the docs are published
(:data:`~prefixbench.report.doclinks.DOCS_BASE_ENV`); ``report.md``, read in the
checkout, links the docs folder.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.records import json_safe
from prefixbench.report.capacity import CapacityCurveView, CapacitySummary, build_capacity
from prefixbench.report.capacity_verdict import accepted_text
from prefixbench.report.doclinks import docs_base, html_docs_base, verdict_link
from prefixbench.report.document import (
    Block,
    Bullets,
    Heading,
    Para,
    Plot,
    html_of,
    markdown_of,
    with_explanations,
)
from prefixbench.report.plots import line_plot
from prefixbench.report.sweep import point_report
from prefixbench.report.tables import Table, fmt
from prefixbench.report.vocab import PASS
from prefixbench.report.write import FORMATS, write_outputs

__all__ = ["capacity_blocks_of", "capacity_html", "capacity_lines", "curve_plot",
           "report_capacity", "rows_table"]


def _pct(x: float | None) -> str:
    return fmt(None if x is None else x * 100, ".2f", "%")


def rows_table(s: CapacitySummary) -> Table:
    rows = tuple(
        (r.workload, r.host, str(r.point_blocks), fmt(r.capacity_blocks, ".0f"),
         _pct(r.measured), _pct(r.predicted), fmt(r.diff_pp, "+.2f"),
         fmt(r.evictions, ".0f"),
         accepted_text(r.accepted) if r.accepted is not None else "-", r.status)
        for r in s.rows)
    return Table(("Workload", "Host", "--num-gpu-blocks-override", "Usable blocks",
                  "Measured hit ratio", "Predicted", "Diff (pp)", "Evictions (server)",
                  "Accepted (the verdict's PASS interval)", "Verdict"), rows,
                 numeric=(2, 3, 4, 5, 6, 7))


def curve_plot(s: CapacitySummary, curve: CapacityCurveView) -> str:
    by_host: dict[str, list[tuple[float, float]]] = {}
    for r in s.rows:
        if r.workload == curve.workload and r.capacity_blocks is not None \
                and r.measured is not None:
            by_host.setdefault(r.host, []).append((float(r.capacity_blocks), r.measured))
    vlines = []
    if curve.working_set_blocks:
        vlines.append((float(curve.working_set_blocks), "working set (blocks)"))
    if curve.fits_from is not None and curve.fits_from != curve.working_set_blocks:
        vlines.append((float(curve.fits_from), "full hit ratio from"))
    return line_plot(
        f"Hit ratio against KV capacity: {curve.workload}",
        [("predicted", [(float(x), y) for x, y in curve.points])],
        [(f"measured, {host}", pts) for host, pts in sorted(by_host.items())],
        x_label=f"usable KV blocks (block size {curve.block_size})",
        y_label="hit ratio", vlines=vlines, fraction=True)


def capacity_blocks_of(s: CapacitySummary, docs: str = "docs/", *, link: bool = False
                       ) -> list[Block]:
    """The capacity sweep's report; ``docs`` is the base of its link to the docs;
    ``link``: each point's report is a relative link (the HTML report), not its path."""
    caps = ", ".join(str(p.blocks) for p in s.points)
    out: list[Block] = [
        Heading(1, f"KV-capacity sweep: {s.run_id}"),
        Para(f"Overall: **{s.status}**. Cached server started with "
             f"--num-gpu-blocks-override {caps}; each bench's measured hit ratio is set "
             f"beside the prediction at the capacity its server reported "
             f"(num_gpu_blocks - 1), and passes within {s.max_diff * 100:g} points. "
             f"Generated {s.generated_at}."),
        Heading(2, "Measured against predicted, per capacity"), rows_table(s),
        Para("How to read the verdict `capacity_curve`: "
             + verdict_link(docs, "capacity_curve")),
    ]
    for curve in s.curves:
        out.append(Heading(2, f"Capacity curve: {curve.workload}"))
        if curve.points:
            out.append(Plot(f"capacity curve {curve.workload}", curve_plot(s, curve)))
        fits = (f"working set {curve.working_set_blocks} blocks (the distinct full blocks "
                f"it caches); unbounded hit ratio {_pct(curve.unbounded_ratio)}"
                if curve.working_set_blocks else "working set unknown")
        if curve.fits_from is not None:
            fits += (f", reached from {curve.fits_from} usable blocks (of those drawn: "
                     f"below that, eviction costs hits)")
        out.append(Para(fits + (f". {curve.note}" if curve.note else "")))
    notes = sorted({f"kv{r.point_blocks} {r.host} {r.workload}: {r.detail}"
                    for r in s.rows if r.status != PASS})
    if notes:
        out += [Heading(2, "Points not passed"), Bullets(tuple(notes))]
    out.append(Para("Each point's full report: " + ", ".join(
        point_report(p.run_dir, link=True) if link else f"`{point_report(p.run_dir)}`"
        for p in s.points) + "."))
    return out


def _csv(s: CapacitySummary) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["workload", "host", "point_blocks", "repetition", "capacity_blocks",
                "measured", "predicted", "diff_pp", "evictions", "status", "accepted_lo",
                "accepted_hi", "accepted_width_pp"])
    for r in s.rows:
        lo, hi = r.accepted if r.accepted is not None else (None, None)
        w.writerow([r.workload, r.host, r.point_blocks, r.repetition, r.capacity_blocks,
                    r.measured, r.predicted, r.diff_pp, r.evictions, r.status, lo, hi,
                    r.accepted_width_pp])
    return buf.getvalue()


def capacity_html(s: CapacitySummary) -> str:
    """The HTML report, carrying the docs sections it links to (or linking the published
    docs, :func:`prefixbench.report.doclinks.html_docs_base`)."""
    return html_of(with_explanations(capacity_blocks_of(s, html_docs_base(), link=True)),
                   f"prefixbench capacity sweep {s.run_id}")


def report_capacity(run_dir: str | Path) -> tuple[CapacitySummary, list[Path]]:
    """Report every point in its own directory, then the curve in the run directory."""
    s = build_capacity(run_dir)
    root = Path(run_dir)
    written: list[Path] = []
    for p in s.points:
        written += write_outputs(p.summary, p.run_dir, tuple(FORMATS))
    texts = {"json": json.dumps(json_safe(s.to_dict()), indent=2, sort_keys=True,
                                allow_nan=False) + "\n",
             "md": markdown_of(capacity_blocks_of(s, docs_base(root))),
             "html": capacity_html(s),
             "csv": _csv(s)}
    for fmt_name, name in FORMATS.items():
        path = root / name
        write_text_atomic(path, texts[fmt_name])
        written.append(path)
    return s, written


def capacity_lines(s: CapacitySummary) -> list[str]:
    """What the playbook and the CLI print."""
    lines = [f"run {s.run_id}: KV-capacity sweep, overall {s.status}"]
    lines += [f"kv{r.point_blocks} {r.host} {r.workload} rep{r.repetition}: "
              f"{r.status:12} {r.detail}" for r in s.rows]
    for c in s.curves:
        if c.working_set_blocks:
            lines.append(f"{c.workload}: working set {c.working_set_blocks} blocks, "
                         f"unbounded hit ratio {_pct(c.unbounded_ratio)} from "
                         f"{c.fits_from if c.fits_from is not None else '?'} blocks")
    return lines
