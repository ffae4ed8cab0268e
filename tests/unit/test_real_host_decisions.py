"""What provisioning decides for the Ubuntu releases a real Trn fleet runs, from their
facts (tests/fixtures/host_facts), and the release manifest's sourced pip set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench.hosts import provision, releases

FACTS = Path(__file__).resolve().parents[1] / "fixtures" / "host_facts"
REL = releases.load_release("2.31")
DLAMI_REL = releases.load_release("2.31.0-vllm-beta")


def facts(name: str) -> dict[str, str]:
    data: dict[str, str] = json.loads((FACTS / f"{name}.json").read_text())
    return data


def problems(name: str, python_version: str | None = None) -> list[str]:
    f = facts(name)
    out = provision.host_problems(REL, "h1", f, {}, allow_upgrade=False)
    line = provision.python_problem(REL, "h1", f, "/usr/bin/python3",
                                    python_version or f["python_version"])
    return out + ([line] if line else [])


def test_ubuntu_24_04_with_its_python_3_12_is_accepted() -> None:
    assert problems("ubuntu-24.04") == []


def test_ubuntu_22_04_with_its_python_3_10_is_refused_in_one_actionable_line() -> None:
    found = problems("ubuntu-22.04")
    assert len(found) == 1, found
    line = found[0]
    assert "\n" not in line
    assert "Python 3.10" in line and "3.11 or 3.12" in line
    assert "vllm_env_python" in line and "nothing was changed" in line


def test_ubuntu_22_04_with_a_python_3_11_interpreter_is_accepted() -> None:
    assert problems("ubuntu-22.04", python_version="3.11.13") == []


def test_the_vllm_021_set_is_the_documented_one_with_torch_211_not_torch_29() -> None:
    pins = provision.pip_requirements(REL)
    assert "vllm==0.21.0" in pins and "libtorch-neuronx-lite==2.11.0.1.0.696" in pins
    assert not any(p.startswith(("torch-neuronx", "neuronx-distributed")) for p in pins)


def test_every_pinned_version_names_its_public_source() -> None:
    for rel in releases.load_all():
        pinned = {n for n, v in {**rel.known_apt(), **rel.pip_packages}.items() if v}
        if rel.vllm:
            pinned.add("vllm")
        assert pinned <= {n for n, s in rel.origin.items() if s.strip()}, rel.release


def test_a_pin_without_a_source_is_refused(tmp_path: Path) -> None:
    text = (releases.RELEASES_DIR / "2.31.1.yml").read_text()
    broken = text.replace("    nki: >-\n", "    x: >-\n")
    assert broken != text
    (tmp_path / "2.31.1.yml").write_text(broken)
    with pytest.raises(releases.ReleaseError, match=r"pip.packages.nki .* no public source"):
        releases.load_release("2.31.1", tmp_path)


def test_hf_download_takes_only_the_files_vllm_loads() -> None:
    import fnmatch  # noqa: PLC0415

    from prefixbench.config import settings as catalogue  # noqa: PLC0415

    s = {k: v.default for k, v in catalogue.BY_NAME.items() if not v.required}
    argv = provision.hf_download_argv(s, "/venv/bin/hf")
    assert argv[:3] == ["/venv/bin/hf", "download", "openai/gpt-oss-120b"]
    inc = argv[argv.index("--include") + 1:argv.index("--exclude")]
    exc = argv[argv.index("--exclude") + 1:]
    # gpt-oss-120b's layout (its model card and repository listing): huggingface_hub
    # keeps a file that matches an include pattern and no exclude pattern (fnmatch).
    repo = ["config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
            "model.safetensors.index.json", "model-00000-of-00014.safetensors",
            "original/config.json", "original/model--00001-of-00007.safetensors",
            "metal/model.bin", "README.md"]
    kept = [f for f in repo if any(fnmatch.fnmatch(f, p) for p in inc)
            and not any(fnmatch.fnmatch(f, p) for p in exc)]
    assert kept == repo[:6]


def test_the_adopted_venv_is_the_dlami_venv_the_manifest_names() -> None:
    from prefixbench.config import settings as catalogue  # noqa: PLC0415
    from prefixbench.hosts import release_match  # noqa: PLC0415

    # auto: the venv is whichever known DLAMI's holds the host's release.
    assert catalogue.BY_NAME["vllm_env_adopt_venv"].default == "auto"
    assert DLAMI_REL.dlami["venv"] in release_match.dlami_venvs()
    assert DLAMI_REL.dlami["ssm_parameter"].startswith("/aws/service/neuron/dlami/")


def test_teardown_never_removes_a_system_directory_or_an_adopted_venv() -> None:
    from prefixbench.config import settings as catalogue  # noqa: PLC0415

    s = {k: v.default for k, v in catalogue.BY_NAME.items() if not v.required}
    assert provision.teardown_paths(s) == {
        "vllm_env": ["/opt/vllm-prefixbench/venv", "/opt/vllm-prefixbench"],
        "model_cache": ["/opt/models/gpt-oss-120b", "/opt/models/tiktoken"]}
    risky = {**s, "vllm_env_venv": "/opt", "model_cache_dir": "/var/lib"}
    assert provision.teardown_paths(risky) == {"vllm_env": [],
                                               "model_cache": ["/opt/models/tiktoken"]}
    s["vllm_env_adopt_venv"] = DLAMI_REL.dlami["venv"]  # as the host's release read sets it
    adopted = {**s, "vllm_env_venv": s["vllm_env_adopt_venv"],
               "prefixbench_teardown_model": False}
    assert provision.teardown_paths(adopted) == {"vllm_env": [], "model_cache": []}
    brought = {**s, "model_cache_source": "local"}
    assert provision.teardown_paths(brought)["model_cache"] == []
    assert not provision.removable("/opt/../etc/ssh")


def test_the_dlamis_plugin_with_its_build_label_is_adopted() -> None:
    # The 2.31.1 DLAMI's wheel is vllm_neuron-0.21.0.1.0.0+794754d (releasecontent.rst).
    assert provision.adoptable(REL, 0, "0.21.0.1.0.0+794754d\n")
    assert provision.adoptable(REL, 0, "0.21.0.1.0.0")
    assert not provision.adoptable(REL, 0, "0.21.0.1.0.1+794754d")
    assert not provision.adoptable(REL, 0, "0.24.0.1.1.0")
    assert not provision.adoptable(REL, 1, "0.21.0.1.0.0+794754d")


def test_a_venv_that_is_not_adopted_says_why() -> None:
    venv, own = DLAMI_REL.dlami["venv"], "/opt/vllm-prefixbench/venv"
    note = provision.adoption_note(REL, venv, 0, "0.24.0.1.1.0", own)
    assert note.startswith(f"not adopting {venv}: its vllm-neuron is 0.24.0.1.1.0")
    assert own in note and "wants 0.21.0.1.0.0" in note
    assert provision.adoption_note(REL, venv, 0, "0.21.0.1.0.0+794754d", own).startswith(
        f"adopting {venv} (vllm-neuron 0.21.0.1.0.0+794754d")
    # No such virtualenv (python not found): nothing to say.
    assert provision.adoption_note(REL, venv, 2, "", own) == ""


def test_the_venv_package_follows_the_interpreter_that_makes_the_venv() -> None:
    # Ubuntu 22.04's python3-venv is 3.10's: a 3.11 interpreter needs python3.11-venv.
    assert provision.venv_system_packages(["python3-venv", "python3-packaging"], "3.11.9") \
        == ["python3.11-venv", "python3-packaging"]
    assert provision.venv_system_packages(["python3-venv"], "3.12.3\n") == ["python3.12-venv"]
    assert provision.venv_system_packages(["python3-venv"], "") == ["python3-venv"]


def test_the_plugin_is_installed_from_source_at_the_dlamis_commit() -> None:
    # AWS's 0.21 image and the plugin's setup guide install vllm-neuron from source; it is
    # not on PyPI at 0.21.0.1.0.0.
    reqs = provision.pip_requirements(REL)
    assert "vllm-neuron @ git+https://github.com/vllm-project/vllm-neuron.git@794754d" \
        in reqs
    assert not any(r.startswith("vllm-neuron==") for r in reqs)
    assert {"vllm==0.21.0", "neuronx-cc==2.26.6360.0", "nki==0.5.0",
            "libtorch-neuronx-lite==2.11.0.1.0.696"} <= set(reqs)


def test_a_source_install_needs_its_public_source(tmp_path: Path) -> None:
    text = (releases.RELEASES_DIR / "2.31.1.yml").read_text()
    broken = text.replace("@794754d", "@main")
    (tmp_path / "2.31.1.yml").write_text(broken)
    with pytest.raises(releases.ReleaseError, match=r"pip\.sources must map"):
        releases.load_release("2.31.1", tmp_path)


def test_the_neuron_pip_route_installs_vllms_gpu_pins_by_default_and_refuses_on_request(
) -> None:
    from prefixbench.config import settings as catalogue  # noqa: PLC0415

    # vLLM's GPU-only dependencies are its own pins; AWS's images install them as they
    # are, so the default installs them too (it refused them, which no index could clear).
    defaults = {k: v.default for k, v in catalogue.BY_NAME.items() if not v.required}
    neuron = provision.pip_install_plan(REL, {**defaults, "prefixbench_platform": "neuron"})
    assert neuron["gpu_wheels"] == "allow"
    refused = provision.pip_install_plan(REL, {"vllm_env_index_url": "https://x/simple",
                                               "prefixbench_platform": "neuron",
                                               "vllm_env_gpu_wheels": "refuse"})
    assert refused["gpu_wheels"] == "refuse"
    cpu = provision.pip_install_plan(REL, {"vllm_env_index_url": "https://x/simple",
                                           "prefixbench_platform": "cpu"})
    assert cpu["gpu_wheels"] == "allow"
