"""Provision on the simulated fleet: refusals first (no host changed), then converge,
a second run with nothing changed, and check mode that tells the truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixbench.sim.testing import SimFleetHandle, recap
from prefixbench.sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

def neuron_list_present(fleet: SimFleetHandle) -> list[str]:
    return [h.name for h in fleet.hosts
            if fleet.sh(h, "test -e /etc/apt/sources.list.d/neuron.list && echo yes || true")
            .strip() == "yes"]


def test_provision(sim_fleet: SimFleetHandle, sim_artifacts: Path, repo_root: Path,
                   ansible_env: dict[str, str]) -> None:
    fleet = sim_fleet
    trn2 = fleet.hosts[0]

    # 1. An unknown SDK release is refused in preflight.
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                       "-e", "prefixbench_neuron_release=2.99")
    assert proc.returncode != 0
    assert "unknown Neuron SDK release 2.99" in proc.stdout + proc.stderr
    assert neuron_list_present(fleet) == []

    # 2. An unsupported OS is refused at the first task, on every host.
    fleet.sh(trn2, "cp /etc/os-release /var/tmp/os-release.orig && "
                   "sed -i 's/^ID=.*/ID=fedora/;s/^VERSION_ID=.*/VERSION_ID=\"40\"/;"
                   "s/^NAME=.*/NAME=Fedora/' /etc/os-release")
    try:
        proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml")
    finally:
        fleet.sh(trn2, "cp /var/tmp/os-release.orig /etc/os-release")
    assert proc.returncode != 0
    assert "is not supported by Neuron SDK 2.31.0" in proc.stdout
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values()), proc.stdout
    assert neuron_list_present(fleet) == []

    # 3. A host with a Neuron package at another version is reported precisely.
    old = next((sim_artifacts / "neuron-apt").rglob("aws-neuronx-runtime-lib_2.32.31.0*.deb"))
    url = f"http://10.213.0.1:8080/{old.relative_to(sim_artifacts).as_posix()}"
    fleet.sh(trn2, f"curl -fsS -o /var/tmp/old-runtime.deb {url} && "
                   "dpkg -i /var/tmp/old-runtime.deb >/dev/null")
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml")
    assert proc.returncode != 0
    assert (f"{trn2.name}: aws-neuronx-runtime-lib is 2.32.31.0, Neuron SDK wants 2.33.10.0"
            in proc.stdout), proc.stdout
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values())
    assert neuron_list_present(fleet) == []

    # 4. Converge, allowing the drifted host to move to the pinned version.
    proc, first = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                           "-e", "neuron_sdk_allow_upgrade=true")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    runtime = fleet.sh(trn2, "dpkg-query -W -f='${Version}' aws-neuronx-runtime-lib")
    assert runtime.startswith("2.33.10.0")

    # 5. A second run changes nothing; neither does check mode.
    proc, second = playbook(repo_root, ansible_env, "playbooks/provision.yml")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert {h: r["changed"] for h, r in recap(proc.stdout).items()} == \
        {h: 0 for h in recap(proc.stdout)}, proc.stdout[-6000:]
    proc, check = playbook(repo_root, ansible_env, "playbooks/provision.yml", "--check")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert all(r["changed"] == 0 for r in recap(proc.stdout).values()), proc.stdout[-6000:]
    print(f"\nprovision on {len(fleet.hosts)} simulated hosts: first run {first:.0f} s, "
          f"second run {second:.0f} s, check mode {check:.0f} s")

    # 6. An unreachable host drops out; the others still run the whole phase.
    down = fleet.hosts[-1]
    fleet.fleet.exec(down, ["systemctl", "stop", "ssh.service", "ssh.socket"])
    try:
        no_reuse = {**ansible_env, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no"}
        proc, _ = playbook(repo_root, no_reuse, "playbooks/provision.yml")
    finally:
        fleet.fleet.exec(down, ["systemctl", "start", "ssh.service"])
    rec = recap(proc.stdout)
    assert rec[down.name]["unreachable"] == 1, proc.stdout[-4000:]
    for host in fleet.hosts[:-1]:
        assert rec[host.name]["failed"] == 0 and rec[host.name]["unreachable"] == 0, rec
        assert rec[host.name]["ok"] > 20, rec

    # The result is usable: the tools, vLLM on the expected platform, the model.
    for host in fleet.hosts:
        listing = fleet.sh(host, "/opt/aws/neuron/bin/neuron-ls -j")
        assert listing.strip().startswith("[")
        assert fleet.sh(host, "test -r /opt/models/tiny-llama/config.json && echo ok").strip() \
            == "ok"
