"""The report step of benchmark.yml: write every output and say what the verdicts are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefixbench.report.build import build_summary
from prefixbench.report.capacity import is_capacity_sweep
from prefixbench.report.capacity_doc import capacity_lines, report_capacity
from prefixbench.report.junit import write_junit
from prefixbench.report.model import FailureInfo
from prefixbench.report.sweep import is_sweep, report_sweep, sweep_lines
from prefixbench.report.vocab import INCONCLUSIVE
from prefixbench.report.write import FORMATS, write_outputs


def report_run(run_dir: Path, junit: str = "") -> dict[str, Any]:
    """Build the summary of ``run_dir``, write all outputs (and JUnit XML to ``junit``,
    relative to the run directory, when given), return what to show."""
    if is_capacity_sweep(run_dir):
        curve, written_curve = report_capacity(run_dir)
        return {
            "status": curve.status,
            "failed_verdicts": curve.failed_verdicts,
            "inconclusive_verdicts": curve.inconclusive_verdicts,
            "failures": curve.failures,
            "written": [str(p) for p in written_curve],
            "lines": [*capacity_lines(curve), *(f"failed: {f}" for f in curve.failures),
                      f"report: {run_dir / FORMATS['html']}"],
        }
    if is_sweep(run_dir):
        sweep, paths = report_sweep(run_dir)
        return {
            "status": sweep.status,
            "failed_verdicts": sweep.failed_verdicts,
            "inconclusive_verdicts": sweep.inconclusive_verdicts,
            "failures": sweep.failures,
            "written": [str(p) for p in paths],
            "lines": [*sweep_lines(sweep), *(f"failed: {f}" for f in sweep.failures),
                      f"report: {run_dir / FORMATS['html']}"],
            "best_segment_size": None if sweep.best is None else sweep.best.segment_size,
        }
    summary = build_summary(run_dir)
    written = write_outputs(summary, run_dir, tuple(FORMATS))
    if junit:
        written.append(write_junit(summary, run_dir / junit))
    lines = [f"run {summary.run_id}: overall {summary.status}"]
    for host in summary.hosts:
        for verdict in host.verdicts:
            lines.append(f"{host.host}: {verdict.status:12} {verdict.name}: {verdict.detail}")
    lines += [failure_line(f) for f in summary.failures]
    lines.append(f"report: {run_dir / FORMATS['html']}")
    return {
        "status": summary.status,
        "failed_verdicts": [f"{h}: {v.name}" for h, v in summary.failed_verdicts],
        "inconclusive_verdicts": [f"{h.host}: {v.name}" for h in summary.hosts
                                  for v in h.verdicts if v.status == INCONCLUSIVE],
        "failures": [failure_line(f) for f in summary.failures],
        "written": [str(p) for p in written],
        "lines": lines,
    }


def failure_line(f: FailureInfo) -> str:
    """A failed bench, for people: where, what, and the last line of its log."""
    last = next((ln.strip() for ln in reversed(f.log_tail.splitlines()) if ln.strip()), "")
    rc = f" (exit {f.returncode})" if f.returncode is not None else ""
    tail = f"; last log line: {last}" if last else ""
    return (f"failed: {f.host} {f.configuration}/{f.workload} rep{f.repetition}: "
            f"{f.error}{rc}{tail} [{f.path}]")


#: What ``prefixbench_fail_on`` may name: outcomes that fail the report phase.
GATES = ("fail", "failed_bench", "inconclusive", "nothing_judged")


def gate(shown: dict[str, Any], fail_on: list[str]) -> str:
    """One line saying why the run must end non-zero, or "" when it need not."""
    reasons = []
    if "fail" in fail_on and shown.get("failed_verdicts"):
        reasons.append(f"verdict(s) FAIL: {', '.join(shown['failed_verdicts'])}")
    if "failed_bench" in fail_on and shown.get("failures"):
        reasons.append(f"{len(shown['failures'])} bench(es) without a result (rerun with "
                       "the same prefixbench_run_id to run only those)")
    if "inconclusive" in fail_on and shown.get("inconclusive_verdicts"):
        reasons.append(f"verdict(s) INCONCLUSIVE: {', '.join(shown['inconclusive_verdicts'])}")
    if "nothing_judged" in fail_on and shown.get("status") == "NOT_RUN":
        reasons.append("nothing judged: no criterion could be decided (every verdict "
                       "NOT_RUN)")
    return "; ".join(reasons)
