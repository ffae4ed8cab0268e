"""The compile route of each release: where its graphs are kept (compile_key.cache_dir)
and what its units set to compile on its route (compile_route.environment).

On 2.33 the native route is the default and its precompile cache is on only when
VLLM_NEURON_BACKEND names it (neuron_native or neuron), in a persistent VLLM_CACHE_ROOT
(vllm-neuron docs/guides/features-guide at v2.33.0, "Compilation"; how-to-precompile-cache,
date_updated 2026-10-13). 2.31/2.32 keep their graphs in
$VLLM_CACHE_ROOT/neuron/compile_cache (design/compilation/compilation_cache.md, as at
aws-neuron-sdk v2.32.0).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from prefixbench.config import settings
from prefixbench.hosts import releases
from prefixbench.servers import compile_cache, server

NATIVE = "VLLM_NEURON_BACKEND=neuron_native"


def valid(release: str, **overrides: Any) -> dict[str, Any]:
    result = settings.validate({"prefixbench_neuron_release": release,
                                "prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "openai/gpt-oss-120b", **overrides},
                               host="h")
    assert result.ok, result.problems
    return result.settings


def test_2_31_and_2_32_keep_their_graphs_in_the_plugins_local_cache() -> None:
    for name in ("2.31.0", "2.31.0-vllm-beta", "2.31.1", "2.32.0"):
        rel = releases.load_release(name)
        assert rel.compile_cache_dir == "neuron/compile_cache", name
        assert rel.compile_route_environment == {}, name
        s = valid(name)
        assert compile_cache.cache_dir(s).endswith("/neuron/compile_cache")


def test_a_release_on_the_native_route_names_it_in_both_units(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A test double of a release whose data names the native route (as 2.33.0's does).
    real = releases.load_release

    def load(name: str) -> releases.Release:
        rel = real(name)
        if name != "2.32.0":
            return rel
        return replace(rel, compile_route_environment={"VLLM_NEURON_BACKEND": "neuron_native"},
                       compile_cache_dir="")

    s = valid("2.32.0")
    before = server.unit_spec(s, "cached", "/v/bin/vllm").environment
    assert not [line for line in before if line.startswith("VLLM_NEURON_BACKEND")]
    monkeypatch.setattr(releases, "load_release", load)
    for configuration in server.CONFIGURATIONS:
        env = server.unit_spec(s, configuration, "/v/bin/vllm").environment
        assert NATIVE in env, env
    # The cache stays where both units share it (persistent, the precompile cache's need).
    assert "VLLM_CACHE_ROOT=/var/cache/vllm-prefixbench" in env
    # The inventory's environment file still overrides it (go back to the XLA route).
    private = server.private_environment(
        {**s, "vllm_service_environment": {"VLLM_NEURON_BACKEND": "neuron_xla"}})
    assert private == {"VLLM_NEURON_BACKEND": "neuron_xla"}
    # Where it does not say where its graphs are, nothing is shared: the host compiles.
    assert compile_cache.cache_dir(s) == "/var/cache/vllm-prefixbench"


def test_the_loader_refuses_a_route_it_cannot_print(tmp_path: Any) -> None:
    text = (releases.RELEASES_DIR / "2.32.0.yml").read_text()
    bad = text + "compile_route:\n  environment: {vllm-backend: native}\n  source: x\n"
    (tmp_path / "2.32.0.yml").write_text(bad)
    with pytest.raises(releases.ReleaseError, match=r"compile_route\.environment"):
        releases.load_release("2.32.0", tmp_path)
    nosource = text + "compile_route:\n  environment: {VLLM_NEURON_BACKEND: neuron_native}\n"
    (tmp_path / "2.32.0.yml").write_text(nosource)
    with pytest.raises(releases.ReleaseError, match=r"compile_route\.source"):
        releases.load_release("2.32.0", tmp_path)
    escape = text.replace("cache_dir: neuron/compile_cache", "cache_dir: ../etc")
    (tmp_path / "2.32.0.yml").write_text(escape)
    with pytest.raises(releases.ReleaseError, match=r"compile_key\.cache_dir"):
        releases.load_release("2.32.0", tmp_path)
