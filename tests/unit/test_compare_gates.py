"""``prefixbench compare`` gates what its docstrings promise: the fleet's figures against the
reference's, the tolerance file's defaults and scope, each metric's direction and the
tolerance rule ``max(rel x |reference|, abs)`` (report/tolerances.py's docstring).

Expected figures are the recorded fixture benches (tests/fixtures/vllm-cpu-seed-procedure)
and the rule worked by hand, never compare's own output."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from report_runs import fixture_bench, make_run, scale_times

from prefixbench.measure.records import ResultKey
from prefixbench.report.compare import (
    Gap,
    MetricComparison,
    _fleet_items,
    _items,
    _judge,
    compare,
)
from prefixbench.report.tolerances import (
    Tolerance,
    ToleranceError,
    Tolerances,
    load_tolerances,
)

HOSTS = ("host-a", "host-b")
TTFT = "cached/high_overlap/median_ttft_ms"
THROUGHPUT = "cached/high_overlap/output_throughput"


def _run(tmp_path: Path, run_id: str, **kw: Any) -> Path:
    return make_run(tmp_path / run_id, kw.pop("hosts", HOSTS), run_id=run_id, **kw)


def _slower(factor: float) -> Any:
    def transform(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        return scale_times(b, factor)
    return transform


def _tolerances(tmp_path: Path, text: str) -> Tolerances:
    path = tmp_path / "tolerances.yml"
    path.write_text(text, encoding="utf-8")
    return load_tolerances(path)


def _by_label(items: tuple[MetricComparison, ...]) -> dict[str, MetricComparison]:
    return {i.label: i for i in items}


def test_a_fleet_twice_as_slow_fails_the_fleet_gate(tmp_path: Path) -> None:
    """scope: fleet judges the fleet's medians of this run against the reference's."""
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", transform=_slower(2.0))
    result = compare(cur, ref, _tolerances(tmp_path, "scope: fleet\n"))
    assert {i.scope for i in result.items} == {"fleet"}
    items = _by_label(result.items)
    recorded = fixture_bench("cached", "high_overlap")
    ttft = items[f"fleet:{TTFT}"]
    assert ttft.reference == pytest.approx(recorded["median_ttft_ms"])
    assert ttft.current == pytest.approx(2 * recorded["median_ttft_ms"])
    # 10% of the reference (DEFAULT_TOLERANCES: rel 0.10, abs 1 ms).
    assert ttft.allowed == pytest.approx(0.10 * recorded["median_ttft_ms"])
    assert ttft.status == "regression"
    assert ttft.why.startswith("worse by")
    tput = items[f"fleet:{THROUGHPUT}"]
    assert tput.reference == pytest.approx(recorded["output_throughput"])
    assert tput.current == pytest.approx(recorded["output_throughput"] / 2)
    assert tput.status == "regression"
    assert not result.ok and result.complete


def test_a_fleet_twice_as_fast_is_an_improvement_not_a_regression(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", transform=_slower(0.5))
    items = _by_label(compare(cur, ref).items)
    for scope in ("fleet", "host-a", "host-b"):
        assert items[f"{scope}:{TTFT}"].status == "improvement"
        assert items[f"{scope}:{THROUGHPUT}"].status == "improvement"
        assert items[f"{scope}:{TTFT}"].why.startswith("better by")


def test_a_tolerance_file_without_scope_gates_the_fleet_and_each_host(tmp_path: Path) -> None:
    tol = _tolerances(tmp_path, "tolerances:\n  median_ttft_ms: {rel: 0.2}\n")
    assert tol.scope == "both"
    ref = _run(tmp_path, "ref")
    result = compare(ref, ref, tol)
    assert {i.scope for i in result.items} == {"fleet", "host-a", "host-b"}
    assert result.ok and result.complete
    hosts_only = compare(ref, ref, _tolerances(tmp_path, "scope: hosts\n"))
    assert {i.scope for i in hosts_only.items} == {"host-a", "host-b"}
    assert Tolerances().scope == "both"


def test_one_host_slower_fails_its_own_gate(tmp_path: Path) -> None:
    def b_slower(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        return scale_times(b, 1.5) if host == "host-b" else b

    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", transform=b_slower)
    items = _by_label(compare(cur, ref, _tolerances(tmp_path, "scope: hosts\n")).items)
    recorded = fixture_bench("cached", "high_overlap")["median_ttft_ms"]
    assert items[f"host-a:{TTFT}"].status == "ok"
    assert items[f"host-a:{TTFT}"].current == pytest.approx(recorded)
    assert items[f"host-b:{TTFT}"].status == "regression"
    assert items[f"host-b:{TTFT}"].current == pytest.approx(1.5 * recorded)
    assert items[f"host-b:{TTFT}"].reference == pytest.approx(recorded)
    assert items[f"host-b:{TTFT}"].delta == pytest.approx(0.5 * recorded)


# The rule worked by hand: allowed = max(rel x |reference|, abs).
@pytest.mark.parametrize(("name", "cur", "ref", "tol", "expected"), [
    # lower is better: reference 100 ms, rel 0.1 -> 10 ms allowed.
    ("c/w/median_ttft_ms", 110.0, 100.0, Tolerance(rel=0.1, abs=1.0), ("ok", 10.0)),
    ("c/w/median_ttft_ms", 110.5, 100.0, Tolerance(rel=0.1, abs=1.0), ("regression", 10.0)),
    ("c/w/median_ttft_ms", 90.0, 100.0, Tolerance(rel=0.1, abs=1.0), ("ok", 10.0)),
    ("c/w/median_ttft_ms", 89.5, 100.0, Tolerance(rel=0.1, abs=1.0), ("improvement", 10.0)),
    # abs wins when it is the larger: reference 5 ms, 0.5 ms relative, 1 ms absolute.
    ("c/w/median_ttft_ms", 5.9, 5.0, Tolerance(rel=0.1, abs=1.0), ("ok", 1.0)),
    ("c/w/median_ttft_ms", 6.1, 5.0, Tolerance(rel=0.1, abs=1.0), ("regression", 1.0)),
    # higher is better.
    ("c/w/output_throughput", 89.0, 100.0, Tolerance(rel=0.1), ("regression", 10.0)),
    ("c/w/output_throughput", 111.0, 100.0, Tolerance(rel=0.1), ("improvement", 10.0)),
    ("w/ttft_reduction_pct", 34.0, 40.0, Tolerance(abs=5.0), ("regression", 5.0)),
    ("w/ttft_reduction_pct", 46.0, 40.0, Tolerance(abs=5.0), ("improvement", 5.0)),
    # a negative reference: the rule takes its size (|-40| x 0.1 = 4).
    ("w/ttft_reduction_pct", -45.0, -40.0, Tolerance(rel=0.1), ("regression", 4.0)),
    # the hit ratio counts either way, and is never an improvement.
    ("cached/w/hit_ratio", 0.52, 0.50, Tolerance(abs=0.01), ("regression", 0.01)),
    ("cached/w/hit_ratio", 0.48, 0.50, Tolerance(abs=0.01), ("regression", 0.01)),
    ("cached/w/hit_ratio", 0.505, 0.50, Tolerance(abs=0.01), ("ok", 0.01)),
])
def test_each_metric_is_judged_in_its_own_direction(
        name: str, cur: float, ref: float, tol: Tolerance,
        expected: tuple[str, float]) -> None:
    status, allowed = expected
    got, got_allowed, why = _judge(name, cur, ref, tol)
    assert (got, got_allowed) == (status, pytest.approx(allowed))
    direction = {"median_ttft_ms": "lower is better", "output_throughput": "higher is better",
                 "ttft_reduction_pct": "higher is better", "hit_ratio": "either way counts"}
    assert why.endswith(f"({direction[name.rsplit('/', 1)[-1]]})")
    if status == "regression":
        assert why.startswith("moved by" if name.endswith("hit_ratio") else "worse by")


def test_the_rule_reads_as_it_is_computed() -> None:
    assert Tolerance(rel=0.1, abs=1.0).text(-120.0) == "max(rel 0.1 x 120, abs 1)"
    assert Tolerance(rel=0.1, abs=1.0).allowed(-120.0) == pytest.approx(12.0)
    assert Tolerance(rel=0.1, abs=20.0).allowed(120.0) == 20.0


def test_a_file_overrides_only_what_it_names(tmp_path: Path) -> None:
    tol = _tolerances(tmp_path, "tolerances:\n  median_ttft_ms: {rel: 0.15}\n"
                                "  hit_ratio: {abs: 0.02}\nscope: fleet\n")
    # median_ttft_ms keeps its default abs (1 ms); output_throughput its default rel.
    assert tol.for_metric("cached/w/median_ttft_ms") == Tolerance(rel=0.15, abs=1.0)
    assert tol.for_metric("cached/w/hit_ratio") == Tolerance(abs=0.02)
    assert tol.for_metric("baseline/w/output_throughput") == Tolerance(rel=0.10)
    assert tol.for_metric("w/ttft_reduction_pct") == Tolerance(abs=5.0)
    assert tol.for_metric("w/unknown_kind") == Tolerance()
    assert tol.for_metric("hit_ratio") == Tolerance(abs=0.02)  # a bare kind is its own name
    assert tol.to_dict() == {"scope": "fleet", "tolerances": {
        "hit_ratio": {"rel": 0.0, "abs": 0.02},
        "median_ttft_ms": {"rel": 0.15, "abs": 1.0},
        "output_throughput": {"rel": 0.10, "abs": 0.0},
        "ttft_reduction_pct": {"rel": 0.0, "abs": 5.0}}}
    empty = _tolerances(tmp_path, "")
    assert empty.scope == "both"
    assert empty.for_metric("a/b/median_ttft_ms") == Tolerance(rel=0.10, abs=1.0)


@pytest.mark.parametrize(("text", "message"), [
    ("- 1\n", "expected a mapping with 'tolerances' and/or 'scope'"),
    ("scope: fleet\nextra: 1\nmore: 2\n", "unknown key(s) extra, more"),
    ("tolerances:\n  p99_ttft_ms: {rel: 0.1}\n", "unknown metric 'p99_ttft_ms'; known: "
     "hit_ratio, median_ttft_ms, output_throughput, ttft_reduction_pct"),
    ("tolerances:\n  median_ttft_ms: 0.1\n", "median_ttft_ms must be a mapping with"),
    ("tolerances:\n  median_ttft_ms: {rel: 0.1, max: 2}\n",
     "median_ttft_ms must be a mapping with"),
    ("tolerances:\n  median_ttft_ms: {rel: true}\n", "median_ttft_ms.rel must be a number"),
    ("tolerances:\n  median_ttft_ms: {abs: '3'}\n", "median_ttft_ms.abs must be a number"),
    ("scope: everything\n", "scope must be fleet, hosts or both, got 'everything'"),
    ("tolerances: {\n", "2:1: YAML syntax error"),
])
def test_a_malformed_tolerance_file_is_refused_by_name(tmp_path: Path, text: str,
                                                       message: str) -> None:
    with pytest.raises(ToleranceError) as err:
        _tolerances(tmp_path, text)
    assert str(err.value).startswith(f"{tmp_path / 'tolerances.yml'}:")
    assert message in str(err.value)


def test_zero_and_the_bounds_are_accepted(tmp_path: Path) -> None:
    tol = _tolerances(tmp_path, "tolerances:\n  output_throughput: {rel: 0, abs: 0}\n"
                                "  median_ttft_ms: {abs: 5000}\n")
    assert tol.for_metric("c/w/output_throughput") == Tolerance()
    # median_ttft_ms has no bounded unit: any absolute number of milliseconds.
    assert tol.for_metric("c/w/median_ttft_ms").abs == 5000.0


def test_a_gap_says_which_run_lacks_the_bench_and_why() -> None:
    key = ResultKey("h1", "cached", "high_overlap", 2)
    only_here = Gap(key, None, "no result file")
    assert only_here.label == "h1 cached/high_overlap rep2"
    assert only_here.line() == ("MISSING DATA: h1 cached/high_overlap rep2: in this run only; "
                                "the reference: no result file")
    assert not only_here.rejected
    only_there = Gap(key, "result rejected, checksum mismatch [x]", None)
    assert only_there.line() == ("MISSING DATA: h1 cached/high_overlap rep2: in the reference "
                                 "only; this run: result rejected, checksum mismatch [x]")
    assert only_there.rejected
    neither = Gap(key, "a", "b")
    assert neither.line() == ("MISSING DATA: h1 cached/high_overlap rep2: in neither run; "
                              "this run: a; the reference: b")
    assert neither.to_dict() == {"host": "h1", "configuration": "cached",
                                 "workload": "high_overlap", "repetition": 2,
                                 "run": "a", "reference": "b"}


def test_a_metric_line_and_record() -> None:
    item = MetricComparison("fleet", "c/w/median_ttft_ms", 120.0, 100.0, 10.0,
                            "regression", "worse by 20")
    assert item.line() == "REGRESSION: fleet:c/w/median_ttft_ms: 100 -> 120: worse by 20"
    assert item.to_dict() == {"scope": "fleet", "name": "c/w/median_ttft_ms",
                              "current": 120.0, "reference": 100.0, "delta": 20.0,
                              "allowed": 10.0, "status": "regression", "why": "worse by 20"}
    missing = MetricComparison("h1", "c/w/hit_ratio", None, 0.5, None, "missing")
    assert missing.delta is None
    assert missing.line() == "MISSING: h1:c/w/hit_ratio: 0.5 -> n/a: "
    assert MetricComparison("h1", "n", 1.0, None, None, "missing").line() == \
        "MISSING: h1:n: n/a -> 1: "


def test_the_comparison_record_lists_regressions_missing_and_gaps(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur", transform=_slower(2.0), hosts=("host-a",))
    result = compare(cur, ref, _tolerances(tmp_path, "scope: hosts\n"))
    saved = result.to_dict()
    assert saved["schema_version"] == 1
    assert (saved["run_id"], saved["reference_run_id"]) == ("cur", "ref")
    assert saved["tolerances"]["scope"] == "hosts"
    assert f"host-a:{TTFT}" in saved["regressions"]
    assert saved["regressions"] == [i.label for i in result.items if i.status == "regression"]
    assert saved["missing"] == []
    # host-b ran in the reference only: each of its benches is missing data.
    assert {g["host"] for g in saved["missing_data"]} == {"host-b"}
    assert all(g["run"] == "the host is not in this run" for g in saved["missing_data"])
    assert len(saved["items"]) == len(result.items)
    assert not result.complete and not result.ok
    assert result.rejected == []
    assert "host-a's median over rep 1, in both runs" in result.items[0].why


def test_the_fleet_median_is_over_the_hosts_with_the_figure_in_both_runs() -> None:
    ttft, tput = "c/w/median_ttft_ms", "c/w/output_throughput"
    later = "d/w/median_ttft_ms"  # sorted after the missing one: still judged
    cur = {"h1": {ttft: 10.0, later: 4.0}, "h2": {ttft: 30.0},
           "h3": {ttft: 1000.0, tput: 5.0}}
    ref = {"h1": {ttft: 10.0, tput: 6.0, later: 4.0}, "h2": {ttft: 30.0}, "h4": {ttft: 1.0}}
    common = {ResultKey(h, "c", "w", 1) for h in ("h1", "h2")}
    items = {i.name: i for i in _fleet_items(cur, ref, common, Tolerances())}
    # h1 and h2 have TTFT in both runs; h3 is in this run only, h4 in the reference only.
    assert (items[ttft].current, items[ttft].reference, items[ttft].status) == \
        (20.0, 20.0, "ok")
    assert items[ttft].why.endswith(
        "; median over 2 host(s) (h1, h2), rep 1, the same in both runs")
    # Throughput: h3 has it in this run, h1 in the reference: no host in both.
    assert items[tput] == MetricComparison("fleet", tput, None, None, None, "missing",
                                           "no host has this figure in both runs")
    assert list(items) == [ttft, tput, later]
    assert (items[later].current, items[later].status) == (4.0, "ok")


def test_a_host_whose_results_are_all_gone_is_named_as_such(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref")
    cur = _run(tmp_path, "cur")
    for conf in ("baseline", "cached"):
        shutil.rmtree(cur / "host-b" / conf)
    gaps = compare(cur, ref).gaps
    assert gaps and {g.key.host for g in gaps} == {"host-b"}
    assert {g.run_reason for g in gaps} == {
        "no result at all from this host (it dropped out, or its results are gone)"}


def test_a_hosts_figure_in_one_run_only_is_missing_and_says_which() -> None:
    ttft = "c/w/median_ttft_ms"
    c = {ttft: 10.0, "c/w/output_throughput": 5.0}
    r = {ttft: 10.0, "cached/w/hit_ratio": 0.5}
    items = _items("h1", c, r, Tolerances(), "h1's median over rep 1, in both runs")
    assert [i.name for i in items] == ["c/w/median_ttft_ms", "c/w/output_throughput",
                                       "cached/w/hit_ratio"]
    assert (items[0].status, items[0].why.endswith("; h1's median over rep 1, in both runs")) \
        == ("ok", True)
    assert items[0].allowed == 1.0  # max(0.10 x 10 ms, 1 ms)
    assert items[1] == MetricComparison(
        "h1", "c/w/output_throughput", 5.0, None, None, "missing",
        "no value in the reference (its records lack this figure)")
    assert items[2] == MetricComparison(
        "h1", "cached/w/hit_ratio", None, 0.5, None, "missing",
        "no value in this run (its records lack this figure)")


def test_a_bare_or_unknown_kind_is_judged_by_its_name() -> None:
    assert _judge("median_ttft_ms", 89.0, 100.0, Tolerance(rel=0.1))[0] == "improvement"
    # A kind without a direction counts either way.
    status, _, why = _judge("c/w/other_figure", 0.9, 1.0, Tolerance(abs=0.05))
    assert (status, why.startswith("moved by"), why.endswith("(either way counts)")) == \
        ("regression", True, True)
