"""A host on a Neuron release no manifest completes is read from the host and run as it is
(prefixbench.hosts.host_read, release_match.resolve); older and mixed hosts are refused in
one line that names a step that exists; the probe finds AWS's DLAMI venvs by glob
(library/prefixbench_neuron_venvs.py). Host facts: tests/fixtures/host_facts/neuron-*.json
(README.md there says where each value comes from)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from module_runner import run_module

from prefixbench.hosts import host_read, provision, release_match, releases
from prefixbench.servers import compile_cache, server

FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "host_facts"
RELS = releases.load_all()
KNOWN = {r.release for r in RELS}
R2320 = releases.load_release("2.32.0")
#: AWS's releasecontent at v2.29.0: a host on Neuron 2.29.0, older than the bundle's 2.31.
HOST_2290 = {"aws-neuronx-dkms": "2.27.4.0", "aws-neuronx-runtime-lib": "2.31.24.0-abc",
             "aws-neuronx-collectives": "2.31.24.0-abc", "aws-neuronx-tools": "2.29.18.0-abc",
             "aws-neuronx-oci-hook": "2.15.13.0"}
#: deep-learning-containers 2.32.0 vllm/inference/0.24.0.1.1.0/Dockerfile.neuronx (as in
#: test_release_match.DLAMI_232).
HOST_2320 = {"aws-neuronx-dkms": "2.30.2.0", "aws-neuronx-runtime-lib": "2.34.10.0-ac18d186d",
             "aws-neuronx-collectives": "2.34.10.0-74eaafac6",
             "aws-neuronx-tools": "2.32.28.0-526c2b7f6", "aws-neuronx-oci-hook": "2.18.25.0"}


def fixture(name: str) -> tuple[dict[str, str], host_read.HostFacts]:
    data: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())
    return data["packages"], host_read.facts_from_probe(data["probe"])


def resolve(installed: dict[str, str], facts: host_read.HostFacts, requested: str = "auto",
            allow_upgrade: bool = False) -> release_match.HostRelease:
    return release_match.resolve("h1", requested, installed, facts.venvs,
                                 allow_upgrade=allow_upgrade, rels=RELS, facts=facts)


def settings_of(found: release_match.HostRelease, **extra: Any) -> dict[str, Any]:
    base = {"vllm_env_adopt_venv": "auto", **extra}
    return {**base, **release_match.settings_update(base, found)}


def test_a_2_33_host_with_its_vllm_venv_at_an_unlisted_path_runs_read_from_the_host() -> None:
    installed, facts = fixture("neuron-2.33.0-dlami")
    venv = facts.venvs[0].path
    assert venv not in release_match.dlami_venvs()  # no manifest names it
    found = resolve(installed, facts)
    assert found.refusal == ""
    assert found.release is not None and found.how == "read"
    assert found.release.release == "2.33.0" and found.venv == venv
    # The versions read, as AWS's components index at v2.33.0 lists them.
    for part in ("aws-neuronx-dkms 2.31.7.0", "aws-neuronx-runtime-lib 2.35.30.0",
                 "aws-neuronx-tools 2.33.38.0", "vllm 0.29.0",
                 "vllm-neuron 0.29.0.1.2.0+0000000", "neuronx-cc 2.28.7631.0"):
        assert part in found.note, part
    assert "used as it is, nothing installed or moved" in found.note
    settings = settings_of(found)
    assert settings["vllm_env_adopt_venv"] == venv
    rel = releases.for_settings(settings)
    assert rel.unknown() == [] and rel.python_supported == ("3.14",)
    assert provision.adoptable(rel, 0, "0.29.0.1.2.0+0000000")
    # What 2.33.0's manifest does not say: read (the directories) or assumed (the sizes).
    assert rel.library_path == ("/opt/aws/neuron/lib", "/opt/amazon/efa/lib",
                                "/opt/amazon/efa/lib64")
    assert rel.provenance["prefix_caching.segment_sizes"] == "assumed from 2.32.0"
    assert rel.segment_sizes == R2320.segment_sizes
    assert "prefix_caching.segment_sizes (assumed from 2.32.0)" in found.note


def test_a_host_newer_than_any_known_release_runs_with_its_assumed_values_flagged() -> None:
    installed, facts = fixture("neuron-newer-than-known")
    found = resolve(installed, facts)
    assert found.refusal == "" and found.release is not None
    rel = found.release
    assert rel.release == releases.HOST_READ
    assert rel.title == "Neuron read from the host, newer than any release this bundle knows"
    assert found.note.startswith("h1: Neuron read from the host, newer than any release "
                                 "this bundle knows: ")
    assert "vllm-neuron 0.31.0.2.0.0+0000000" in found.note
    assert found.venv == "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_31_0"
    # Read: the plugin's code names only the new timeout variable; only libnrt's directory
    # exists. The value is the one 2.32.0's manifest cites (the tutorial at v2.32.0).
    # The compile route is the newest release's that names one (2.34.0: the native route,
    # its precompile cache on), assumed and flagged.
    settings = settings_of(found, prefixbench_instance_type="trn2.48xlarge")
    assert server.neuron_environment(settings) == {
        "NEURON_LIBTORCH_COMPILATION_TIMEOUT":
            R2320.server_environment["NEURON_LIBTORCH_COMPILATION_TIMEOUT"],
        "VLLM_NEURON_BACKEND": "neuron_native"}
    assert releases.for_settings(settings).library_path == ("/opt/aws/neuron/lib",)
    unchecked = found.as_dict()["unchecked"]
    assert "prefix_caching.segment_sizes (assumed from 2.32.0)" in unchecked
    assert "bench_client.requirements (assumed from 2.34.0)" in unchecked
    assert "compile_route.environment (assumed from 2.34.0)" in unchecked
    # Where its graphs are kept is never assumed: they are not shared (each host compiles).
    assert releases.for_settings(settings).compile_cache_dir == ""
    assert "read from the host does not say where" in compile_cache.unshared_reason(
        "neuron", releases.for_settings(settings))
    assert "could not check: " in found.note


def test_a_host_older_than_the_oldest_known_release_is_refused_in_one_line() -> None:
    found = resolve(HOST_2290, host_read.HostFacts())
    assert found.release is None
    line = found.refusal
    assert "\n" not in line and line.startswith("h1: ")
    assert "older than 2.31.0, the oldest release this bundle runs" in line
    assert "aws-neuronx-runtime-lib 2.31.24.0 (oldest known 2.33.10.0)" in line
    assert "use a host from an image of Neuron 2.31.0 or later" in line
    assert line.endswith("nothing was changed")


def test_a_host_mixing_two_known_releases_is_refused_in_one_line() -> None:
    # 2.32.0's packages with 2.33.0's runtime (components index at v2.33.0: 2.35.30.0).
    mixed = {**HOST_2320, "aws-neuronx-runtime-lib": "2.35.30.0-0a1b2c3d4"}
    found = resolve(mixed, host_read.HostFacts())
    assert found.release is None
    line = found.refusal
    assert "\n" not in line and line.startswith("h1: its Neuron packages mix releases")
    assert "aws-neuronx-runtime-lib 2.35.30.0 (2.33.0)" in line
    assert "aws-neuronx-tools 2.32.28.0 (2.32.0)" in line
    assert line.endswith("nothing was changed")


def test_a_newer_host_without_a_vllm_neuron_venv_is_told_to_name_one() -> None:
    installed, _ = fixture("neuron-newer-than-known")
    found = resolve(installed, host_read.HostFacts())
    assert found.release is None
    assert "no vLLM Neuron venv (vllm and vllm-neuron) was found (looked at " \
           "/opt/aws_neuronx_venv_pytorch_inference_vllm* and vllm_env_adopt_venv)" \
           in found.refusal
    assert "set vllm_env_adopt_venv to the venv that holds them" in found.refusal


def test_no_refusal_advises_a_release_that_does_not_exist() -> None:
    newer, facts = fixture("neuron-newer-than-known")
    refusals = [
        resolve(HOST_2290, host_read.HostFacts()).refusal,
        resolve({**HOST_2320, "aws-neuronx-runtime-lib": "2.35.30.0"},
                host_read.HostFacts()).refusal,
        resolve(newer, host_read.HostFacts()).refusal,
        resolve(newer, facts, requested="2.32.0").refusal,
        resolve(HOST_2320, host_read.HostFacts(), requested="2.31.1").refusal,
    ]
    assert all(refusals), refusals
    for line in refusals:
        assert "name a newer release" not in line, line
        for value in re.findall(r"prefixbench_neuron_release:? (\S+)", line):
            assert value.rstrip(",;") in {*KNOWN, "auto"}, line


def test_a_bare_host_gets_the_newest_release_installable_from_published_facts() -> None:
    found = resolve({}, host_read.HostFacts())
    assert found.release == R2320 and found.how == "bare"
    assert "the newest release the bundle can install from published facts" in found.note
    assert "2.33.0 is newer but AWS has not published its pip:libtorch-neuronx-lite" \
        in found.note
    assert "2.34.0 is newer but AWS has not published its apt:aws-neuronx-dkms" in found.note


def test_the_probe_globs_for_awss_dlami_venvs_whatever_their_version() -> None:
    args = host_read.probe_arguments(RELS, "auto")
    # The DLAMI venvs AWS named (dlami.rst at v2.31.1 and v2.32.0):
    # /opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0 and ..._0_24_0_1_1_0.
    assert args["patterns"] == ["/opt/aws_neuronx_venv_pytorch_inference_vllm*"]
    assert args["paths"] == []
    assert {"vllm", "vllm-neuron", "neuronx-cc"} <= set(args["distributions"])
    assert {"NEURON_LIBTORCH_COMPILATION_TIMEOUT", "VLLM_NEURON_COMPILATION_TIMEOUT"} <= set(
        args["environment_names"])
    named = host_read.probe_arguments(RELS, "/srv/venv")
    assert (named["patterns"], named["paths"]) == ([], ["/srv/venv"])


def _fake_venv(root: Path, name: str, versions: dict[str, str], code: str) -> Path:
    """A venv whose interpreter sees ``versions`` (dist-info directories) and one plugin
    source file holding ``code``."""
    venv = root / name
    site = venv / "site"
    for dist, version in versions.items():
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\n"
                                       f"Version: {version}\n")
        pkg = dist.replace("-", "_")
        (site / pkg).mkdir(exist_ok=True)
        (site / pkg / "envs.py").write_text(code)
        (info / "RECORD").write_text(f"{pkg}/envs.py,,\n{info.name}/METADATA,,\n")
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    python.chmod(0o755)
    return venv


def test_the_probe_module_finds_an_unlisted_venv_and_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    found = _fake_venv(tmp_path, "aws_neuronx_venv_pytorch_inference_vllm_9_9",
                       {"vllm": "0.31.0", "vllm-neuron": "0.31.0.2.0.0+abc1234"},
                       'os.environ.get("NEURON_LIBTORCH_COMPILATION_TIMEOUT")\n')
    other = _fake_venv(tmp_path, "elsewhere", {"vllm": "0.24.0"}, "")
    result = run_module("prefixbench_neuron_venvs", {
        "patterns": [f"{tmp_path}/aws_neuronx_venv_pytorch_inference_vllm*"],
        "paths": [str(other), str(tmp_path / "missing")],
        "distributions": ["vllm", "vllm-neuron", "nki"],
        "environment_names": ["NEURON_LIBTORCH_COMPILATION_TIMEOUT",
                              "VLLM_NEURON_COMPILATION_TIMEOUT"],
        "scan": ["vllm-neuron", "vllm"],
        "directories": [str(tmp_path), str(tmp_path / "nope")]}, monkeypatch, capsys)
    assert result["changed"] is False
    by_path = {v["path"]: v for v in result["venvs"]}
    assert set(by_path) == {str(found), str(other)}
    read = by_path[str(found)]
    assert read["rc"] == 0, read["error"]
    assert read["distributions"] == {"vllm": "0.31.0", "vllm-neuron": "0.31.0.2.0.0+abc1234",
                                     "nki": None}
    assert read["environment_names"] == ["NEURON_LIBTORCH_COMPILATION_TIMEOUT"]
    assert read["python"] == ".".join(str(p) for p in sys.version_info[:3])
    assert result["directories"] == {str(tmp_path): True, str(tmp_path / "nope"): False}
    facts = host_read.facts_from_probe(result)
    venvs = {v.path: v for v in facts.venvs}
    assert venvs[str(found)].is_vllm_neuron and not venvs[str(other)].is_vllm_neuron


def test_the_record_and_the_report_say_the_release_was_read_and_what_was_not_checked(
) -> None:
    from prefixbench.hosts import collect  # noqa: PLC0415
    from prefixbench.hosts.fingerprint import Fingerprint  # noqa: PLC0415
    from prefixbench.report import headline  # noqa: PLC0415

    installed, facts = fixture("neuron-newer-than-known")
    found = resolve(installed, facts)
    settings = settings_of(found, prefixbench_instance_type="trn2.48xlarge",
                           prefixbench_platform="neuron")
    packages = {n: [{"version": v}] for n, v in installed.items()}
    data = collect.fingerprint("h1", settings, {"packages": packages})
    assert data["neuron_release"] == releases.HOST_READ
    assert data["neuron_packages"]["aws-neuronx-runtime-lib"] == "2.36.12.0-0a1b2c3d4"
    said = data["sources"]["neuron_release"]
    assert said.startswith("Neuron read from the host, newer than any release this bundle "
                           "knows; could not check: ")
    assert "prefix_caching.segment_sizes (assumed from 2.32.0)" in said
    fp = Fingerprint.from_dict(data)
    line = headline._read_releases([fp, None])
    assert line == f" h1: {said}."
    on_manifest = Fingerprint.from_dict({**data, "sources": {}})
    assert headline._read_releases([on_manifest]) == ""


def test_the_roles_filters_run_a_read_host_from_its_settings() -> None:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(
        "prefixbench_filters", Path(__file__).resolve().parents[2] / "plugins" / "filter" /
        "prefixbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    filters = module.FilterModule().filters()
    data = json.loads((FACTS / "neuron-newer-than-known.json").read_text())
    packages = {n: [{"version": v}] for n, v in data["packages"].items()}
    base = {"prefixbench_neuron_release": "auto", "vllm_env_adopt_venv": "auto"}
    found = filters["prefixbench_host_release"](base, "h1", packages, data["probe"])
    assert found["refusal"] == "" and found["how"] == "read"
    settings = {**base, **found["settings"]}
    # What roles/neuron_sdk and roles/vllm_env hand the filters: the host's settings.
    pins = filters["prefixbench_release"](settings, "6.8.0-1024-aws")["apt_pins"]
    assert "aws-neuronx-runtime-lib=2.36.12.0*" in pins  # the version read: nothing moves
    assert filters["prefixbench_missing_packages"](settings, packages) == []
    assert filters["prefixbench_drift"](settings, packages, "h1") == []
    assert filters["prefixbench_adoptable"]({"rc": 0, "stdout": "0.31.0.2.0.0+0000000"},
                                            settings)
