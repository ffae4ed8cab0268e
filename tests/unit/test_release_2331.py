"""Neuron 2.33.1, 2.33.0's patch (src/prefixbench/data/neuron_releases/2.33.1.yml): its data
pinned to the page it cites, and what the bundle does with a host on it.

Expected values are typed from AWS's pages, not read back from the manifest:

* awsdocs-neuron release-notes/2.33.1 at latest (date-modified 11/11/2026): "Release Date:
  November 11, 2026"; "Package updates ... All other packages are the same as in Neuron
  2.33.0": aws-neuronx-collectives 2.35.49.0, aws-neuronx-dkms 2.31.8.0,
  aws-neuronx-oci-hook 2.19.74.0, aws-neuronx-runtime-lib 2.35.33.0, libtorch_neuronx_lite
  2.11.0.1.0.4089, 2.12.0.1.0.4089 and 2.13.0.1.0.4089 (and jax_neuronx, libneuronxla,
  nrtpy, not in the vLLM environment);
* the packages it does not update, 2.33.0's: release-notes/components/index at v2.33.0
  (Neuron Developer Tools 2.33.38.0, Neuron Compiler 2.28.7631.0, Neuron Kernel Interface
  0.7.0, vLLM Neuron (Beta) 0.29.0.1.2.0) and release-notes/2.33.0 (vLLM 0.29.0);
* vllm 0.29.0's wheel metadata on PyPI pins torch==2.13.0: the 2.13 lite build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefixbench.hosts import host_read, release_match, releases

FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "host_facts"
RELS = releases.load_all()
R2331 = releases.load_release("2.33.1")
NOTES = "release-notes/2.33.1 at latest"


def fixture(name: str) -> tuple[dict[str, str], host_read.HostFacts]:
    data: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())
    return data["packages"], host_read.facts_from_probe(data["probe"])


def resolve(installed: dict[str, str], facts: host_read.HostFacts,
            requested: str = "auto") -> release_match.HostRelease:
    return release_match.resolve("h1", requested, installed, facts.venvs,
                                 allow_upgrade=False, rels=RELS, facts=facts)


def test_2331s_versions_are_its_release_notes_package_updates_and_2330s_rest() -> None:
    assert (R2331.version, R2331.date, R2331.title) == ("2.33.1", "2026-11-11",
                                                        "Neuron 2.33.1")
    assert R2331.apt_packages == {
        "aws-neuronx-dkms": "2.31.8.0", "aws-neuronx-runtime-lib": "2.35.33.0",
        "aws-neuronx-collectives": "2.35.49.0", "aws-neuronx-oci-hook": "2.19.74.0",
        "aws-neuronx-tools": "2.33.38.0"}
    assert R2331.vllm == "0.29.0"
    assert R2331.pip_packages == {
        "vllm-neuron": "0.29.0.1.2.0", "libtorch-neuronx-lite": "2.13.0.1.0.4089",
        "neuronx-cc": "2.28.7631.0", "nki": "0.7.0"}
    # Each cites the 2.33.1 notes: the updated ones their own line, the rest the sentence
    # that keeps them at 2.33.0's.
    for name in ("aws-neuronx-dkms", "aws-neuronx-runtime-lib", "aws-neuronx-collectives",
                 "aws-neuronx-oci-hook"):
        assert f"{NOTES}, Package updates ({name}: " in R2331.origin[name], name
    for name in ("aws-neuronx-tools", "vllm", "vllm-neuron", "neuronx-cc", "nki"):
        assert R2331.origin[name].startswith("not updated") and NOTES in R2331.origin[name]
    assert "2.13.0.1.0.4089" in R2331.origin["libtorch-neuronx-lite"]
    assert "torch==2.13.0" in R2331.origin["libtorch-neuronx-lite"]


def test_2331_updates_only_the_debs_its_notes_list_over_2330() -> None:
    r2330 = releases.load_release("2.33.0")
    changed = {n for n, v in R2331.apt_packages.items() if r2330.apt_packages.get(n) != v}
    assert changed == {"aws-neuronx-dkms", "aws-neuronx-runtime-lib",
                       "aws-neuronx-collectives", "aws-neuronx-oci-hook"}
    assert R2331.vllm == r2330.vllm
    assert R2331.pip_packages["vllm-neuron"] == r2330.pip_packages["vllm-neuron"]
    # The notes change nothing the bundle serves or compiles with: the native route stays.
    assert R2331.compile_route_environment == {"VLLM_NEURON_BACKEND": "neuron_native"}
    assert R2331.order > r2330.order
    assert R2331.order < releases.load_release("2.34.0").order


def test_what_the_2331_pages_do_not_say_stays_unknown_and_it_is_not_installed() -> None:
    assert set(R2331.unknown_facts) == {
        "compile_key.cache_dir", "compile_key.distributions", "dlami.venv", "pip.sources",
        "prefix_caching.segment_sizes", "python.supported", "server.environment",
        "server.library_path"}
    assert all(NOTES in why or "v2.33.1" in why or "2.33.1" in why
               for why in R2331.unknown_facts.values()), R2331.unknown_facts
    assert (R2331.segment_sizes, R2331.library_path, R2331.python_supported) == ((), (), ())
    assert R2331 not in releases.installable(RELS)
    bare = resolve({}, host_read.HostFacts())
    assert bare.release is not None and bare.release.release == "2.32.0"
    assert "2.33.1 is newer but AWS has not published its compile_key.cache_dir" in bare.note


def test_a_host_on_2331_resolves_to_it_and_runs_as_it_is_with_the_unchecked_said() -> None:
    installed, facts = fixture("neuron-2.33.1-dlami")
    found = resolve(installed, facts)
    assert found.refusal == "" and found.how == "read"
    assert found.release is not None and found.release.release == "2.33.1"
    assert found.venv == "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_29_0_1_2_0"
    assert found.note.startswith("h1: Neuron read from the host, on Neuron 2.33.1, whose "
                                 "published facts are incomplete: ")
    for part in ("aws-neuronx-dkms 2.31.8.0", "aws-neuronx-runtime-lib 2.35.33.0",
                 "aws-neuronx-collectives 2.35.49.0", "aws-neuronx-oci-hook 2.19.74.0",
                 "aws-neuronx-tools 2.33.38.0", "vllm 0.29.0",
                 "vllm-neuron 0.29.0.1.2.0+0000000", "neuronx-cc 2.28.7631.0"):
        assert part in found.note, part
    assert "used as it is, nothing installed or moved; could not check: " in found.note
    unchecked = found.as_dict()["unchecked"]
    assert "prefix_caching.segment_sizes (assumed from 2.32.0)" in unchecked
    assert "compile_key.distributions (assumed from 2.32.0)" in unchecked
    # The unit's variables: names read from the plugin's code, values assumed, so said.
    assert ("server.environment (names read from h1 (the plugin's and vLLM's code); "
            "values assumed from the releases that set them)") in unchecked
    assert all(item in found.note for item in unchecked)
    rel = found.release
    assert rel.provenance["compile_route.environment"] == "from the 2.33.1 manifest"
    assert rel.python_supported == ("3.14",)
    settings = {"vllm_env_adopt_venv": "auto"}
    settings |= release_match.settings_update(settings, found)
    assert settings["prefixbench_neuron_release"] == "2.33.1"
    assert releases.for_settings(settings).unknown() == []


def test_a_host_on_2330_stays_2330_and_one_half_moved_to_2331_is_refused() -> None:
    installed, facts = fixture("neuron-2.33.0-dlami")
    found = resolve(installed, facts)
    assert found.release is not None and found.release.release == "2.33.0"
    # 2.33.1's driver alone (its notes: aws-neuronx-dkms 2.31.8.0) on a 2.33.0 host.
    half = {**installed, "aws-neuronx-dkms": "2.31.8.0"}
    line = resolve(half, facts).refusal
    assert line.startswith("h1: its Neuron packages mix releases")
    assert "aws-neuronx-dkms 2.31.8.0 (2.33.1)" in line
    assert "aws-neuronx-runtime-lib 2.35.30.0 (2.33.0)" in line
    assert "\n" not in line and line.endswith("nothing was changed")
