"""Which Neuron release a host is on (prefixbench.hosts.release_match), from the debs and
DLAMI venvs AWS's images leave on it (versions as dpkg shows them, build suffix included)."""

from __future__ import annotations

import pytest

from prefixbench.hosts import release_match, releases
from prefixbench.hosts.release_match import Venv

RELS = releases.load_all()
#: The releases whose every fact is published (a bare host can be given one).
READY = releases.installable(RELS)
BETA = releases.load_release("2.31.0-vllm-beta")
R2310 = releases.load_release("2.31.0")
R2311 = releases.load_release("2.31.1")
R2320 = releases.load_release("2.32.0")

#: What dpkg lists on a host from the 2026-07-20 vLLM 0.21 DLAMI: 2.31.0's base packages
#: with their build suffixes (aws-neuron/deep-learning-containers 1fb9b21
#: vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx: tools 2.31.13.0-a9e473f33,
#: runtime-lib 2.33.10.0-3dcef56f0, collectives 2.33.10.0-068180c7a).
DLAMI_0720 = {"aws-neuronx-dkms": "2.29.0.0", "aws-neuronx-runtime-lib": "2.33.10.0-3dcef56f0",
              "aws-neuronx-collectives": "2.33.10.0-068180c7a",
              "aws-neuronx-tools": "2.31.13.0-a9e473f33",
              "aws-neuronx-oci-hook": "2.17.30.0", "python3": "3.12.3-0ubuntu2"}
VENV_0720 = Venv(str(BETA.dlami["venv"]), "0.21.0", "0.21.0.1.0.0+794754d")
#: Today's DLAMI (2.32.0; deep-learning-containers 2.32.0
#: vllm/inference/0.24.0.1.1.0/Dockerfile.neuronx, n2-manifest.json at v2.32.0).
DLAMI_232 = {"aws-neuronx-dkms": "2.30.2.0", "aws-neuronx-runtime-lib": "2.34.10.0-ac18d186d",
             "aws-neuronx-collectives": "2.34.10.0-74eaafac6",
             "aws-neuronx-tools": "2.32.28.0-526c2b7f6", "aws-neuronx-oci-hook": "2.18.25.0"}
VENV_232 = Venv(str(R2320.dlami["venv"]), "0.24.0", "0.24.0.1.1.0+e8242a9")


def resolve(installed: dict[str, str], venvs: list[Venv], requested: str = "auto",
            allow_upgrade: bool = False) -> release_match.HostRelease:
    return release_match.resolve("h1", requested, installed, venvs,
                                 allow_upgrade=allow_upgrade, rels=RELS)


def host_of(rel: releases.Release) -> tuple[dict[str, str], list[Venv]]:
    debs = {n: f"{v}-0abc1234" for n, v in rel.known_apt().items()}
    venvs = [Venv(rel.dlami["venv"], rel.vllm, rel.dlami["plugin"])] if rel.dlami else []
    return debs, venvs


@pytest.mark.parametrize("rel", READY, ids=[r.release for r in READY])
def test_a_host_on_each_known_release_is_recognised_and_used_as_it_is(
        rel: releases.Release) -> None:
    found = resolve(*host_of(rel))
    assert (found.release, found.refusal, found.how) == (rel, "", "matched")
    if rel.dlami:
        assert found.venv == rel.dlami["venv"]


def test_the_2026_07_20_dlami_host_is_on_the_vllm_beta_set_and_adopts_its_venv() -> None:
    found = resolve(DLAMI_0720, [VENV_0720])
    assert found.refusal == ""
    assert found.release == BETA
    assert found.venv == VENV_0720.path
    assert release_match.settings_update({"vllm_env_adopt_venv": "auto"}, found) == {
        "prefixbench_neuron_release": "2.31.0-vllm-beta",
        "vllm_env_adopt_venv": VENV_0720.path}


def test_todays_2_32_dlami_host_is_used_as_it_is() -> None:
    found = resolve(DLAMI_232, [VENV_232])
    assert (found.release, found.refusal, found.venv) == (R2320, "", VENV_232.path)
    # Naming the release it is on changes nothing either.
    assert resolve(DLAMI_232, [VENV_232], "2.32.0").release == R2320


def test_a_2_31_0_host_without_a_venv_is_2_31_0_and_a_2_31_1_host_adopts_the_0720_venv(
) -> None:
    assert resolve(DLAMI_0720, []).release == R2310
    upgraded = {**DLAMI_0720, "aws-neuronx-tools": "2.31.15.0-5c7949a6a"}
    found = resolve(upgraded, [VENV_0720])
    assert (found.release, found.venv) == (R2311, VENV_0720.path)


