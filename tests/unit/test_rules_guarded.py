"""Every verdict rule guarded: the cases a mutation of each rule breaks, where the outcome
tests (test_verdict_outcomes, test_hostload, test_goodput, test_capacity_concurrency)
left a comparison flipped or a branch dropped unnoticed. Each test names the rule."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from report_runs import BENCHES, make_run, scale_times

from prefixbench.measure.records import with_checksum
from prefixbench.measure.stats import RatioInterval
from prefixbench.report import build_summary
from prefixbench.report.bench_model import Agg, BenchSummary
from prefixbench.report.goodput import GoodputRow, _no_uplift
from prefixbench.report.model import Verdict
from prefixbench.report.verdicts import decide, hit_rate
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, PASS, Thresholds

WITH_BASELINE_LOAD = (*BENCHES, ("baseline", "sustained_c4"))


def _iv(low: float, high: float) -> RatioInterval:
    return RatioInterval(estimate=(low + high) / 2, low=low, high=high, confidence=0.95,
                         repetitions=3, pairs=150)


def _verdict(run: Path, name: str) -> Verdict:
    return next(v for v in build_summary(run).host("host-a").verdicts if v.name == name)


# -- decide: the interval against the limit --------------------------------------------

def test_an_interval_ending_on_the_limit_passes_and_one_starting_on_it_is_undecided(
        ) -> None:
    """The rule as printed: PASS when the interval lies AT or below the limit, FAIL when
    it lies ABOVE (an interval starting on the limit is not above it)."""
    assert decide(_iv(0.80, 0.90), 0.90) == PASS
    assert decide(_iv(0.90, 1.00), 0.90) == INCONCLUSIVE
    assert decide(_iv(0.9001, 1.00), 0.90) == FAIL


# -- timing verdicts without per-request TTFTs ------------------------------------------

def test_without_per_request_ttfts_no_timing_verdict_is_decided(tmp_path: Path) -> None:
    run = make_run(tmp_path, ttfts=False)  # the recorded files keep latencies only
    for name in ("high_overlap_ttft_lower", "no_overlap_no_regression"):
        v = _verdict(run, name)
        assert v.status == INCONCLUSIVE, (name, v.detail)
        assert "no per-request TTFTs on both servers" in v.detail


# -- the hit rate: every signal, and none ------------------------------------------------

@dataclass
class _Host:
    """A test double of one host's benches by role (prefixbench.report.verdicts.RoleView)."""

    benches: dict[tuple[str, str], BenchSummary]
    roles: dict[str, str] = field(default_factory=lambda: {"high_overlap": "high_overlap"})

    def role(self, configuration: str, role: str) -> BenchSummary | None:
        return self.benches.get((configuration, self.roles.get(role, role)))


@pytest.fixture(scope="module")
def cached_high(tmp_path_factory: pytest.TempPathFactory) -> BenchSummary:
    b = build_summary(make_run(tmp_path_factory.mktemp("hit"))).host("host-a").bench(
        "cached", "high_overlap")
    assert b is not None and b.hit_ratio_queries is not None
    return b


def test_the_second_signal_is_judged_too(cached_high: BenchSummary) -> None:
    """hits/queries as expected but cache_hit/(hit+compute) far off: FAIL."""
    off = dataclasses.replace(cached_high, hit_ratio_by_source=Agg((0.30,)))
    v = hit_rate(_Host({("cached", "high_overlap"): off}), Thresholds())
    assert v.status == FAIL, v.detail
    assert "high_overlap by_source 30.00% vs expected 67.50% (-37.50 pp)" in v.detail


def test_no_hit_rate_signal_is_no_verdict(cached_high: BenchSummary) -> None:
    blind = dataclasses.replace(cached_high, hit_ratio_queries=None, hit_ratio_by_source=None)
    v = hit_rate(_Host({("cached", "high_overlap"): blind}), Thresholds())
    assert v.status == INCONCLUSIVE and "no hit-rate signal in the metrics" in v.detail


# -- benefit under load: a drop FAILs only when every repetition shows it ---------------

def _set_rate(run: Path, workload: str, rate: float) -> None:
    data = json.loads((run / "run.json").read_text())
    for w in data["workloads"]:
        if w["name"] == workload:
            w["request_rate"] = rate
    (run / "run.json").write_text(json.dumps(data))
    for path in run.glob(f"*/*/{workload}/rep*.json"):
        record = json.loads(path.read_text())
        record["workload"]["request_rate"] = rate
        record["bench"]["request_rate"] = rate
        path.write_text(json.dumps(with_checksum(record)))


