"""``prefixbench report`` and ``prefixbench compare``: argv in, exit code out.

Exit codes (:func:`outcome_code`, for a sweep's points too; docs/reading-the-report.md
lists them): 0 every
judged confirmation verdict passed (criteria with no workload are NOT_RUN) / no
regression; 2 usage or input error (one line on stderr); 3 a confirmation verdict failed
(or, with ``--fleet-gate``, a host was flagged by the fleet checks, of any point of a
sweep); 4 regression against
the reference; 5 the S3 upload failed; 6 a verdict is INCONCLUSIVE (more repetitions
would decide it); 7 the run is incomplete: a bench failed and has no result (rerun with
the same run id); for ``compare``: data missing in either run (:func:`compare_code`);
8 nothing judged: no criterion could be decided (every verdict NOT_RUN). The printed
overall names the code (``overall: PASS; exit 0 (...)``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from prefixbench.frontend.runview import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INCONCLUSIVE,
    EXIT_NOTHING_JUDGED,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    exit_line,
    outcome_code,
)
from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.records import json_safe
from prefixbench.report.actions import NO_DATA, action_lines
from prefixbench.report.build import build_summary
from prefixbench.report.capacity import is_capacity_sweep
from prefixbench.report.capacity_doc import capacity_lines, report_capacity
from prefixbench.report.compare import (
    Comparison,
    ToleranceError,
    Tolerances,
    compare,
    load_tolerances,
)
from prefixbench.report.junit import write_junit
from prefixbench.report.load import ReportInputError
from prefixbench.report.sweep import is_sweep, report_sweep, sweep_lines
from prefixbench.report.upload import UploadError, upload_run
from prefixbench.report.write import FORMATS, write_outputs

__all__ = [
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INCONCLUSIVE",
    "EXIT_NOTHING_JUDGED",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_UPLOAD",
    "EXIT_USAGE",
    "compare_code",
    "compare_main",
    "compare_parser",
    "outcome_code",
    "report_main",
    "report_parser",
]

EXIT_UPLOAD = 5


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _formats(text: str) -> list[str]:
    out: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if item == "all":
            out += [f for f in FORMATS if f not in out]
        elif item in FORMATS:
            if item not in out:
                out.append(item)
        else:
            raise argparse.ArgumentTypeError(
                f"unknown format {item!r} (choose from {', '.join(FORMATS)}, all)")
    return out


def _fail(prog: str, message: str, err: TextIO) -> int:
    print(f"{prog}: error: {message}", file=err)
    return EXIT_USAGE


def report_parser() -> argparse.ArgumentParser:
    """The arguments of ``prefixbench report``; a usage error raises, it does not exit."""
    parser = _Parser(prog="prefixbench report", description="Summarise a run directory: "
                     "tables, verdicts, fleet spread; writes summary.json, report.md, "
                     "report.html, results.csv.")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--format", type=_formats, default=list(FORMATS),
                        help="comma-separated: json, md, html, csv or all (default all)")
    parser.add_argument("--upload", metavar="S3_URI",
                        help="after writing, upload the run directory to s3://bucket/prefix")
    parser.add_argument("--junit", metavar="FILE",
                        help="also write the verdicts as JUnit XML (one test case per host "
                             "and criterion) for CI systems")
    parser.add_argument("--fleet-gate", action="store_true",
                        help="exit 3 also when the fleet checks flag a host (outlier, "
                             "hit-ratio departure, fingerprint drift; of any point of a "
                             "sweep)")
    parser.add_argument("--accept-unchecksummed", action="store_true",
                        help="use result files that carry no checksum (a run written by "
                             "an older version) instead of treating them as not measured; "
                             "the report warns on its first screen")
    return parser


def compare_parser() -> argparse.ArgumentParser:
    """The arguments of ``prefixbench compare``; a usage error raises, it does not exit."""
    parser = _Parser(prog="prefixbench compare", description="Compare a run against a "
                     "reference run over the benches both have: exit 4 on a regression "
                     "beyond the tolerances, 7 when data is missing in either run (a "
                     "result in one run only, or rejected by the record checks).")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("reference_dir", metavar="REFERENCE_DIR")
    parser.add_argument("--tolerances", metavar="FILE",
                        help="YAML overriding the default tolerances (see "
                        "docs/reading-the-report.md)")
    parser.add_argument("--accept-unchecksummed", action="store_true",
                        help="use result files that carry no checksum (runs written by an "
                             "older version) instead of treating them as missing data")
    return parser


def report_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                err: TextIO | None = None) -> int:
    """``RUN_DIR [--format json,md,html,csv|all] [--upload s3://bucket/prefix]
    [--fleet-gate] [--accept-unchecksummed]``."""
    out = out or sys.stdout
    err = err or sys.stderr
    prog = "prefixbench report"
    parser = report_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except _UsageError as exc:
        return _fail(prog, str(exc), err)
    if is_capacity_sweep(args.run_dir):
        return _report_capacity(prog, args, out, err)
    if is_sweep(args.run_dir):
        return _report_sweep(prog, args, out, err)
    try:
        summary = build_summary(args.run_dir, accept_unchecksummed=args.accept_unchecksummed)
        paths = write_outputs(summary, args.run_dir, args.format)
        if args.junit:
            paths.append(write_junit(summary, args.junit))
    except (ReportInputError, OSError) as exc:
        return _fail(prog, str(exc), err)
    for h in summary.hosts:
        if not h.benches:
            print(f"{h.host}: {NO_DATA}; {len(h.failures)} failure(s)", file=out)
            continue
        verdicts = " ".join(f"{v.name}={v.status}" for v in h.verdicts)
        print(f"{h.host}: {h.status} ({verdicts}); {len(h.issues)} issue(s), "
              f"{len(h.failures)} failure(s)", file=out)
    for line in action_lines(summary):
        print(f"next: {line}", file=out)
    fleet = summary.fleet
    if fleet.flagged:
        print(f"fleet: outliers {', '.join(fleet.outlier_hosts) or 'none'}; "
              f"{len(fleet.hit_departures)} hit-ratio departure(s); "
              f"{len(fleet.drift)} drifting fingerprint field(s)", file=out)
    for w in summary.warnings:
        print(f"warning: {w}", file=err)
    for p in paths:
        print(f"wrote {p}", file=out)
    code = outcome_code(summary.status, len(summary.failures))
    if args.fleet_gate and fleet.flagged:
        code = EXIT_FAILED
        print(f"fleet gate fired (--fleet-gate): {fleet_gate_reason(fleet)}", file=out)
    if args.upload and not _upload(prog, args, out, err):
        code = EXIT_UPLOAD
    print(f"overall: {summary.status}; {exit_line(code)}", file=out)
    return code


def fleet_gate_reason(fleet: Any) -> str:
    """What flagged the fleet, for the line that says the fleet gate fired."""
    parts = []
    if fleet.outlier_hosts:
        parts.append(f"outlier host(s) {', '.join(fleet.outlier_hosts)}")
    if fleet.hit_departures:
        parts.append(f"{len(fleet.hit_departures)} hit-ratio departure(s)")
    if fleet.drift:
        parts.append(f"{len(fleet.drift)} fingerprint field(s) drifting")
    return "; ".join(parts) or "a fleet flag"


def _upload(prog: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> bool:
    """Upload the run directory to ``args.upload``; False (error printed) when it fails."""
    try:
        keys = upload_run(args.run_dir, args.upload)
    except UploadError as exc:
        print(f"{prog}: error: {exc}", file=err)
        return False
    print(f"uploaded {len(keys)} file(s) to {args.upload}", file=out)
    return True


def _report_points(build: Callable[[Path], tuple[Any, list[Path]]],
                   lines: Callable[[Any], Iterable[str]], prog: str,
                   args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    """A sweep's report (segment size or KV capacity): ``build`` writes it, ``lines`` say
    it; the exit code of a run's (:func:`outcome_code`) over every point: 3 on a failed
    verdict, 7 on a bench without a result, 6 on an inconclusive verdict, 8 when nothing
    was judged; with ``--fleet-gate``, 3 also when the fleet checks of a point flag a
    host (each point's hosts are a fleet of their own, as in its own report)."""
    try:
        report, paths = build(args.run_dir)
    except (ReportInputError, OSError) as exc:
        return _fail(prog, str(exc), err)
    for line in lines(report):
        print(line, file=out)
    for failure in report.failures:
        print(f"failed: {failure}", file=out)
    if report.failures:
        print(f"next: rerun with the same prefixbench_run_id: only the "
              f"{len(report.failures)} bench(es) without a result run again", file=out)
    for p in paths:
        print(f"wrote {p}", file=out)
    code = outcome_code(str(report.status), len(report.failures))
    flagged = [f"{p.run_dir.name}: {fleet_gate_reason(p.summary.fleet)}"
               for p in report.points if p.summary.fleet.flagged]
    if args.fleet_gate and flagged:
        code = EXIT_FAILED
        print(f"fleet gate fired (--fleet-gate): {'; '.join(flagged)}", file=out)
    elif flagged:
        print(f"fleet: {'; '.join(flagged)}", file=out)
    if args.upload and not _upload(prog, args, out, err):
        code = EXIT_UPLOAD
    print(f"overall: {report.status}; {exit_line(code)}", file=out)
    return code


def _report_sweep(prog: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _report_points(report_sweep, sweep_lines, prog, args, out=out, err=err)


def _report_capacity(prog: str, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _report_points(report_capacity, capacity_lines, prog, args, out=out, err=err)


def compare_code(c: Comparison) -> int:
    """The exit code of a comparison: 7 when data is missing (a bench with a result in one
    run only, a rejected result, a figure one run lacks), else 4 on a regression, else 0.
    Missing data is never a regression: the figures are taken over what both runs have."""
    if not c.complete:
        return EXIT_INCOMPLETE
    return EXIT_OK if c.ok else EXIT_REGRESSION


def _print_comparison(c: Comparison, out: TextIO) -> None:
    for g in c.gaps:
        print(g.line(), file=out)
    for i in c.items:
        if i.status != "ok":
            print(i.line(), file=out)
    n = len(c.regressions)
    print(f"{n} regression(s) in {len(c.items)} metric(s) against {c.reference_run_id}"
          + (": " + ", ".join(r.label for r in c.regressions) if n else ""), file=out)
    if not c.complete:
        rejected = len(c.rejected)
        print(f"incomplete: {len(c.gaps)} bench(es) without a result in both runs"
              + (f" ({rejected} rejected by the record checks)" if rejected else "")
              + f", {len(c.missing)} figure(s) in one run only; every figure above is "
              f"over the benches both runs have", file=out)
    print(f"overall: {exit_line(compare_code(c))}", file=out)


def compare_main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
                 err: TextIO | None = None) -> int:
    """``RUN_DIR REFERENCE_DIR [--tolerances FILE] [--accept-unchecksummed]``; writes
    RUN_DIR/comparison.json. Exit codes: :func:`compare_code`, 2 on bad input."""
    out = out or sys.stdout
    err = err or sys.stderr
    prog = "prefixbench compare"
    parser = compare_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        tol = load_tolerances(args.tolerances) if args.tolerances else Tolerances()
        result = compare(args.run_dir, args.reference_dir, tol,
                         accept_unchecksummed=args.accept_unchecksummed)
    except (_UsageError, ToleranceError, ReportInputError, OSError) as exc:
        return _fail(prog, str(exc), err)
    write_text_atomic(Path(args.run_dir) / "comparison.json",
                      json.dumps(json_safe(result.to_dict()), indent=2, sort_keys=True) + "\n")
    _print_comparison(result, out)
    return compare_code(result)
