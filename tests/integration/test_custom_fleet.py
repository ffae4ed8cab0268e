"""Your own traffic on the simulated fleet: a chat application's prompts (plain prompts and
growing chat conversations) replayed through vLLM's custom dataset on both servers, and
the what-if analyzer's prediction checked against the measured hit ratio (within 1 pp);
in the same run, the product's multi-turn chat traffic (prefixbench chat-traffic) sent in
file order, checked the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.side_by_side import SideBySide

from prefixbench_sim.layout import SimHost
from prefixbench_sim.testing import SimFleetHandle

pytestmark = pytest.mark.integration

RUN_ID = "integration-custom"


def test_custom_prompts_prediction_within_one_point(
        sim_fleet: SimFleetHandle, dlami_host: SimHost, side_by_side: SideBySide,
        repo_root: Path) -> None:
    # The run (helpers/side_by_side.py): the two prompt files as workloads, one host.
    run = side_by_side["custom"]
    host = sim_fleet.host(run.host)
    lines, turn_lines = run.info["lines"], run.info["turn_lines"]
    run_dir = repo_root / "results" / RUN_ID
    proc, seconds = run.result()
    out = proc.stdout
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

    # The host is the DLAMI-flavoured one: it ran both servers from its adopted venv
    # (provisioning is skipped here, so the units must have found it by themselves), and
    # its service user can open devices under the neuron group rule.
    assert host == dlami_host
    unit = sim_fleet.sh(host, "systemctl cat vllm-cached.service")
    assert "ExecStart=/opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0/bin/vllm" \
        in unit, unit
    assert "neuron" in sim_fleet.sh(host, "id -nG vllm").split()
