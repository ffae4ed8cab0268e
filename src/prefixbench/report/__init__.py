"""The run report: the tutorial's tables and verdicts per host, fleet spread, outputs.

Public entry points: :func:`build_summary` (decide), :func:`write_outputs` (summary.json,
report.md, report.html, results.csv), :func:`compare` (against a reference run),
:func:`upload_run` (S3), and the CLI functions in :mod:`prefixbench.report.cli`.
"""

from prefixbench.report.build import build_summary
from prefixbench.report.load import ReportInputError, load_run
from prefixbench.report.model import SUMMARY_SCHEMA_VERSION, Summary
from prefixbench.report.vocab import Thresholds

__all__ = [
    "SUMMARY_SCHEMA_VERSION",
    "ReportInputError",
    "Summary",
    "Thresholds",
    "build_summary",
    "load_run",
]
