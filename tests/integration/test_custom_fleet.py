"""Your own traffic on the simulated fleet: a chat application's prompts (plain prompts and
growing chat conversations) replayed through vLLM's custom dataset on both servers, and
the what-if analyzer's prediction checked against the measured hit ratio (within 1 pp);
in the same run, the product's multi-turn chat traffic (prefixbench chat-traffic) sent in
file order, checked the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.custom_prompts import write_chat_traffic, write_multi_turn_chat

from prefixbench.sim.testing import SimFleetHandle
from prefixbench.sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

RUN_ID = "integration-custom"


def test_custom_prompts_prediction_within_one_point(
        sim_fleet: SimFleetHandle, sim_artifacts: Path, repo_root: Path,
        ansible_env: dict[str, str], tmp_path: Path) -> None:
    host = sim_fleet.hosts[0]
    prompts = tmp_path / "chat-traffic.jsonl"
    lines = write_chat_traffic(prompts)
    turns = tmp_path / "multi-turn.jsonl"
    turn_lines = write_multi_turn_chat(turns)
    run_dir = repo_root / "results" / RUN_ID
    shutil.rmtree(run_dir, ignore_errors=True)
    workloads = [{"name": "chat_traffic", "dataset_name": "custom",
                  "dataset_path": str(prompts), "custom_output_len": 8,
                  "max_concurrency": 1},
                 {"name": "chat_turns", "dataset_name": "custom",
                  "dataset_path": str(turns), "custom_output_len": -1,
                  "max_concurrency": 1, "disable_shuffle": True}]
    proc, seconds = playbook(
        repo_root, ansible_env, "benchmark.yml", "--skip-tags", "provision",
        "--limit", host.name, "-e", json.dumps({"prefixbench_workloads": workloads}),
        "-e", f"prefixbench_run_id={RUN_ID}", timeout=2400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    print(f"custom prompts ({lines} lines) on 1 host, both servers: {seconds:.0f} s")

    prepared = run_dir / "prompts" / "chat_traffic.jsonl"
    assert len(prepared.read_text().splitlines()) == lines
    assert (run_dir / "tokenizer" / "tokenizer.json").is_file()
    cached = json.loads((run_dir / host.name / "cached" / "chat_traffic" / "rep1.json")
                        .read_text())
    assert cached["prompts"]["num_prompts"] == lines
    assert cached["prompts"]["chat_lines"] == 6
    assert cached["bench"]["completed"] == lines

    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {(r["configuration"], r["workload"]): r
            for r in summary["hosts"][0]["step9"]}
    row = rows[("cached", "chat_traffic")]
    measured, predicted = row["hit_ratio_queries"], row["predicted"]
    print(f"chat_traffic: measured {measured:.4%}, predicted {predicted:.4%}, "
          f"diff {row['predicted_diff_pp']:+.3f} pp")
    assert measured > 0.3, "the shared system prompts should be served from the cache"
    assert abs(row["predicted_diff_pp"]) <= 1.0
    turn_row = rows[("cached", "chat_turns")]
    assert len((run_dir / "prompts" / "chat_turns.jsonl").read_text().splitlines()) == turn_lines
    print(f"chat_turns ({turn_lines} lines): measured {turn_row['hit_ratio_queries']:.4%}, "
          f"predicted {turn_row['predicted']:.4%}, diff {turn_row['predicted_diff_pp']:+.3f} pp")
    assert turn_row["hit_ratio_queries"] > 0.5, "the histories should be served from the cache"
    assert abs(turn_row["predicted_diff_pp"]) <= 1.0
    # Without prefix caching the server queries nothing (hits/queries is undefined) and
    # every prompt token is computed.
    baseline = rows[("baseline", "chat_traffic")]
    assert baseline["hit_ratio_queries"] is None
    assert baseline["hit_ratio_by_source"] == 0
