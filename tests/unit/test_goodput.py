"""The goodput ladder: its rungs, and the answer the report gives from them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run

from prefixbench.bench import experiment
from prefixbench.bench.goodput import Ladder, parse_rung, rung_name
from prefixbench.config import settings
from prefixbench.engines.workloads import WorkloadError
from prefixbench.report.bench_model import Agg, BenchSummary
from prefixbench.report.build import build_summary
from prefixbench.report.goodput import Rung, goodput_lines, goodput_of, goodput_rate

BASE: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}


def _settings(**extra: Any) -> dict[str, Any]:
    result = settings.validate({**BASE, **extra}, "h1", extra_names=[*BASE, *extra])
    assert result.ok, result.problems
    return dict(result.settings)


def test_each_goodput_workload_runs_once_per_rate_after_the_others() -> None:
    s = _settings(prefixbench_goodput_ttft_ms=800, prefixbench_goodput_rates=[0.5, 1, 2])
    names = [w.name for w in experiment.workloads_of(s)]
    assert names == ["high_overlap", "no_overlap", "sustained_c4",
                     "high_overlap.rate0.5", "high_overlap.rate1", "high_overlap.rate2",
                     "no_overlap.rate0.5", "no_overlap.rate1", "no_overlap.rate2"]
    rung = experiment.workloads_of(s)[4]
    assert (rung.request_rate, rung.max_concurrency, rung.criterion) == (1.0, None, "none")
    assert rung.prefix_repetition_prefix_len == 3072  # the base workload's prompts
    items = experiment.bench_items(s)
    assert len({i.workload.seed for i in items}) == len(items)  # every rung its own seed
    assert parse_rung(rung_name("high_overlap", 0.5)) == ("high_overlap", 0.5)
    assert parse_rung("high_overlap") is None
    # The tutorial's criteria stay with the tutorial's workloads.
    from prefixbench.bench import criteria  # noqa: PLC0415
    assert criteria.assign(experiment.workloads_of(s)).serving == {
        "high_overlap": "high_overlap", "no_overlap": "no_overlap",
        "sustained": "sustained_c4"}


@pytest.mark.parametrize(("extra", "message"), [
    ({"prefixbench_goodput_ttft_ms": 500}, "needs both"),
    ({"prefixbench_goodput_ttft_ms": 500, "prefixbench_goodput_rates": [2, 1]}, "ascending"),
    ({"prefixbench_goodput_ttft_ms": 500, "prefixbench_goodput_rates": [1],
      "prefixbench_goodput_workloads": ["chat"]}, "not among the run's workloads"),
])
def test_a_bad_ladder_is_refused_in_one_line_by_preflight(extra: dict[str, Any],
                                                           message: str) -> None:
    result = settings.validate({**BASE, **extra}, "h1", extra_names=[*BASE, *extra])
    assert len(result.problems) == 1 and message in result.problems[0], result.problems
    with pytest.raises(WorkloadError, match=message):
        experiment.workloads_of(result.settings)


def _rung(rate: float, met: bool | None, configuration: str = "cached") -> Rung:
    return Rung(rate=rate, configuration=configuration, ttft_ms=1.0, completed=1, failed=0,
                met=met, hit_ratio=None)


def test_the_goodput_rate_is_the_top_of_the_unbroken_run_of_met_rates() -> None:
    rates = (1.0, 2.0, 4.0, 8.0)
    assert goodput_rate([_rung(1, True), _rung(2, True), _rung(4, False), _rung(8, True)],
                        rates) == (2.0, 1)
    assert goodput_rate([_rung(1, False), _rung(2, True)], rates) == (None, -1)
    # A rate without a result ends the run: it is not jumped over.
    assert goodput_rate([_rung(1, True), _rung(4, True)], rates) == (1.0, 0)
    assert goodput_rate([_rung(r, True) for r in rates], rates) == (8.0, 3)


@pytest.fixture
def bench(tmp_path: Path) -> BenchSummary:
    b = build_summary(make_run(tmp_path)).host("host-a").bench("cached", "high_overlap")
    assert b is not None
    return b


def _bench(b: BenchSummary, configuration: str, workload: str, ttfts: list[float],
           failed: int = 0) -> BenchSummary:
    return dataclasses.replace(b, configuration=configuration, workload=workload,
                               per_request_ms=tuple(ttfts), failed=failed,
                               hit_ratio_queries=Agg((0.6,)) if "high" in workload
                               else Agg((0.0,)))


def test_the_report_gives_each_servers_goodput_rate_and_the_uplift(bench: BenchSummary
                                                                    ) -> None:
    ladder = Ladder(ttft_ms=100.0, percentile=90.0, rates=(1.0, 2.0, 4.0),
                    workloads=("high_overlap", "no_overlap"))
    slow, fast, over = [50.0] * 9 + [90.0], [20.0] * 10, [50.0] * 8 + [300.0] * 2
    benches = [
        _bench(bench, "baseline", "high_overlap.rate1", slow),
        _bench(bench, "baseline", "high_overlap.rate2", over),
        _bench(bench, "baseline", "high_overlap.rate4", over),
        _bench(bench, "cached", "high_overlap.rate1", fast),
        _bench(bench, "cached", "high_overlap.rate2", fast),
        _bench(bench, "cached", "high_overlap.rate4", fast),
        _bench(bench, "baseline", "no_overlap.rate1", slow),
        _bench(bench, "baseline", "no_overlap.rate2", slow),
        _bench(bench, "baseline", "no_overlap.rate4", over),
        _bench(bench, "cached", "no_overlap.rate1", slow),
        _bench(bench, "cached", "no_overlap.rate2", slow, failed=1),  # a failure misses
        _bench(bench, "cached", "no_overlap.rate4", fast),
    ]
    # The concurrency-1 runs of the break-even estimate: caching costs 5 ms on no-overlap,
    # and 60% hits save 60 ms (105 -> 45): 1 ms per point, so it pays above 5%.
    for conf, wl, ms in (("baseline", "no_overlap", 100.0), ("cached", "no_overlap", 105.0),
                         ("baseline", "high_overlap", 100.0), ("cached", "high_overlap", 45.0)):
        benches.append(dataclasses.replace(bench, configuration=conf, workload=wl,
                                           median_ttft_ms=Agg((ms,)),
                                           hit_ratio_queries=Agg((0.6,))))
    roles = {"high_overlap": "high_overlap", "no_overlap": "no_overlap"}
    g = goodput_of(benches, ladder, roles)
    assert g is not None
    high, no = g.rows
    assert (high.baseline_rate, high.cached_rate, high.uplift) == (1.0, 4.0, 4.0)
    assert high.hit_ratio == pytest.approx(0.6)
    assert (no.baseline_rate, no.cached_rate) == (2.0, 1.0)
    assert g.no_uplift_status == "PASS"
    rung = next(r for r in high.rungs if r.configuration == "baseline" and r.rate == 1.0)
    assert rung.ttft_ms == pytest.approx(54.0)  # p90 of nine 50s and one 90 (type 7)
    assert g.break_even is not None
    assert g.break_even.hit_ratio == pytest.approx(0.05)
    assert g.break_even.saving_ms == pytest.approx(100.0)
    lines = goodput_lines(g)
    assert lines[0] == ("high_overlap: highest rate within p90 TTFT <= 100 ms: baseline "
                        "1 req/s, cached 4 req/s; uplift 4.00x")
    assert "caching stops paying below a hit ratio of 5.0%" in lines[2]

    # Cached no-overlap two rungs above baseline: nothing to reuse, so something is wrong.
    better = [dataclasses.replace(b, failed=0) if b.workload.startswith("no_overlap.")
              and b.configuration == "cached" else b for b in benches]
    better = [dataclasses.replace(b, per_request_ms=tuple(fast))
              if b.workload.startswith("no_overlap.") and b.configuration == "cached"
              else b for b in better]
    worse = [dataclasses.replace(b, per_request_ms=tuple(over))
             if b.workload.startswith("no_overlap.") and b.configuration == "baseline"
             else b for b in better]
    g2 = goodput_of(worse, ladder, roles)
    assert g2 is not None and g2.no_uplift_status == "FAIL", g2.no_uplift_detail
    assert goodput_of(benches, None, roles) is None


def test_no_break_even_is_claimed_without_a_measured_saving(bench: BenchSummary) -> None:
    ladder = Ladder(ttft_ms=100.0, percentile=90.0, rates=(1.0,),
                    workloads=("no_overlap",))
    benches = [dataclasses.replace(bench, configuration=conf, workload=wl,
                                   median_ttft_ms=Agg((ms,)), hit_ratio_queries=Agg((h,)))
               for conf, wl, ms, h in (("baseline", "no_overlap", 100.0, 0.0),
                                       ("cached", "no_overlap", 104.0, 0.0),
                                       ("cached", "high_overlap", 110.0, 0.6))]
    g = goodput_of(benches, ladder, {"high_overlap": "high_overlap",
                                     "no_overlap": "no_overlap"})
    assert g is not None and g.break_even is not None
    assert g.break_even.hit_ratio is None
    assert g.break_even.line().startswith("break-even hit ratio: not estimated")
    assert g.no_uplift_status == "INCONCLUSIVE"  # no rung measured at all


def test_a_bad_ladder_is_said_once_in_a_sweep() -> None:
    extra = {"prefixbench_goodput_rates": [1.0], "prefixbench_sweep_kv_blocks": [100, 200],
             "vllm_service_block_size": 32}
    result = settings.validate({**BASE, **extra}, "h1", extra_names=[*BASE, *extra])
    assert result.problems == ["h1: the goodput ladder needs both prefixbench_goodput_ttft_ms "
                               "and prefixbench_goodput_rates (or neither)"]
