"""The report step of benchmark.yml: write every output and say what the verdicts are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefixbench.report.build import build_summary
from prefixbench.report.sweep import is_sweep, report_sweep, sweep_lines
from prefixbench.report.write import FORMATS, write_outputs


def report_run(run_dir: Path) -> dict[str, Any]:
    """Build the summary of ``run_dir``, write all outputs, return what to show."""
    if is_sweep(run_dir):
        sweep, paths = report_sweep(run_dir)
        return {
            "status": sweep.status,
            "failed_verdicts": sweep.failed_verdicts,
            "written": [str(p) for p in paths],
            "lines": [*sweep_lines(sweep), f"report: {run_dir / FORMATS['html']}"],
            "best_segment_size": None if sweep.best is None else sweep.best.segment_size,
        }
    summary = build_summary(run_dir)
    written = write_outputs(summary, run_dir, tuple(FORMATS))
    lines = [f"run {summary.run_id}: overall {summary.status}"]
    for host in summary.hosts:
        for verdict in host.verdicts:
            lines.append(f"{host.host}: {verdict.status:7} {verdict.name}: {verdict.detail}")
    lines += [f"failure: {f}" for f in summary.failures]
    lines.append(f"report: {run_dir / FORMATS['html']}")
    return {
        "status": summary.status,
        "failed_verdicts": [f"{h}: {v.name}" for h, v in summary.failed_verdicts],
        "written": [str(p) for p in written],
        "lines": lines,
    }
