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
#: The table's columns for a sweep's run directory (``report`` on it; ``run`` exits the same).
SEG, KV = "segment-size sweep", "KV-capacity sweep"


def doc_rows() -> dict[tuple[int, str], str]:
    """(code, command) -> the table's cell, for every cell that is not ``-``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[int, str], str] = {}
    header: list[str] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "code":
            header = [c.replace("`", "") for c in cells[1:]]
        elif header and re.fullmatch(r"\d+", cells[0]):
            for command, cell in zip(header, cells[1:], strict=True):
                if cell != "-":
                    rows[(int(cells[0]), command)] = cell
    return rows


def passing_run(root: Path, run_id: str = "run-1") -> Path:
    """The high-overlap benches only, and a run.json that names no other workload: the
    two criteria that workload serves are judged (PASS on the recorded fixtures), the
    others NOT_RUN."""
    run = make_run(root, run_id=run_id,
                   benches=(("baseline", "high_overlap"), ("cached", "high_overlap")))
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = [w for w in data["workloads"] if w["name"] == "high_overlap"]
    (run / "run.json").write_text(json.dumps(data))
    return run


def inconclusive_run(root: Path, run_id: str = "run-1") -> Path:
    """No no-overlap or sustained result for workloads run.json names: INCONCLUSIVE."""
    return make_run(root, run_id=run_id,
                    benches=(("baseline", "high_overlap"), ("cached", "high_overlap")))


def failing_run(root: Path, run_id: str = "run-1") -> Path:
    """Every fixture bench: the recorded fixtures fail two verdicts."""
    return make_run(root, run_id=run_id)


def nothing_judged_run(root: Path, run_id: str = "run-1") -> Path:
    """Records exist, but run.json names no workload of any criterion's kind."""
    run = make_run(root, run_id=run_id,
                   benches=(("baseline", "high_overlap"), ("cached", "high_overlap")),
                   renames={"high_overlap": "my_prompts"})
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = []
    (run / "run.json").write_text(json.dumps(data))
    return run


def incomplete_run(root: Path, run_id: str = "run-1") -> Path:
    run = passing_run(root, run_id)
    RunLayout(root, run_id).write_failure(FailureRecord(
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


def seg_sweep(root: Path, *makers: Callable[[Path, str], Path]) -> Path:
    """A segment-size sweep whose point ``seg<512 * k>`` is the run ``makers[k - 1]``
    writes."""
    run = root / "sweep-run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "sweep-run", "schema_version": 1}))
    for k, maker in enumerate(makers, 1):
        maker(run / "sweep", f"seg{512 * k}")
    return run


def kv_sweep(root: Path, *predicted: float, workload: str = "high_overlap",
             failed: bool = False, baseline_only: bool = False) -> Path:
    """A KV-capacity sweep, one point per prediction of the cached ``workload`` bench's
    hit ratio (the high-overlap fixture measured 67.5%; sustained_c4 runs at concurrency
    4, and its record does not say at which concurrency the prediction was made);
    ``failed``: the first point also has a bench without a result; ``baseline_only``: one
    point that ran no cached bench."""
    run = root / "kv-run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": "kv-run", "schema_version": 1}))
    for k, ratio in enumerate(predicted, 1):
        make_run(run / "sweep", ("host-a",), run_id=f"kv{100 * k}",
                 benches=(("cached", workload),),
                 expected=lambda *_, r=ratio: {"served_ratio": r})
    if failed:
        RunLayout(run / "sweep", "kv100").write_failure(FailureRecord(
            key=ResultKey("host-a", "cached", "high_overlap", 2), seed=0,
            bundle_version="0.1.0", started_at="t0", ended_at="t1", error="timed out",
            returncode=None))
    if baseline_only:
        make_run(run / "sweep", ("host-a",), run_id="kv100",
                 benches=(("baseline", "high_overlap"),))
    return run


