"""The verdicts as JUnit XML, read back with a JUnit reader (junitparser) as CI systems do."""

from __future__ import annotations

import io
import json
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped
from report_runs import make_run

from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import FailureRecord, ResultKey
from prefixbench.report.cli import report_main


def test_one_case_per_host_and_criterion_failures_carry_the_numbers(tmp_path: Path) -> None:
    run = make_run(tmp_path, ("host-a", "host-b"))
    RunLayout(tmp_path, "run-1").write_failure(FailureRecord(
        key=ResultKey("host-b", "cached", "sustained_c4", 2), seed=0, bundle_version="0.1.0",
        started_at="t0", ended_at="t1", error="vllm bench serve timed out", returncode=124))
    junit = tmp_path / "out" / "junit.xml"
    assert report_main([str(run), "--junit", str(junit)], out=io.StringIO(),
                       err=io.StringIO()) == 3
    xml = JUnitXml.fromfile(str(junit))
    (suite,) = list(xml)
    cases = {(c.classname, c.name): c for c in suite}
    verdicts = {"high_overlap_ttft_lower", "no_overlap_no_regression",
                "hit_rate_matches_expected", "sustained_benefit_preserved"}
    assert {n for (h, n) in cases if h == "host-a"} == verdicts
    assert cases[("host-a", "high_overlap_ttft_lower")].is_passed
    (fail,) = cases[("host-a", "hit_rate_matches_expected")].result
    assert isinstance(fail, Failure) and "no_overlap queries 3.88%" in fail.message
    (skip,) = cases[("host-a", "no_overlap_no_regression")].result
    assert isinstance(skip, Skipped) and skip.message.startswith("INCONCLUSIVE:")
    assert "would decide it" in skip.message
    (err,) = cases[("host-b", "bench cached/sustained_c4 rep2")].result
    assert isinstance(err, Error) and err.message == "vllm bench serve timed out"
    assert (suite.tests, suite.failures, suite.errors) == (9, 2, 1)
    assert suite.skipped == sum(1 for c in suite for r in c.result if isinstance(r, Skipped))
    data = json.loads((run / "summary.json").read_text())
    assert data["status"] == "FAIL"
