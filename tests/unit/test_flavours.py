"""The DLAMI flavours' scripts (a known release's DLAMI, and one of a release no manifest
knows), the repositories that serve them, and the key of a cached venv (no fleet)."""

from __future__ import annotations

import re

import pytest

from prefixbench.hosts import releases
from prefixbench_sim import apt_packages, artifacts_apt, artifacts_pip, newer_release
from prefixbench_sim.flavours import dlami_script, dressing_of, venv_cache_key

BASE = (b"torch==2.13.0+cpu --hash=sha256:00\n", "0.21.0.1.0.0+794754d",
        "opt/aws_neuronx_venv", "python3.11 1700000000")


@pytest.mark.parametrize("index", range(len(BASE)))
def test_the_venv_key_changes_with_each_input(index: int) -> None:
    changed = list(BASE)
    changed[index] = changed[index] + (b"x" if isinstance(changed[index], bytes) else "x")
    assert venv_cache_key(*changed) != venv_cache_key(*BASE)  # type: ignore[arg-type]
    assert venv_cache_key(*BASE) == venv_cache_key(*BASE)


def test_the_key_does_not_run_inputs_together() -> None:
    # The same bytes split differently between two inputs give another key.
    assert venv_cache_key(b"ab", "c", "d", "e") != venv_cache_key(b"a", "bc", "d", "e")


def test_a_venv_from_the_cache_is_not_built_again() -> None:
    release = releases.load_release("2.31.0-vllm-beta")
    venv = str(release.dlami["venv"])
    built = dlami_script(release)
    assert f"python3 -m venv {venv}" in built and "pip install" in built
    ready = dlami_script(release, venv_ready=True)
    assert "python3 -m venv" not in ready and "pip install" not in ready
    # Everything else is the same script: the apt source, the packages, the group.
    for line in ("apt-get install", "groupadd -r neuron", "signed-by=/etc/apt/keyrings"):
        assert line in ready and line in built, line


def test_the_2_32_dlami_script_installs_that_release_as_aws_left_it() -> None:
    # aws-neuron/aws-neuron-sdk src/helperscripts/n2-manifest.json at v2.32.0 (tools
    # 2.32.28.0, runtime-lib 2.34.10.0, dkms 2.30.2.0) and dlami.rst there (the venv); the
    # DLAMI wheel's label e8242a9 (the 2.32.0 manifest's dlami.plugin).
    script = dlami_script(releases.load_release("2.32.0"))
    for pin in ("aws-neuronx-tools=2.32.28.0*", "aws-neuronx-runtime-lib=2.34.10.0*",
                "aws-neuronx-dkms=2.30.2.0*"):
        assert f" {pin}" in script or f"'{pin}'" in script, pin
    venv = "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_24_0_1_1_0"
    assert f"python3 -m venv {venv}" in script
    assert "vllm-neuron==0.24.0.1.1.0+e8242a9" in script
    assert 'echo "dlami 2.32.0"' in script
    assert "] http://10.213.0.1:8080/neuron-apt jammy main" in script


def test_the_newer_flavour_is_a_release_no_manifest_knows() -> None:
    rels = releases.load_all()
    assert newer_release.problems(rels) == []
    script = dlami_script(dressing_of("newer", ""))
    for name, version in newer_release.APT.items():
        assert f"{name}={version}*" in script
    assert f"python3 -m venv {newer_release.VENV}" in script
    assert f"vllm-neuron=={newer_release.PLUGIN}" in script
    # Named as AWS names its DLAMI venvs, at a path no manifest names.
    stems = {re.sub(r"(_\d+)+$", "", str(r.dlami["venv"])) for r in rels
             if r.dlami.get("venv")}
    assert re.sub(r"(_\d+)+$", "", newer_release.VENV) in stems
    assert newer_release.VENV not in {r.dlami.get("venv") for r in rels}


def test_the_check_catches_a_version_a_manifest_has(monkeypatch: pytest.MonkeyPatch) -> None:
    rel = releases.load_release("2.32.0")
    monkeypatch.setattr(newer_release, "APT",
                        dict(newer_release.APT, **{"aws-neuronx-tools": "2.32.28.0"}))
    monkeypatch.setattr(newer_release, "PLUGIN", "0.24.0.1.1.0+e8242a9")
    assert newer_release.problems([rel]) == [
        "aws-neuronx-tools 2.32.28.0 is not above 2.32.28.0",
        "vllm-neuron 0.24.0.1.1.0+e8242a9 is a manifest's"]


def test_the_simulated_repositories_serve_the_newer_release() -> None:
    specs = artifacts_apt.served_specs(releases.load_all(), "{}", "6.1.0-sim")
    served = {(s.name, s.version.split("-", 1)[0]) for s in specs}
    for name, version in newer_release.APT.items():
        assert (name, version) in served, name
    assert apt_packages.repo_versions([], newer_release.APT)["aws-neuronx-tools"] == {
        newer_release.APT["aws-neuronx-tools"]: True}  # simulation-only
    assert newer_release.PLUGIN in artifacts_pip.standin_versions()
