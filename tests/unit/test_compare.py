"""``prefixbench compare`` as a CI gate: record checks, missing data, like-for-like figures,
exit codes, tolerance bounds."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run, scale_times

from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import FailureRecord, ResultKey
from prefixbench.report.cli import compare_main
from prefixbench.report.compare import compare
from prefixbench.report.tolerances import ToleranceError, load_tolerances

HOSTS = ("host-a", "host-b")


def _run(tmp_path: Path, run_id: str, **kw: Any) -> Path:
    return make_run(tmp_path / run_id, kw.pop("hosts", HOSTS), run_id=run_id, **kw)


def _main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = compare_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _fast_b(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
    """host-b twice as fast as host-a, in every bench (so a fleet median moves with the
    hosts it is taken over)."""
    return scale_times(b, 0.5) if host == "host-b" else b


def test_identical_runs_pass(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    code, out, _ = _main(str(ref), str(ref))
    assert code == 0, out
    assert "0 regression(s)" in out and "MISSING" not in out


def test_a_hand_edited_record_is_named_and_exits_7(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur")
    path = cur / "host-a" / "cached" / "high_overlap" / "rep1.json"
    data = json.loads(path.read_text())
    data["bench"]["median_ttft_ms"] = 1.0  # a better number typed in: checksum now wrong
    path.write_text(json.dumps(data))
    code, out, _ = _main(str(cur), str(ref))
    assert code == 7, out
    line = next(x for x in out.splitlines() if x.startswith("MISSING DATA: host-a"))
    assert "cached/high_overlap rep1: in the reference only" in line
    assert "checksum mismatch: edited after it was written" in line
    assert "host-a/cached/high_overlap/rep1.json" in line
    assert "1 rejected by the record checks" in out
    assert "REGRESSION" not in out and "IMPROVEMENT" not in out
    # The same edit in the reference is named too (the checks apply to both runs).
    code, out, _ = _main(str(ref), str(cur))
    assert code == 7 and "in this run only; the reference: result rejected, checksum" in out


def test_one_hosts_cached_results_gone_is_missing_data_not_a_regression(
        tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref", transform=_fast_b)
    cur = _run(tmp_path, "cur", transform=_fast_b)
    shutil.rmtree(cur / "host-b" / "cached")
    code, out, _ = _main(str(cur), str(ref))
    assert code == 7, out
    assert "REGRESSION" not in out and "IMPROVEMENT" not in out, out
    assert "MISSING DATA: host-b cached/high_overlap rep1: in the reference only; " \
           "this run: no result file" in out
    result = compare(cur, ref)
    fleet = {i.name: i for i in result.items if i.scope == "fleet"}
    ttft = fleet["cached/high_overlap/median_ttft_ms"]
    assert ttft.status == "ok" and ttft.current == ttft.reference  # host-a alone, both runs
    assert "median over 1 host(s) (host-a)" in ttft.why
    assert fleet["baseline/high_overlap/median_ttft_ms"].why.count("host-") == 2
    assert not result.regressions and result.gaps


def test_fleet_figures_over_the_same_repetitions_only(tmp_path: Path) -> None:
    def slow_rep2(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        return scale_times(b, 2.0) if rep == 2 else b

    ref = _run(tmp_path, "ref", repetitions=1)
    cur = _run(tmp_path, "cur", repetitions=2, transform=slow_rep2)
    code, out, _ = _main(str(cur), str(ref))
    assert code == 7, out
    assert "REGRESSION" not in out, out  # rep 2 has no counterpart: not compared
    assert "MISSING DATA: host-a baseline/high_overlap rep2: in this run only; " \
           "the reference: no result file" in out


def test_a_regression_says_why_and_missing_data_wins_the_exit_code(tmp_path: Path) -> None:
    def regress(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        return scale_times(b, 1.5) if (host, conf, wl) == ("host-b", "cached", "no_overlap") \
            else b

    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", transform=regress)
    code, out, _ = _main(str(cur), str(ref))
    assert code == 4, out
    line = next(x for x in out.splitlines()
                if x.startswith("REGRESSION: host-b:cached/no_overlap/median_ttft_ms"))
    assert "worse by" in line and "allowed" in line and "max(rel 0.1 x" in line
    assert "lower is better" in line and "in both runs" in line
    # A failed bench in this run on top: exit 7, the regression still listed and in json.
    (cur / "host-a" / "cached" / "sustained_c4" / "rep1.json").unlink()
    RunLayout(tmp_path / "cur", "cur").write_failure(FailureRecord(
        key=ResultKey("host-a", "cached", "sustained_c4", 1), seed=0, bundle_version="0.1.0",
        started_at="t0", ended_at="t1", error="vllm bench serve exited with 1", returncode=1))
    code, out, _ = _main(str(cur), str(ref))
    assert code == 7, out
    assert "REGRESSION: host-b:cached/no_overlap/median_ttft_ms" in out
    assert "this run: vllm bench serve exited with 1 " \
           "[host-a/cached/sustained_c4/rep1.failed.json]" in out
    saved = json.loads((cur / "comparison.json").read_text())
    assert "host-b:cached/no_overlap/median_ttft_ms" in saved["regressions"]
    assert saved["missing_data"][0]["run"].startswith("vllm bench serve exited with 1")


def test_a_host_that_dropped_out_is_missing_data(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", hosts=("host-a",))
    code, out, _ = _main(str(cur), str(ref))
    assert code == 7
    assert "host-b baseline/high_overlap rep1: in the reference only; this run: the host " \
           "is not in this run" in out
    assert "REGRESSION" not in out


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    code, _, err = _main(str(ref), str(tmp_path / "nope"))
    assert code == 2 and err.count("\n") == 1 and "nope: not a directory" in err
    tol = tmp_path / "tol.yml"
    tol.write_text("tolerances:\n  median_ttft_ms: {rel: 15}\n")
    code, _, err = _main(str(ref), str(ref), "--tolerances", str(tol))
    assert code == 2 and err.count("\n") == 1, err
    assert "median_ttft_ms.rel is 15, but relative tolerances are fractions in [0, 1] " \
           "(0.15 is 15%): write 0.15 for 15%" in err


@pytest.mark.parametrize(("text", "message"), [
    ("tolerances:\n  output_throughput: {rel: 1.5}\n", "fractions in [0, 1]"),
    ("tolerances:\n  hit_ratio: {abs: 2}\n", "hit_ratio.abs is 2, above its whole range 1"),
    ("tolerances:\n  ttft_reduction_pct: {abs: 150}\n", "above its whole range 100"),
    ("tolerances:\n  median_ttft_ms: {rel: -0.1}\n", "must be a number >= 0"),
    ("tolerances: [1, 2]\n", "tolerances must be a mapping"),
])
def test_tolerances_out_of_range_are_refused(tmp_path: Path, text: str, message: str) -> None:
    tol = tmp_path / "tol.yml"
    tol.write_text(text)
    with pytest.raises(ToleranceError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_tolerances(tol)


def test_tolerance_bounds_themselves_pass(tmp_path: Path) -> None:
    tol = tmp_path / "tol.yml"
    tol.write_text("tolerances:\n  median_ttft_ms: {rel: 1, abs: 0}\n"
                   "  hit_ratio: {abs: 1}\n  ttft_reduction_pct: {abs: 100, rel: 0}\n")
    t = load_tolerances(tol)
    assert t.for_metric("a/median_ttft_ms").rel == 1.0
    assert t.for_metric("cached/x/hit_ratio").abs == 1.0