def test_a_bare_host_gets_the_newest_release_or_the_named_one() -> None:
    found = resolve({"python3": "3.12.3"}, [])
    assert (found.release, found.how, found.refusal) == (R2320, "bare", "")
    assert resolve({}, [], "2.31").release == R2311
    assert resolve({}, [], "2.31.0-vllm-beta").release == BETA


def test_a_mixed_host_is_refused_in_one_line_naming_each_packages_release() -> None:
    # 2.31.0's packages with 2.32.0's driver (n2-manifest.json at v2.32.0: dkms 2.30.2.0).
    mixed = {**DLAMI_0720, "aws-neuronx-dkms": "2.30.2.0"}
    found = resolve(mixed, [VENV_0720])
    assert found.release is None
    line = found.refusal
    assert "\n" not in line and line.startswith("h1: ")
    assert "mix releases" in line
    assert "aws-neuronx-dkms 2.30.2.0 (2.32.0)" in line
    assert "aws-neuronx-tools 2.31.13.0 (2.31.0-vllm-beta)" in line
    assert "bring every Neuron package to one release" in line
    assert "nothing was changed" in line


def test_a_dlami_venv_with_another_plugin_is_a_difference() -> None:
    odd = Venv(VENV_0720.path, "0.21.0", "0.21.0.1.0.1")
    found = resolve(DLAMI_0720, [odd])
    # 2.31.0 (no DLAMI of its own) still fits the debs; the venv is not adopted.
    assert (found.release, found.venv) == (R2310, "")
    diff = release_match.differences(BETA, release_match.neuron_packages(DLAMI_0720, RELS),
                                     [odd])
    assert diff == [f"{odd.path} vllm-neuron 0.21.0.1.0.1 (wants 0.21.0.1.0.0)"]


def test_a_neuron_package_is_never_moved_down_even_with_upgrades_allowed() -> None:
    found = resolve(DLAMI_232, [VENV_232], "2.31.1", allow_upgrade=True)
    assert found.release is None
    assert "would move Neuron packages down" in found.refusal
    assert "aws-neuronx-dkms 2.30.2.0 -> 2.29.0.0" in found.refusal
    assert "never moves a Neuron package down" in found.refusal


def test_moving_up_needs_the_upgrade_setting() -> None:
    refused = resolve(DLAMI_0720, [VENV_0720], "2.32.0")
    assert refused.release is None and "neuron_sdk_allow_upgrade: true" in refused.refusal
    moved = resolve(DLAMI_0720, [VENV_0720], "2.32.0", allow_upgrade=True)
    assert moved.release == R2320 and moved.refusal == ""
    assert moved.venv == ""  # the 0.21 venv does not hold 2.32's plugin


def test_the_venv_probe_reads_versions_and_skips_a_venv_that_is_not_there() -> None:
    venvs = release_match.venvs_from_probe([
        {"item": "/opt/a", "rc": 0, "stdout": "vllm -\nvllm-neuron 0.21.0.1.0.0+794754d\n"},
        {"item": "/opt/b", "rc": 2, "stdout": ""}])
    assert venvs == [Venv("/opt/a", None, "0.21.0.1.0.0+794754d")]


def test_every_installable_release_is_complete_and_every_pin_names_its_source() -> None:
    assert [r.release for r in RELS if r not in READY] == ["2.33.0", "2.33.1", "2.34.0"]
    for rel in RELS:
        if rel not in READY:  # what AWS has not published is marked, with where it was looked
            assert rel.unknown_facts and all(v.strip() for v in rel.unknown_facts.values())
            pinned = {n for n, v in {**rel.known_apt(), **rel.pip_packages}.items() if v}
            assert not pinned - set(rel.origin), rel.release
            continue
        pinned = {n for n, v in {**rel.known_apt(), **rel.pip_packages}.items() if v}
        pinned.add("vllm")
        missing = pinned - {n for n, s in rel.origin.items() if s.strip()}
        assert not missing, (rel.release, missing)
        assert rel.server_environment and rel.bench_requirements, rel.release
        assert rel.compile_distributions, rel.release
        if rel.dlami:
            assert {"venv", "plugin", "ssm_parameter", "name_filter", "source"} <= set(
                rel.dlami), rel.release


