"""Each host provisions, deploys and benches at its own pace: benchmark.yml's hosts play
runs with the free strategy, and nothing it runs may assume the hosts move in step."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
#: What only makes sense when every host is at the same task: Ansible ignores the first
#: two with the free strategy (with a warning), and the others read another host's
#: variables, which that host may not have set yet.
IN_STEP = re.compile(r"\b(run_once|any_errors_fatal|hostvars|ansible_play_hosts\w*|"
                     r"ansible_play_batch|groups\[)")


def test_the_hosts_play_runs_each_host_at_its_own_pace() -> None:
    plays = yaml.safe_load((ROOT / "playbooks" / "phases" / "hosts.yml").read_text())
    assert len(plays) == 1 and "free" in plays[0]["strategy"]
    imported = [t["ansible.builtin.import_tasks"] for t in plays[0]["tasks"]]
    assert imported == ["tasks/install.yml", "tasks/deploy.yml", "tasks/bench.yml"]
    steps = [p.get("ansible.builtin.import_playbook")
             for p in yaml.safe_load((ROOT / "playbooks" / "benchmark.yml").read_text())]
    assert steps.index("phases/provision_check.yml") < steps.index("phases/hosts.yml")


def test_nothing_the_hosts_play_runs_assumes_the_hosts_move_in_step() -> None:
    files = [*(ROOT / "playbooks" / "phases" / "tasks").glob("*.yml")]
    for role in ("neuron_sdk", "vllm_env", "model_cache", "vllm_service", "prefix_bench"):
        files += [p for p in (ROOT / "roles" / role / "tasks").glob("*.yml")
                  if p.name != "check.yml"]  # check.yml: the provision checks' own play
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("#") and IN_STEP.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
