"""The user's own command lines, run from the repository root."""

from __future__ import annotations

import subprocess
from pathlib import Path


def run(args: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_list_hosts_shows_the_sample_fleet_in_its_groups(
        repo_root: Path, ansible_env: dict[str, str]) -> None:
    out = run(["ansible-inventory", "-i", "trn2_fleet", "--graph"], repo_root, ansible_env)
    assert out.returncode == 0, out.stderr
    graph = out.stdout
    assert "@trn2:" in graph and "@trn3:" in graph
    assert graph.index("trn2-node-01") > graph.index("@trn2:")
    assert graph.index("trn3-node-01") > graph.index("@trn3:")

    listed = run(["ansible-playbook", "benchmark.yml", "-i", "trn2_fleet", "--list-hosts"],
                 repo_root, ansible_env)
    assert listed.returncode == 0, listed.stderr
    for host in ("trn2-node-01", "trn2-node-02", "trn3-node-01"):
        assert host in listed.stdout


def test_preflight_passes_on_the_sample_inventory_without_touching_hosts(
        repo_root: Path, ansible_env: dict[str, str]) -> None:
    # The sample hosts' addresses do not exist: success proves nothing connected.
    out = run(["ansible-playbook", "playbooks/preflight.yml", "-i", "trn2_fleet"], repo_root,
              ansible_env)
    assert out.returncode == 0, out.stdout + out.stderr
    # per host: 2 configurations x 3 workloads, and the baseline's calibration bench
    assert "total: 3 hosts, 21 benches" in out.stdout


def test_bad_setting_stops_the_run_with_one_line_per_problem(
        repo_root: Path, ansible_env: dict[str, str]) -> None:
    out = run(["ansible-playbook", "benchmark.yml", "-i", "trn2_fleet",
               "-e", "vllm_service_max_num_seqs=four", "-e", "vllm_service_prot=8000"],
              repo_root, ansible_env)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "trn2-node-01: vllm_service_max_num_seqs must be an integer, got 'four' (str)" in text
    assert ("trn2-node-01: vllm_service_prot is not a setting of this bundle "
            "- did you mean vllm_service_port?") in text
    assert "Print the plan" not in text


def test_empty_inventory_gets_an_actionable_message(
        repo_root: Path, ansible_env: dict[str, str]) -> None:
    out = run(["ansible-playbook", "benchmark.yml", "-i", "inventories/sim/groups.yml"],
              repo_root, ansible_env)
    assert out.returncode != 0
    assert "scripts/simfleet up 3" in out.stdout + out.stderr
