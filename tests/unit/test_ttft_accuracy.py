"""The TTFT accuracy benchmark's figures (prefixbench.report.ttft_accuracy and
``make bench-ttft-accuracy``) on a run of the recorded fixture benches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_runs import BENCHES, make_run

from prefixbench.report.load import load_run
from prefixbench.report.ttft_accuracy import accuracy, render_text
from prefixbench_perf import ttft_accuracy as bench

SEQS, CHUNK = 4, 1024  # the recorded server (fixtures README)


def _server(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
    return {"max_num_seqs": SEQS, "max_num_batched_tokens": CHUNK}


def _loads(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
    # others' share of the machine while each bench ran: the two baselines at
    # concurrency 1 0.10 and 0.30 (mean 0.20), the cached benches 0.25/0.35/0.60
    share = {("baseline", "high_overlap"): 0.10, ("baseline", "no_overlap"): 0.30,
             ("baseline", "sustained_c4"): 0.90, ("cached", "high_overlap"): 0.25,
             ("cached", "no_overlap"): 0.35, ("cached", "sustained_c4"): 0.60}[(conf, wl)]
    return {"host_load": {"other_share": share}}


def test_each_row_carries_the_machines_load_and_the_goal_is_counted(tmp_path: Path) -> None:
    run = make_run(tmp_path, ("host-a",), expected=_server, extras=_loads,
                   benches=(*BENCHES, ("baseline", "sustained_c4")))
    acc = accuracy(load_run(run))
    by = {r.row.workload: r for r in acc.rows}
    assert list(by) == ["high_overlap", "no_overlap", "sustained_c4"]
    # the fit saw the baselines at concurrency 1 only (the c=4 one's 0.90 is left out)
    assert [r.baseline_load for r in acc.rows] == pytest.approx([0.20] * 3)
    assert by["sustained_c4"].cached_load == 0.60
    assert by["sustained_c4"].load_gap == pytest.approx(0.40)
    # docs/performance.md: the recorded runs' medians within 10% of the prediction; the
    # high_overlap p99 is its server's first request (shown, not judged)
    assert acc.medians_within == 3
    assert [r.row.workload for r in acc.judged_p99s] == ["no_overlap", "sustained_c4"]
    text = render_text(acc)
    assert "median within 10% on 3 of 3" in text
    assert "p99 within 25% on 2 of 2 judged" in text
    assert "0.20 / 0.60" in text


def test_a_tighter_goal_counts_fewer(tmp_path: Path) -> None:
    run = make_run(tmp_path, ("host-a",), expected=_server, extras=_loads)
    acc = accuracy(load_run(run), goal_median=0.001, goal_p99=0.001)
    assert acc.medians_within < 3 and acc.p99s_within < 2


def test_the_benchmark_prints_the_figures_and_refuses_a_run_without_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "a", ("host-a",), expected=_server, extras=_loads)
    assert bench.main([str(run)]) == 0
    assert "goal: median within 10% on 3 of 3" in capsys.readouterr().out
    # without the server's settings no prediction can be made: exit 2, one line
    bare = make_run(tmp_path / "b", ("host-a",))
    assert bench.main([str(bare)]) == 2
    err = capsys.readouterr().err
    assert "no TTFT prediction" in err and len(err.strip().splitlines()) == 1
