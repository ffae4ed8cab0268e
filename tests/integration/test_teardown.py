"""playbooks/teardown.yml on the simulated fleet, after every other test: check mode
that changes nothing, then a bare host and the DLAMI-flavoured host returned to how
they were before the bundle, and a second run with nothing left to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixbench.hosts import releases
from prefixbench.servers.sandbox import PROOF_FILE
from prefixbench_sim.layout import SimHost
from prefixbench_sim.testing import SimFleetHandle, recap
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

DLAMI_VENV = "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0"
#: What the bundle leaves on a host (the scripts run under sh -eu: every command must
#: succeed when what it looks for is gone).
LEFTOVERS = ("ls -d /etc/systemd/system/vllm-*.service /opt/vllm-prefixbench "
             "/opt/models/tiny-gptoss /var/cache/vllm-prefixbench /var/lib/vllm-prefixbench "
             f"{PROOF_FILE} /var/lib/prefixbench /etc/vllm-prefixbench "
             "/etc/apt/sources.list.d/prefixbench-neuron.list /etc/apt/keyrings/neuron.asc "
             "/etc/profile.d/neuron.sh 2>/dev/null || true; getent passwd vllm || true; "
             "apt-mark showhold")


def test_teardown(sim_fleet: SimFleetHandle, sim_artifacts: Path, dlami_host: SimHost,
                  repo_root: Path, ansible_env: dict[str, str]) -> None:
    fleet = sim_fleet
    bare = fleet.hosts[0]
    hosts = [bare, dlami_host]
    limit = ",".join(h.name for h in hosts)
    # The doctor's proof of a strict sandbox, as prefixbench doctor leaves it (whether or
    # not test_doctor_fleet ran on these hosts): teardown must take it too, or a strict
    # deploy on the next run would trust a proof made for another installation.
    for host in hosts:
        fleet.sh(host, f"mkdir -p {PROOF_FILE.rsplit('/', 1)[0]} && "
                       f"test -f {PROOF_FILE} || echo '{{}}' > {PROOF_FILE}")
    before = {h.name: fleet.sh(h, LEFTOVERS) for h in hosts}
    assert "/opt/vllm-prefixbench" in before[bare.name], before  # provisioned by now
    assert all(PROOF_FILE in before[h.name] for h in hosts), before
    assert "aws-neuronx-runtime-lib" in before[bare.name]  # held
    dlami_freeze = fleet.ssh(dlami_host, [f"{DLAMI_VENV}/bin/pip", "freeze"])

    # Check mode reports what it would remove and removes nothing.
    proc, _ = playbook(repo_root, ansible_env, "playbooks/teardown.yml", "--check",
                       "--limit", limit)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert recap(proc.stdout)[bare.name]["changed"] > 0, proc.stdout[-4000:]
    assert {h.name: fleet.sh(h, LEFTOVERS) for h in hosts} == before

    proc, seconds = playbook(repo_root, ansible_env, "playbooks/teardown.yml",
                             "--limit", limit)
    assert proc.returncode == 0, proc.stdout[-6000:]
    for host in hosts:
        assert fleet.sh(host, LEFTOVERS).strip() == "", (host.name, fleet.sh(host, LEFTOVERS))
        update = fleet.sh(host, "apt-get update 2>&1")
        assert "\nE:" not in update, update
    # The bare host's Neuron packages stay (only their holds are released); the DLAMI
    # host keeps its venv, exactly, and its own apt source.
    # (a bare host got the newest installable release: prefixbench_neuron_release auto;
    # a release with unpublished facts, 2.33.0, 2.33.1 and 2.34.0, is never installed)
    newest = releases.newest(releases.installable(releases.load_all()))
    assert fleet.sh(bare, "dpkg-query -W -f='${Version}' aws-neuronx-runtime-lib"
                    ).startswith(str(newest.apt_packages["aws-neuronx-runtime-lib"]))
    assert fleet.ssh(dlami_host, [f"{DLAMI_VENV}/bin/pip", "freeze"]) == dlami_freeze
    assert fleet.sh(dlami_host, "test -f /etc/apt/sources.list.d/neuron.list && echo kept"
                    ).strip() == "kept"

    proc, _ = playbook(repo_root, ansible_env, "playbooks/teardown.yml", "--limit", limit)
    assert proc.returncode == 0, proc.stdout[-6000:]
    rec = recap(proc.stdout)
    assert {h.name: rec[h.name]["changed"] for h in hosts} == {h.name: 0 for h in hosts}, \
        proc.stdout[-6000:]
    print(f"\nteardown of {limit}: {seconds:.0f} s")