def test_the_compile_timeout_variable_follows_the_release() -> None:
    assert "VLLM_NEURON_COMPILATION_TIMEOUT" in R2311.server_environment
    assert "NEURON_LIBTORCH_COMPILATION_TIMEOUT" in R2320.server_environment
    assert "VLLM_NEURON_COMPILATION_TIMEOUT" not in R2320.server_environment


def test_the_units_environment_is_the_hosts_releases() -> None:
    from prefixbench.servers import server  # noqa: PLC0415

    on_232 = server.neuron_environment({"prefixbench_neuron_release": "2.32.0",
                                        "prefixbench_instance_type": "trn3.48xlarge"})
    assert on_232 == {"NEURON_LIBTORCH_COMPILATION_TIMEOUT": "1200",
                      "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1200",
                      "NEURON_RT_ALLOW_LEGACY_NEFF": "1"}
    on_beta = server.neuron_environment({"prefixbench_neuron_release": "2.31.0-vllm-beta",
                                         "prefixbench_instance_type": "trn2.48xlarge"})
    assert on_beta == {"VLLM_NEURON_COMPILATION_TIMEOUT": "1200",
                       "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1200"}
    with pytest.raises(releases.ReleaseError, match="auto and this host's release has not"):
        server.neuron_environment({"prefixbench_neuron_release": "auto"})


def test_the_plan_says_which_release_a_host_gets() -> None:
    from prefixbench.config import plan  # noqa: PLC0415

    auto = plan.release_line({"prefixbench_neuron_release": "auto"})
    assert auto.startswith("Neuron release: auto - read from the host")
    assert "a bare host gets 2.32.0" in auto and "never moved down" in auto
    # Why not 2.33.0 or 2.34.0: their manifests mark facts AWS has not published.
    assert "the newest the bundle can install from published facts" in auto
    assert "2.33.0 lacks published pip:libtorch-neuronx-lite" in auto
    assert "read from the host and used as it is" in auto
    named = plan.release_line({"prefixbench_neuron_release": "2.31"})
    assert named.startswith("Neuron release: 2.31.1 (Neuron 2.31.1, 2026-08-12) on a bare host")
    lines = plan.render([plan.host_plan("h1", {"prefixbench_neuron_release": "2.32.0",
                                               "prefixbench_instance_type": "trn2.48xlarge"})])
    assert "  Neuron release: 2.32.0 (Neuron 2.32.0, 2026-08-17) on a bare host" in " ".join(
        lines)


def test_the_plan_lists_vllms_gpu_only_dependencies_an_own_venv_installs() -> None:
    from prefixbench.config import plan  # noqa: PLC0415

    line = plan.gpu_only_line({"prefixbench_neuron_release": "2.32.0"})
    assert line.startswith("own venv on 2.32.0: installs vLLM 0.24.0's GPU-only dependencies (")
    assert "flashinfer-python" in line and "GB to download" in line
    assert "as AWS's image does" in line
    refused = plan.gpu_only_line({"prefixbench_neuron_release": "2.31.1",
                                  "vllm_env_gpu_wheels": "refuse"})
    assert "are refused (vllm_env_gpu_wheels: refuse)" in refused
    assert plan.gpu_only_line({"prefixbench_platform": "cpu"}) == ""
    assert plan.gpu_only_line({"vllm_env_requirements_url": "http://x/lock"}) == ""
    for rel in READY:
        assert {"flashinfer-python", "nvidia-cutlass-dsl"} <= set(rel.gpu_only), rel.release
        assert rel.gpu_only_mb > 0, rel.release


def test_a_dlami_venv_is_matched_by_its_plugin_which_pins_its_vllm() -> None:
    # The simulated fleet's DLAMI venvs hold vLLM's CPU build beside the stand-in plugin.
    sim = Venv(VENV_0720.path, "0.32.0+cpu", "0.21.0.1.0.0+794754d")
    found = resolve(DLAMI_0720, [sim])
    assert (found.release, found.venv) == (BETA, sim.path)


def test_every_releases_compile_key_distributions_are_read_into_the_key() -> None:
    from prefixbench.servers import compile_cache  # noqa: PLC0415

    for rel in READY:
        read = compile_cache.read_distributions(
            {"prefixbench_platform": "neuron", "prefixbench_neuron_release": rel.release})
        assert set(rel.compile_distributions) <= set(read), rel.release
        assert compile_cache.distributions("neuron", rel.release) == \
            rel.compile_distributions, rel.release
