"""A result is trusted only with a checksum that matches it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from report_runs import make_run

from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import (
    CHECKSUM_KEY,
    BenchmarkRecord,
    ResultKey,
    verify_checksum,
    with_checksum,
)
from prefixbench.report import build_summary
from prefixbench.report.cli import report_main

KEY = ResultKey("host-a", "cached", "high_overlap", 1)
REL = "host-a/cached/high_overlap/rep1.json"
EDITED_TTFT = 1.25  # ms: a better number, typed in by hand


def test_verify_checksum_wants_one_that_matches() -> None:
    signed = with_checksum({"a": 1, "b": [1.5, None]})
    assert verify_checksum(signed, "x.json") is True
    with pytest.raises(ValueError, match=r"x\.json: checksum mismatch"):
        verify_checksum({**signed, "a": 2}, "x.json")
    unsigned = {"a": 1}
    with pytest.raises(ValueError, match=r"x\.json: no checksum: "):
        verify_checksum(unsigned, "x.json")
    assert verify_checksum(unsigned, "x.json", accept_missing=True) is False
    # Accepting records of older versions never accepts a wrong checksum.
    with pytest.raises(ValueError, match="checksum mismatch"):
        verify_checksum({**signed, "a": 2}, "x.json", accept_missing=True)


def _edit_and_drop_checksum(run: Path) -> None:
    path = run / REL
    data = json.loads(path.read_text())
    data["bench"]["median_ttft_ms"] = EDITED_TTFT
    del data[CHECKSUM_KEY]
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def test_a_record_without_checksum_is_not_measured(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    layout = RunLayout(tmp_path, "run-1")
    data = json.loads((run / REL).read_text())
    with pytest.raises(ValueError, match="no checksum"):
        BenchmarkRecord.from_dict({k: v for k, v in data.items() if k != CHECKSUM_KEY})
    _edit_and_drop_checksum(run)
    # A rerun measures it again ...
    assert not layout.is_completed(KEY) and KEY not in layout.completed()
    assert layout.missing([KEY]) == [KEY]
    # ... and the report does not use its figure: the bench has no result, and says why.
    s = build_summary(run)
    assert s.unchecksummed == ()
    bench = s.host("host-a").bench("cached", "high_overlap")
    assert bench is None
    v = {x.name: x.status for x in s.host("host-a").verdicts}
    assert v["high_overlap_ttft_lower"] == "INCONCLUSIVE"
    rejected = [f for f in s.failures if f.path == REL]
    assert len(rejected) == 1 and rejected[0].error.startswith(
        "result rejected, no checksum: it cannot be shown unedited")
    assert "--accept-unchecksummed" in rejected[0].error


def test_accepting_unchecksummed_records_is_explicit_and_shown(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    _edit_and_drop_checksum(run)
    out, err = io.StringIO(), io.StringIO()
    report_main([str(run), "--accept-unchecksummed"], out=out, err=err)
    md = (run / "report.md").read_text()
    top = md.split("## Hosts at a glance")[0]
    assert "**Warning: 1 result(s) without a checksum are used**" in top
    assert f"`{REL}`" in top
    assert f"1 result(s) used without a checksum (--accept-unchecksummed): {REL}" \
        in err.getvalue()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["unchecksummed"] == [REL]
    assert not any(f["path"] == REL for f in summary["failures"])
    rows = {(r["configuration"], r["workload"]): r
            for r in csv.DictReader(io.StringIO((run / "results.csv").read_text()))}
    row = rows[("cached", "high_overlap")]
    assert row["status"] == "ok, no checksum" and float(row["median_ttft_ms"]) == EDITED_TTFT
    assert rows[("baseline", "high_overlap")]["status"] == "ok"
    # The rerun still measures it again: the flag is the report's, not the run's.
    assert not RunLayout(tmp_path, "run-1").is_completed(KEY)
    # Without the flag the same run has no such figure, and no warning.
    report_main([str(run)], out=io.StringIO(), err=io.StringIO())
    assert "without a checksum are used" not in (run / "report.md").read_text()
    assert json.loads((run / "summary.json").read_text())["unchecksummed"] == []
    assert build_summary(run).host("host-a").bench("cached", "high_overlap") is None
    assert build_summary(run, accept_unchecksummed=True).host("host-a").bench(
        "cached", "high_overlap") is not None
