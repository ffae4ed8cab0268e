"""Write a summary's outputs into the run directory, each file atomically."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.layout import SUMMARY
from prefixbench.measure.records import json_safe
from prefixbench.report.actions import action_lines
from prefixbench.report.doclinks import docs_base, html_docs_base
from prefixbench.report.document import render_html, render_markdown
from prefixbench.report.load import load_run
from prefixbench.report.model import Summary

__all__ = ["CSV_COLUMNS", "FORMATS", "results_csv", "write_outputs"]

#: Output formats and their file names.
FORMATS: Final = {"json": SUMMARY, "md": "report.md", "html": "report.html",
                  "csv": "results.csv"}

CSV_COLUMNS: Final = (
    "run_id", "host", "configuration", "workload", "repetition", "status", "seed",
    "started_at", "ended_at", "completed", "failed", "median_ttft_ms", "p99_ttft_ms",
    "mean_ttft_ms", "output_throughput", "request_throughput", "total_input_tokens",
    "hit_ratio_queries", "hit_ratio_by_source", "hit_tokens", "query_tokens",
    "expected_served", "expected_block_aligned", "expected_tutorial", "preemptions", "error")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def results_csv(run_dir: str | Path, *, accept_unchecksummed: bool = False) -> str:
    """One row per benchmark record (results and failures) of the run directory; a result
    without a checksum is a row only with ``accept_unchecksummed``, its status then
    ``ok, no checksum``."""
    data = load_run(run_dir, accept_unchecksummed=accept_unchecksummed)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    rows: list[tuple[Any, ...]] = []
    for r in data.records:
        b, m, e = r.bench, r.measured, r.expected
        # A server without prefix caching expects no hits, whatever the workload's shape
        # (the report's step 9 says 0% for it too).
        off = m.get("prefix_caching_enabled") is False or r.key.configuration == "baseline"
        expected = (0.0, 0.0, 0.0) if off else (
            e.get("served_ratio"), e.get("block_aligned_ratio", e.get("block_aligned")),
            e.get("tutorial_ratio", e.get("tutorial")))
        rows.append((data.run_id, r.key.host, r.key.configuration, r.key.workload,
                     r.key.repetition, "ok" if r.checksummed else "ok, no checksum",
                     r.seed, r.started_at, r.ended_at,
                     b.get("completed"), b.get("failed"), b.get("median_ttft_ms"),
                     b.get("p99_ttft_ms"), b.get("mean_ttft_ms"), b.get("output_throughput"),
                     b.get("request_throughput"), b.get("total_input_tokens"),
                     m.get("hit_ratio_queries"), m.get("hit_ratio_by_source"),
                     m.get("hit_tokens"), m.get("query_tokens"), *expected,
                     m.get("preemptions"), ""))
    for f, _p in data.failures:
        rows.append((data.run_id, f.key.host, f.key.configuration, f.key.workload,
                     f.key.repetition, "failed", f.seed, f.started_at, f.ended_at,
                     *([None] * 16), f.error))
    for row in sorted(rows, key=lambda r: (str(r[1]), str(r[2]), str(r[3]), int(r[4]))):
        w.writerow([_cell(v) for v in row])
    return buf.getvalue()


def write_outputs(
    summary: Summary, run_dir: str | Path, formats: Iterable[str] = tuple(FORMATS),
    docs: str | None = None,
) -> list[Path]:
    """Write the requested outputs (``json``, ``md``, ``html``, ``csv``) into ``run_dir``.
    ``docs`` is the base of the report's links to the docs (default
    :func:`prefixbench.report.doclinks.docs_base` of ``run_dir``)."""
    root = Path(run_dir)
    base = docs if docs is not None else docs_base(root)
    written: list[Path] = []
    for fmt in formats:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
        path = root / FORMATS[fmt]
        if fmt == "json":
            text = json.dumps(json_safe({**summary.to_dict(),
                                         "next_steps": action_lines(summary)}),
                              indent=2, sort_keys=True, allow_nan=False) + "\n"
        elif fmt == "md":
            text = render_markdown(summary, base)
        elif fmt == "html":
            # Handed over as one file: its links point at the sections it carries, unless
            # the docs are published (PREFIXBENCH_DOCS_BASE) or a base was given.
            text = render_html(summary, docs if docs is not None else html_docs_base())
        else:
            text = results_csv(root, accept_unchecksummed=bool(summary.unchecksummed))
        write_text_atomic(path, text)
        written.append(path)
    return written
