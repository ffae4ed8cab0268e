"""The machine's other load during a bench (prefixbench.measure.hostload) and what the
verdicts make of it (prefixbench.report.verdicts.unequal_load)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run

from prefixbench.measure.hostload import host_load, parse_cpu_line
from prefixbench.report.build import build_summary
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, PASS

# user nice system idle iowait irq softirq steal guest guest_nice, in ticks of 1/100 s
BEFORE = "cpu  1000 0 500 8000 100 0 0 0 0 0"


def snapshot(busy: int, idle: int, server_s: float, client_s: float) -> dict[str, Any]:
    """A 2-CPU machine whose busy (user) and idle ticks grew by ``busy`` and ``idle``."""
    return {"stat_before": BEFORE, "stat_after":
            f"cpu  {1000 + busy} 0 500 {8000 + idle} 100 0 0 0 0 0",
            "clk_tck": 100, "ncpu": 2, "server_ticks_before": 5000,
            "server_ticks_after": 5000 + int(server_s * 100), "client_cpu_s": client_s}


def test_others_are_what_the_server_and_the_client_did_not_use() -> None:
    # 20 s of wall on 2 CPUs = 40 CPU-s: 30 busy (server 12, client 3, others 15), 10 idle
    load = host_load(snapshot(busy=3000, idle=1000, server_s=12, client_s=3))
    assert load == {"cpu_s": 40.0, "busy_s": 30.0, "server_s": 12.0, "client_s": 3.0,
                    "other_s": 15.0, "ncpu": 2, "other_share": 0.375}
    quiet = host_load(snapshot(busy=1500, idle=2500, server_s=12, client_s=3.5))
    assert quiet is not None and quiet["other_share"] == 0.0  # never below zero
    assert parse_cpu_line("intr 1\ncpu  1 2 3 4\n")["idle"] == 4


@pytest.mark.parametrize("broken", [{}, {"stat_before": "nothing"},
                                    {"server_ticks_after": None}, {"clk_tck": 0}])
def test_a_missing_counter_is_unknown_not_zero(broken: dict[str, Any]) -> None:
    snap = snapshot(busy=3000, idle=1000, server_s=12, client_s=3)
    assert host_load({**snap, **broken} if broken else {}) is None


def loads(baseline: float, cached: float):  # type: ignore[no-untyped-def]
    def extra(host: str, conf: str, workload: str, rep: int) -> dict[str, Any]:
        return {"host_load": {"other_share": baseline if conf == "baseline" else cached}}
    return extra


def test_a_timing_verdict_under_unequal_load_is_no_verdict(tmp_path: Path) -> None:
    even = build_summary(make_run(tmp_path / "even", extras=loads(0.02, 0.05)))
    hi = next(v for v in even.host("host-a").verdicts if v.name == "high_overlap_ttft_lower")
    assert hi.status == PASS
    assert hi.numbers["baseline_other_load"] == 0.02
    assert hi.numbers["cached_other_load"] == 0.05
    uneven = build_summary(make_run(tmp_path / "uneven", extras=loads(0.02, 0.45)))
    verdicts = {v.name: v for v in uneven.host("host-a").verdicts}
    hi = verdicts["high_overlap_ttft_lower"]
    assert hi.status == INCONCLUSIVE
    assert "not decided (PASS on these figures): others used 2% of the machine's CPU " \
        "during the baseline runs and 45% during the cached ones" in hi.detail
    # The hit-rate criterion counts blocks, not time: the load leaves it as it was.
    assert verdicts["hit_rate_matches_expected"].status == FAIL
    # Records without the figures (older runs): nothing changes.
    plain = build_summary(make_run(tmp_path / "plain"))
    hi = next(v for v in plain.host("host-a").verdicts if v.name == "high_overlap_ttft_lower")
    assert hi.status == PASS and "baseline_other_load" not in hi.numbers
