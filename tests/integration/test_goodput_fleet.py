"""The goodput ladder on the simulated fleet: one host, both configurations, two rates.

Every rung's TTFT percentile is the one its own result JSON gives, each configuration's
goodput rate follows from its rungs, the high-overlap workload is served at a rate at
least as high with caching, the no-overlap workload shows no uplift beyond the ladder's
resolution, and the rungs leave the tutorial's criteria to the tutorial's workloads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prefixbench.measure.stats import percentile
from prefixbench_sim.testing import SimFleetHandle
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

RUN_ID = "integration-goodput"
RATES = [15.0, 120.0]
TARGET_MS = 200.0


def test_goodput_ladder_on_one_host(sim_fleet: SimFleetHandle, sim_artifacts: Path,
                                    repo_root: Path, ansible_env: dict[str, str]) -> None:
    host = sim_fleet.hosts[0]
    run_dir = repo_root / "results" / RUN_ID
    shutil.rmtree(run_dir, ignore_errors=True)
    proc, seconds = playbook(
        repo_root, ansible_env, "benchmark.yml", "--skip-tags", "provision",
        "--limit", host.name, "-e", "@tests/integration/vars/goodput.yml",
        "-e", f"prefixbench_run_id={RUN_ID}", timeout=2400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    print(f"goodput ladder, 2 workloads x {len(RATES)} rates x 2 configurations: "
          f"{seconds:.0f} s")

    summary = json.loads((run_dir / "summary.json").read_text())
    (h,) = summary["hosts"]
    g = h["goodput"]
    assert g["ladder"] == {"ttft_ms": TARGET_MS, "percentile": 90.0, "rates": RATES,
                           "workloads": ["high_overlap", "no_overlap"]}
    rows = {r["workload"]: r for r in g["rows"]}
    assert sorted(rows) == ["high_overlap", "no_overlap"]
    for name, row in rows.items():
        assert len(row["rungs"]) == 2 * len(RATES), row
        for rung in row["rungs"]:
            rate, conf = rung["rate"], rung["configuration"]
            path = (run_dir / host.name / conf / f"{name}.rate{rate:g}" / "rep1.json")
            record = json.loads(path.read_text())
            bench = record.get("record", record)["bench"]
            assert bench["request_rate"] == rate, path  # the rung ran at its rate
            p90 = percentile([t * 1000 for t in bench["ttfts"]], 90)
            assert rung["ttft_ms"] == pytest.approx(p90), (path, rung)
            assert rung["met"] is (rung["failed"] == 0 and p90 <= TARGET_MS), rung
            print(f"{name} {conf} {rate:g} req/s: p90 TTFT {p90:.1f} ms, hit ratio "
                  f"{rung['hit_ratio']}")
        for conf in ("baseline", "cached"):
            met = {r["rate"]: r["met"] for r in row["rungs"] if r["configuration"] == conf}
            expected = None
            for rate in RATES:
                if not met[rate]:
                    break
                expected = rate
            assert row[f"{conf}_rate"] == expected, (name, conf, met, row)
    high, no = rows["high_overlap"], rows["no_overlap"]
    print(f"goodput: high_overlap {high['baseline_rate']} -> {high['cached_rate']} req/s, "
          f"no_overlap {no['baseline_rate']} -> {no['cached_rate']} req/s; "
          f"{g['no_overlap_no_uplift']}; break-even {g['break_even']}")
    # Caching's 60-70% hits more than halve the prefill.
    assert high["hit_ratio"] > 0.5, high
    # Which server is faster, and which meets the target, is a measurement of this busy
    # 2-core machine, not a property of the code: no order is asserted. Two CI runs:
    # cached against baseline p90 TTFT 72.2 vs 70.6 ms at 15 req/s and 365 vs 499 ms at
    # 120; then 87.8 vs 221.2 ms and 503.4 vs 475.2 ms. The rungs above hold each
    # verdict to its own figures; the report's numbers are what a user reads.
    # Nothing to reuse on no-overlap: no uplift beyond the ladder's resolution.
    assert all(r["hit_ratio"] == 0 for r in no["rungs"] if r["configuration"] == "cached")
    assert g["no_overlap_no_uplift"]["status"] in ("PASS", "INCONCLUSIVE"), g
    assert g["break_even"] is not None and g["break_even"]["saving_ms"] > 0, g
    # The rungs serve none of the tutorial's criteria.
    assert h["roles"] == {"high_overlap": "high_overlap", "no_overlap": "no_overlap"}, h["roles"]
    # A crafted cause, on the way: high_overlap's 1104-token prefix ends half a block in,
    # and the shared half block is never reused. The concurrency-1 run names it.
    causes = {c["code"]: c["points"] for c in h["shortfalls"]["high_overlap"]}
    assert causes.get("partial_block", 0) < 0, causes
    md = (run_dir / "report.md").read_text()
    assert "### Benefit at a latency target (goodput)" in md
    assert "high_overlap: highest rate within p90 TTFT <= 200 ms: baseline " in md
