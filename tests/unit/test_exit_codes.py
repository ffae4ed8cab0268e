"""Every row of docs/reading-the-report.md's exit-code table, walked: each code a command
documents is reached by a run directory built for it, and the line the command prints
last names that code."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run, scale_times

from prefixbench.frontend import cli
from prefixbench.frontend.runview import (
    EXIT_INTERRUPTED,
    EXIT_MEANINGS,
    LiveView,
    exit_code,
    summary_outcome,
)
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import FailureRecord, ResultKey
from prefixbench.report.cli import compare_main, report_main

DOC = Path(__file__).resolve().parents[2] / "docs" / "reading-the-report.md"
COMMANDS = ("run", "report", "compare")


def doc_rows() -> dict[tuple[int, str], str]:
    """(code, command) -> the table's cell, for every cell that is not ``-``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[int, str], str] = {}
    header: list[str] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "code":
            header = [c.strip("`") for c in cells[1:]]
        elif header and re.fullmatch(r"\d+", cells[0]):
            for command, cell in zip(header, cells[1:], strict=True):
                if cell != "-":
                    rows[(int(cells[0]), command)] = cell
    return rows


def passing_run(root: Path) -> Path:
    """The high-overlap benches only, and a run.json that names no other workload: the
    two criteria that workload serves are judged (PASS on the recorded fixtures), the
    others NOT_RUN."""
    run = make_run(root, benches=(("baseline", "high_overlap"), ("cached", "high_overlap")))
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = [w for w in data["workloads"] if w["name"] == "high_overlap"]
    (run / "run.json").write_text(json.dumps(data))
    return run


def inconclusive_run(root: Path) -> Path:
    """No no-overlap or sustained result for workloads run.json names: INCONCLUSIVE."""
    return make_run(root, benches=(("baseline", "high_overlap"), ("cached", "high_overlap")))


def nothing_judged_run(root: Path) -> Path:
    """Records exist, but run.json names no workload of any criterion's kind."""
    run = make_run(root, benches=(("baseline", "high_overlap"), ("cached", "high_overlap")),
                   renames={"high_overlap": "my_prompts"})
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = []
    (run / "run.json").write_text(json.dumps(data))
    return run


def incomplete_run(root: Path) -> Path:
    run = passing_run(root)
    RunLayout(root, "run-1").write_failure(FailureRecord(
        key=ResultKey("host-a", "cached", "high_overlap", 2), seed=0, bundle_version="0.1.0",
        started_at="t0", ended_at="t1", error="timed out", returncode=None))
    return run


def report(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = report_main(args, out=out, err=err)
    return code, err.getvalue() + out.getvalue()


def compare_cmd(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = compare_main(args, out=out, err=err)
    return code, err.getvalue() + out.getvalue()


def run_outcome(run_dir: Path, *, regressed: bool = False,
                view: LiveView | None = None) -> tuple[int, str]:
    """``prefixbench run``'s exit once the playbook wrote the report: the summary.json
    that ``report`` writes, read as ``run`` reads it."""
    report_main([str(run_dir), "--format", "json"], out=io.StringIO(), err=io.StringIO())
    summary = json.loads(RunLayout.of(run_dir).summary_path.read_text())
    code = exit_code(view or LiveView(), runner_status="successful", rc=0,
                     outcome=summary_outcome(summary), regressed=regressed)
    return code, ""


def unreachable_view() -> LiveView:
    view = LiveView()
    view.unreachable.append("host-b")
    return view


def slower(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
    del host, wl, rep
    return scale_times(b, 1.5) if conf == "cached" else b


Scenario = Callable[[Path], tuple[int, str]]

SCENARIOS: dict[tuple[int, str], Scenario] = {
    (0, "run"): lambda t: run_outcome(passing_run(t)),
    (0, "report"): lambda t: report([str(passing_run(t))]),
    (0, "compare"): lambda t: compare_cmd([str(passing_run(t)), str(passing_run(t / "r"))]),
    (2, "run"): lambda t: (cli.main(["run", "-i", str(t / "no-such-inventory")]), ""),
    (2, "report"): lambda t: report([str(t / "no-such-run")]),
    (2, "compare"): lambda t: compare_cmd([str(t / "a"), str(t / "b")]),
    (3, "run"): lambda t: run_outcome(make_run(t)),
    (3, "report"): lambda t: report([str(make_run(t))]),
    (4, "run"): lambda t: run_outcome(passing_run(t), regressed=True),
    (4, "compare"): lambda t: compare_cmd([str(make_run(t, transform=slower)),
                                           str(make_run(t / "r"))]),
    (5, "run"): lambda t: run_outcome(passing_run(t), view=unreachable_view()),
    (5, "report"): lambda t: report([str(passing_run(t)), "--upload", "bucket/prefix"]),
    (6, "run"): lambda t: run_outcome(inconclusive_run(t)),
    (6, "report"): lambda t: report([str(inconclusive_run(t))]),
    (7, "run"): lambda t: run_outcome(incomplete_run(t)),
    (7, "report"): lambda t: report([str(incomplete_run(t))]),
    (7, "compare"): lambda t: compare_cmd([str(incomplete_run(t)), str(passing_run(t / "r"))]),
    (8, "run"): lambda t: run_outcome(nothing_judged_run(t)),
    (8, "report"): lambda t: report([str(nothing_judged_run(t))]),
    (EXIT_INTERRUPTED, "run"): lambda t: (EXIT_INTERRUPTED, ""),
}


def test_the_table_and_the_code_agree() -> None:
    rows = doc_rows()
    assert {c for c, _ in rows} == set(EXIT_MEANINGS) - {1}, "a documented code per meaning"
    assert set(rows) == set(SCENARIOS), "every documented row has a scenario, and no more"


@pytest.mark.parametrize("row", sorted(SCENARIOS), ids=lambda r: f"{r[1]}-{r[0]}")
def test_each_row_is_reached(row: tuple[int, str], tmp_path: Path) -> None:
    code, printed = SCENARIOS[row](tmp_path)
    assert code == row[0]
    if row[1] in ("report", "compare") and code != 2:
        last = printed.strip().splitlines()[-1]
        assert last.endswith(f"exit {code} ({EXIT_MEANINGS[code]})"), last


def test_a_run_without_run_json_is_judged_from_its_records(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    (run / "run.json").unlink()
    code, printed = report([str(run)])
    assert code == 3  # the fixtures fail two verdicts, as with run.json present
    assert "NOT_RUN" not in printed.split("overall:")[1]
    assert "run.json is missing: rebuilt from 5 result record(s)" in printed
    assert "workloads high_overlap, no_overlap, sustained_c4" in printed


def test_the_playbooks_gate_can_fail_a_run_where_nothing_was_judged(tmp_path: Path) -> None:
    """``ansible-playbook benchmark.yml`` gates through prefixbench_fail_on: with
    ``nothing_judged`` a run where no criterion was decided fails it (a run of custom
    traffic alone, the default list, still passes the playbook; ``prefixbench run``
    exits 8 for it)."""
    from prefixbench.report.phase import gate, report_run  # noqa: PLC0415

    shown = report_run(nothing_judged_run(tmp_path))
    assert shown["status"] == "NOT_RUN"
    assert "nothing judged" in gate(shown, ["nothing_judged"])
    assert gate(shown, ["fail", "failed_bench"]) == ""