@pytest.mark.parametrize("even", ["cached", "baseline"])
def test_a_drop_one_repetition_does_not_show_is_not_decided(tmp_path: Path, even: str
                                                            ) -> None:
    """Baseline slower in TTFT but 1.5x the cached throughput, except in repetition 3
    where the two match (cached up, or baseline down): the median drops below 0.95x,
    but not every repetition does (the best cached repetition is not below the bound of
    the worst baseline one)."""
    def load(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        if wl != "sustained_c4":
            return b
        if conf == "cached":
            up = 1.5 if rep == 3 and even == "cached" else 1.0
            return {**b, "output_throughput": b["output_throughput"] * up}
        out = scale_times(b, 1.6)
        down = 1.0 if rep == 3 and even == "baseline" else 1.5
        out["output_throughput"] = b["output_throughput"] * down
        return out

    run = make_run(tmp_path, benches=WITH_BASELINE_LOAD, transform=load, repetitions=3)
    _set_rate(run, "sustained_c4", 8.0)
    v = _verdict(run, "sustained_benefit_preserved")
    assert v.status == INCONCLUSIVE, v.detail
    assert "(0.67x) < 0.95x" in v.detail


# -- unequal load: either way, and only on a decided verdict ----------------------------

def _loads(baseline: float, cached: float):  # type: ignore[no-untyped-def]
    def extra(host: str, conf: str, workload: str, rep: int) -> dict[str, Any]:
        return {"host_load": {"other_share": baseline if conf == "baseline" else cached}}
    return extra


def test_unequal_load_either_way_undecides(tmp_path: Path) -> None:
    """Others busier during the BASELINE runs (45% vs 2%) undecide a PASS as much as the
    other way round."""
    v = _verdict(make_run(tmp_path, extras=_loads(0.45, 0.02)), "high_overlap_ttft_lower")
    assert v.status == INCONCLUSIVE, v.detail
    assert "not decided (PASS on these figures): others used 45%" in v.detail


def test_unequal_load_leaves_an_undecided_verdict_as_it_was(tmp_path: Path) -> None:
    """The recorded no-overlap verdict is INCONCLUSIVE on its own figures: unequal load
    adds no 'not decided (... on these figures)' claim to it."""
    v = _verdict(make_run(tmp_path, extras=_loads(0.02, 0.45)), "no_overlap_no_regression")
    assert v.status == INCONCLUSIVE and "not decided" not in v.detail, v.detail


# -- no regression: a faster cached server is said to be no regression -----------------

def test_a_much_faster_cached_no_overlap_run_says_why_it_is_no_regression(
        tmp_path: Path) -> None:
    def fast(host: str, conf: str, wl: str, rep: int, b: dict[str, Any]) -> dict[str, Any]:
        return scale_times(b, 0.5) if (conf, wl) == ("cached", "no_overlap") else b

    v = _verdict(make_run(tmp_path, transform=fast), "no_overlap_no_regression")
    assert v.status == PASS, v.detail
    assert "cached is faster, which is no regression" in v.detail


# -- goodput: no uplift without reuse ----------------------------------------------------

def _row(baseline_index: int, cached_index: int) -> GoodputRow:
    return GoodputRow(workload="no_overlap", role="no_overlap", rungs=(),
                      baseline_rate=None, cached_rate=None, baseline_index=baseline_index,
                      cached_index=cached_index, rates=(1.0, 2.0, 4.0, 8.0))


@pytest.mark.parametrize(("baseline", "cached", "status"), [
    (2, 1, PASS), (2, 2, PASS), (1, 2, INCONCLUSIVE), (0, 2, FAIL), (-1, -1, INCONCLUSIVE),
    (-1, 0, INCONCLUSIVE),
])
def test_no_uplift_rung_by_rung(baseline: int, cached: int, status: str) -> None:
    """Cached at or below baseline's rung: PASS; one rung above (the ladder's resolution):
    INCONCLUSIVE; two or more: FAIL; neither meeting the lowest rate: INCONCLUSIVE."""
    got, why = _no_uplift([_row(baseline, cached)])
    assert got == status, why


# -- the capacity curve: nothing to compare is no verdict -------------------------------

def test_a_capacity_point_without_a_measurement_or_a_prediction_is_no_verdict() -> None:
    from prefixbench.report.capacity_verdict import judge  # noqa: PLC0415

    status, why = judge(None, 0.50, concurrency=1, note=None, max_diff=0.01)
    assert status == INCONCLUSIVE and "no measured hit ratio" in why
    status, why = judge(0.50, None, concurrency=1, note="no tokenizer", max_diff=0.01)
    assert status == INCONCLUSIVE and "no prediction (no tokenizer)" in why


def test_a_rung_exactly_on_the_target_is_met(cached_high: BenchSummary) -> None:
    """The ladder's target reads 'p90 TTFT <= 100 ms': a p90 of 100 ms meets it."""
    from prefixbench.bench.goodput import Ladder  # noqa: PLC0415
    from prefixbench.report.goodput import rung_of  # noqa: PLC0415

    ladder = Ladder(ttft_ms=100.0, percentile=90.0, rates=(1.0,), workloads=("x",))
    on = dataclasses.replace(cached_high, per_request_ms=(100.0,) * 10, failed=0)
    assert rung_of(1.0, on, ladder).met is True
    over = dataclasses.replace(on, per_request_ms=(100.5,) * 10)
    assert rung_of(1.0, over, ladder).met is False


# -- the fleet: each outlier rule on its own, both ways ---------------------------------

def _outliers(name: str, values: dict[str, float]) -> dict[str, tuple[str, ...]]:
    from prefixbench.report.fleet import _fleet_metric  # noqa: PLC0415

    m = _fleet_metric(name, values, Thresholds())
    return {o.host: tuple(r.split(" (")[0].split("% from")[0] for r in o.reasons)
            for o in m.outliers}


def test_a_robust_z_outlier_is_flagged_below_the_median_too() -> None:
    """Hit ratios are judged by robust z alone: one host far below the others."""
    got = _outliers("cached/x/hit_ratio", {"a": 0.60, "b": 0.601, "c": 0.599, "d": 0.30})
    assert list(got) == ["d"] and got["d"][0].startswith("robust z -"), got


def test_a_host_far_from_the_median_is_flagged_either_side() -> None:
    """Three hosts 100, 150, 200 ms: robust z +-0.67 flags none, 33% from the median
    flags both ends (a host faster than the rest is as suspect as a slower one)."""
    got = _outliers("cached/x/median_ttft_ms", {"a": 100.0, "b": 150.0, "c": 200.0})
    assert sorted(got) == ["a", "c"], got
    assert got["a"] == ("-33",) and got["c"] == ("+33",)


def test_hit_ratios_have_no_relative_outliers_and_two_hosts_no_outliers() -> None:
    assert _outliers("cached/x/hit_ratio", {"a": 0.3, "b": 0.5, "c": 0.7}) == {}
    from prefixbench.report.fleet import _fleet_metric  # noqa: PLC0415

    two = _fleet_metric("cached/x/median_ttft_ms", {"a": 100.0, "b": 300.0}, Thresholds())
    assert two.outliers == () and set(two.robust_z.values()) == {0.0}


def test_a_hit_ratio_departure_below_its_expectation_is_listed(tmp_path: Path) -> None:
    run = make_run(tmp_path, ("host-a", "host-b", "host-c"))
    def high(deps: Any) -> set[tuple[str, str]]:
        return {(d.host, d.signal) for d in deps if d.workload == "high_overlap"}

    assert high(build_summary(run).fleet.hit_departures) == set()  # as expected
    for path in run.glob("host-b/cached/high_overlap/rep*.json"):
        record = json.loads(path.read_text())
        record["measured"].update(hit_ratio_queries=0.10, hit_ratio_by_source=0.10)
        path.write_text(json.dumps(with_checksum(record)))
    assert high(build_summary(run).fleet.hit_departures) == {
        ("host-b", "queries"), ("host-b", "by_source")}


def test_spread_is_judged_within_each_instance_family(tmp_path: Path) -> None:
    from report_runs import fingerprint  # noqa: PLC0415

    fps = {"a": fingerprint("a"), "b": fingerprint("b"),
           "c": fingerprint("c", instance_type="trn3.48xlarge", family="trn3")}
    s = build_summary(make_run(tmp_path, tuple(fps), fingerprints=fps))
    # Metric names carry the cohort: here its instance type, trn2's and trn3's.
    names = {m.name.split(": ")[0] for m in s.fleet.metrics}
    assert names == {"trn2.48xlarge", "trn3.48xlarge"}, names
