"""The report states the rules its verdicts apply: one source for both."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run

from prefixbench.report import build_summary
from prefixbench.report.document import render_markdown, threshold_lines
from prefixbench.report.verdicts import RULES
from prefixbench.report.vocab import FAIL, PASS, Thresholds

#: Wording of rules the verdicts no longer apply; none of it may come back.
SUPERSEDED = ("+/-", "within +/-", "outside the repetition range", "c=4 >=", "x c=1",
              "of the block-aligned expectation")


def _section(md: str) -> str:
    return md.split("## Thresholds", 1)[1].split("\n## ", 1)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("rules"))


def test_the_thresholds_section_prints_each_verdicts_own_rule(run: Path) -> None:
    s = build_summary(run)
    section = _section(render_markdown(s))
    verdicts = {v.name: v for v in s.host("host-a").verdicts}
    assert [r.name for r in RULES] == list(verdicts)
    for rule in RULES:
        v = verdicts[rule.name]
        assert v.criterion == rule.criterion
        assert v.threshold == rule.threshold(s.thresholds)
        assert f"- {rule.title}: {v.threshold}" in section
    for words in SUPERSEDED:
        assert words not in section, words


def test_every_threshold_changes_the_rules_the_report_prints() -> None:
    """A threshold the report does not word is a rule applied but not stated."""
    base = Thresholds()
    shown = threshold_lines(base)
    for f in dataclasses.fields(Thresholds):
        changed = dataclasses.replace(base, **{f.name: getattr(base, f.name) * 0.5 + 0.013})
        assert threshold_lines(changed) != shown, f"{f.name} is not in the Thresholds text"


def _status(summary: Any, name: str) -> str:
    return next(v.status for v in summary.host("host-a").verdicts if v.name == name)


def test_a_changed_threshold_changes_the_verdict_and_its_text_together(run: Path) -> None:
    # Recorded: cached high-overlap median TTFT 0.45 x baseline, interval well below 0.90.
    default = build_summary(run)
    assert _status(default, "high_overlap_ttft_lower") == PASS
    strict = Thresholds(lower_ttft_max_ratio=0.30)  # asks for at least 70% lower
    s = build_summary(run, strict)
    assert _status(s, "high_overlap_ttft_lower") == FAIL
    section = _section(render_markdown(s))
    assert "PASS when it lies at or below 0.30 (at least 70% lower)" in section
    assert "0.90" not in section.split("\n")[1]  # the TTFT-lower line: the old limit gone
    verdict = next(v for v in s.host("host-a").verdicts if v.name == "high_overlap_ttft_lower")
    assert verdict.numbers["threshold"] == 0.30
    assert "at or below 0.30" in verdict.threshold


def test_fleet_departures_hold_the_hit_ratio_to_the_verdicts_expectation(tmp_path: Path) -> None:
    import json  # noqa: PLC0415

    from prefixbench.measure.records import with_checksum  # noqa: PLC0415

    run = make_run(tmp_path)
    path = run / "host-a" / "cached" / "high_overlap" / "rep1.json"
    data = json.loads(path.read_text())
    # Measured 67.50%; the served tokens would give 66.00%: 1.5 points off.
    data["expected"].update(served_ratio=0.66, junction_lost_blocks=3)
    path.write_text(json.dumps(with_checksum(data)))
    s = build_summary(run)
    assert _status(s, "hit_rate_matches_expected") == FAIL
    hi = [d for d in s.fleet.hit_departures if d.workload == "high_overlap"]
    assert [d.expected for d in hi] == [0.66, 0.66]  # both signals, served expectation


def test_fleet_departures_above_concurrency_1_are_from_the_range_over_arrival_timings(
        tmp_path: Path) -> None:
    import json  # noqa: PLC0415

    from prefixbench.measure.records import with_checksum  # noqa: PLC0415
    from prefixbench.report.fleet_model import HitDeparture  # noqa: PLC0415
    from prefixbench.report.tables import departures_table  # noqa: PLC0415

    def departures(band: tuple[float, float] | None) -> list[HitDeparture]:
        run = make_run(tmp_path / str(band))
        path = run / "host-a" / "cached" / "high_overlap" / "rep1.json"
        data = json.loads(path.read_text())
        data["expected"].update(served_ratio=0.66)  # measured 67.50%
        if band is not None:
            data["expected"].update(served_band_lo=band[0], served_band_hi=band[1])
        path.write_text(json.dumps(with_checksum(data)))
        s = build_summary(run)
        got = [d for d in s.fleet.hit_departures if d.workload == "high_overlap"]
        if got:
            assert "by arrival timing" in str(departures_table(s.fleet).rows) or band is None
        return got

    assert len(departures(None)) == 2  # 1.5 points from the point
    assert departures((0.64, 0.68)) == []  # inside the range timing gives
    (d, _) = departures((0.60, 0.66))  # above it by 1.5 points
    assert d.band == (0.60, 0.66) and abs(d.diff_pp - 1.5) < 1e-9
