"""The hit-ratio plot marks the expectation the hit-rate verdict holds a bench to."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

from report_runs import make_run

from prefixbench.report.build import build_summary
from prefixbench.report.model import Summary
from prefixbench.report.plots import hit_ratio_plot
from prefixbench.report.verdicts import hit_rate
from prefixbench.report.vocab import CACHED, Thresholds


def _with_expectations(summary: Summary, served: float | None,
                       aligned: float | None) -> Summary:
    hosts = []
    for h in summary.hosts:
        benches = tuple(dataclasses.replace(b, expected_served=served,
                                            expected_block_aligned=aligned)
                        if b.configuration == CACHED else b for b in h.benches)
        hosts.append(dataclasses.replace(h, benches=benches))
    return dataclasses.replace(summary, hosts=tuple(hosts))


def _markers(svg: str) -> dict[str, float]:
    return {label: float(v) for label, v in
            re.findall(r"<line [^>]*><title>([^<]*expected[^<]*): ([0-9.e-]+)</title>",
                       html.unescape(svg))}


def test_the_plot_marks_the_served_expectation_the_verdict_uses(tmp_path: Path) -> None:
    summary = _with_expectations(build_summary(make_run(tmp_path)), 0.57, 0.675)
    marks = _markers(hit_ratio_plot(summary))
    assert marks["expected (served tokens: the verdict's)"] == 0.57
    assert "expected (tutorial formula)" in marks
    assert not any("block-aligned" in label for label in marks)


def test_without_a_served_expectation_the_block_aligned_one_is_marked(
        tmp_path: Path) -> None:
    summary = _with_expectations(build_summary(make_run(tmp_path)), None, 0.675)
    marks = _markers(hit_ratio_plot(summary))
    assert marks["expected (block-aligned: the verdict's)"] == 0.675


def test_the_verdict_holds_the_bench_to_the_figure_the_plot_marks(tmp_path: Path) -> None:
    summary = _with_expectations(build_summary(make_run(tmp_path)), 0.57, 0.675)
    host = summary.hosts[0]
    verdict = hit_rate(host, Thresholds())
    marks = _markers(hit_ratio_plot(dataclasses.replace(summary, hosts=(host,))))
    assert verdict.numbers["high_overlap_expected"] == 0.57
    assert marks["expected (served tokens: the verdict's)"] == 0.57
