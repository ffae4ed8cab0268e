"""The segment-size sweep on the simulated fleet: two segment sizes, one host, end to end.

Each point is a baseline/cached server pair whose units carry the point's
max-num-batched-tokens; the run's report compares the points and names the best; the
inventory's units are back in place afterwards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prefixbench.sim.testing import SimFleetHandle
from prefixbench.sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

RUN_ID = "integration-sweep"


def test_sweep_over_two_segment_sizes(sim_fleet: SimFleetHandle, sim_artifacts: Path,
                                      repo_root: Path, ansible_env: dict[str, str]) -> None:
    host = sim_fleet.hosts[0]
    run_dir = repo_root / "results" / RUN_ID
    shutil.rmtree(run_dir, ignore_errors=True)
    proc, seconds = playbook(
        repo_root, ansible_env, "benchmark.yml", "--skip-tags", "provision",
        "--limit", host.name, "-e", "@tests/integration/vars/sweep.yml",
        "-e", f"prefixbench_run_id={RUN_ID}", timeout=2400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    print(f"sweep of 2 segment sizes on 1 host: {seconds:.0f} s")

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "sweep"
    assert [p["segment_size"] for p in summary["points"]] == [512, 1024]
    assert summary["best"]["segment_size"] in (512, 1024)
    assert "best segment size:" in out
    md = (run_dir / "report.md").read_text()
    assert "## Best segment size" in md

    rows = {(r["segment_size"], r["workload"]): r for r in summary["rows"]}
    for size in (512, 1024):
        point = run_dir / "sweep" / f"seg{size}"
        assert (point / "report.html").is_file()
        for conf in ("baseline", "cached"):
            for wl in ("high_overlap", "no_overlap"):
                assert (point / host.name / conf / wl / "rep1.json").is_file(), (size, conf, wl)
        high = rows[(size, "high_overlap")]
        # 2 prefixes x 5 prompts of 1024 + 512 tokens: 8 warm requests hit 1024 tokens.
        assert high["hit_ratio"] == pytest.approx(high["expected_hit_ratio"], abs=1e-9)
        assert high["expected_hit_ratio"] == pytest.approx(8 * 1024 / (10 * 1536))
        assert rows[(size, "no_overlap")]["hit_ratio"] == 0
        # The point's servers ran with its own max-num-batched-tokens.
        startup = json.loads((point / host.name / "cached" / "startup.json").read_text())
        assert startup, "no startup record"
    fp512 = json.loads((run_dir / "sweep" / "seg512" / host.name / "fingerprint.json")
                       .read_text())
    fp1024 = json.loads((run_dir / "sweep" / "seg1024" / host.name / "fingerprint.json")
                        .read_text())
    assert fp512["units"] != fp1024["units"], "both points ran the same units"

    # Afterwards the host runs the inventory's units again (1024 in the sim inventory).
    unit = sim_fleet.sh(host, "cat /etc/systemd/system/vllm-cached.service")
    assert "--max-num-batched-tokens 1024" in unit