def unreadable(sweep_run: Path) -> Path:
    """The sweep's own run.json is not JSON: an input error, one line."""
    (sweep_run / "run.json").write_text("{")
    return sweep_run


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
    (0, SEG): lambda t: report([str(seg_sweep(t, passing_run))]),
    (2, SEG): lambda t: report([str(unreadable(seg_sweep(t, passing_run)))]),
    (3, SEG): lambda t: report([str(seg_sweep(t, passing_run, failing_run))]),
    (5, SEG): lambda t: report([str(seg_sweep(t, passing_run)), "--upload", "bucket/x"]),
    (6, SEG): lambda t: report([str(seg_sweep(t, passing_run, inconclusive_run))]),
    (7, SEG): lambda t: report([str(seg_sweep(t, incomplete_run, inconclusive_run))]),
    (8, SEG): lambda t: report([str(seg_sweep(t, nothing_judged_run))]),
    (0, KV): lambda t: report([str(kv_sweep(t, 0.665, 0.68))]),
    (2, KV): lambda t: report([str(unreadable(kv_sweep(t, 0.665)))]),
    (3, KV): lambda t: report([str(kv_sweep(t, 0.665, 0.725))]),
    (5, KV): lambda t: report([str(kv_sweep(t, 0.665)), "--upload", "bucket/x"]),
    (6, KV): lambda t: report([str(kv_sweep(t, 0.665, workload="sustained_c4"))]),
    (7, KV): lambda t: report([str(kv_sweep(t, 0.665, failed=True))]),
    (8, KV): lambda t: report([str(kv_sweep(t, baseline_only=True))]),
}


def test_the_table_and_the_code_agree() -> None:
    rows = doc_rows()
    assert {c for c, _ in rows} == set(EXIT_MEANINGS) - {1}, "a documented code per meaning"
    assert set(rows) == set(SCENARIOS), "every documented row has a scenario, and no more"


@pytest.mark.parametrize("row", sorted(SCENARIOS), ids=lambda r: f"{r[1]}-{r[0]}")
def test_each_row_is_reached(row: tuple[int, str], tmp_path: Path) -> None:
    code, printed = SCENARIOS[row](tmp_path)
    assert code == row[0], printed
    if row[1] != "run" and code != 2:
        last = printed.strip().splitlines()[-1]
        assert last.startswith("overall: ") and last.endswith(
            f"exit {code} ({EXIT_MEANINGS[code]})"), last
    if row[1] in (SEG, KV) and code not in (2, 5):
        # prefixbench run of a sweep reads the summary.json report wrote: the same code.
        run_dir = next(p for p in tmp_path.iterdir() if p.name.endswith("-run"))
        summary = json.loads(RunLayout.of(run_dir).summary_path.read_text())
        assert summary_outcome(summary) == code, summary


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


@pytest.mark.parametrize("kind", [SEG, KV])
def test_the_playbooks_gate_fails_a_sweep_as_it_fails_a_run(kind: str, tmp_path: Path) -> None:
    """``prefixbench_fail_on`` gates a sweep's points: a bench without a result
    (``failed_bench``, the default), an INCONCLUSIVE verdict (``inconclusive``)."""
    from prefixbench.report.phase import gate, report_run  # noqa: PLC0415

    incomplete = (seg_sweep(tmp_path, incomplete_run) if kind == SEG
                  else kv_sweep(tmp_path, 0.665, failed=True))
    shown = report_run(incomplete)
    assert "1 bench(es) without a result" in gate(shown, ["fail", "failed_bench"])
    assert any(line.startswith("failed: ") and "timed out" in line for line in shown["lines"])
    undecided = tmp_path / "undecided"
    shown = report_run(seg_sweep(undecided, inconclusive_run) if kind == SEG
                       else kv_sweep(undecided, 0.665, workload="sustained_c4"))
    assert shown["status"] == "INCONCLUSIVE"
    assert "INCONCLUSIVE: " in gate(shown, ["inconclusive"])
    assert gate(shown, ["fail", "failed_bench"]) == ""
