"""Start-up timeouts and the tiktoken vocabulary, from the model profile to the unit."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest

from prefixbench.config import settings
from prefixbench.engines import tokenizer_vocab
from prefixbench.servers import server


def check(**values: Any) -> settings.ValidationResult:
    values = {"prefixbench_instance_type": "trn2.48xlarge",
              "prefixbench_neuron_release": "2.31.1", **values}
    return settings.validate(values, host="h1", extra_names=values.keys())


def valid(**values: Any) -> dict[str, Any]:
    result = check(**values)
    assert result.ok, result.problems
    return result.settings


def test_the_120b_profile_sets_a_cold_compile_budget_on_neuron() -> None:
    s = valid(prefixbench_model_profile="gpt-oss-120b")
    assert (s["vllm_service_engine_ready_timeout"], s["vllm_service_health_timeout"]) \
        == (5400, 7200)
    env = server.environment(s, "cached", "/run/x")
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "5400"
    assert env["TIKTOKEN_ENCODINGS_BASE"] == "/opt/models/tiktoken"


def test_without_a_profile_vllm_keeps_its_own_engine_timeout() -> None:
    s = valid(vllm_service_model="/m")
    assert s["vllm_service_health_timeout"] == 1800
    env = server.environment(s, "cached", "/run/x")
    assert "VLLM_ENGINE_READY_TIMEOUT_S" not in env
    assert "TIKTOKEN_ENCODINGS_BASE" not in env


def test_the_engine_timeout_is_neuron_only_and_the_inventory_environment_wins() -> None:
    cpu = valid(prefixbench_model_profile="gpt-oss-20b", prefixbench_platform="cpu")
    env = server.environment(cpu, "baseline", "/run/x")
    assert "VLLM_ENGINE_READY_TIMEOUT_S" not in env
    assert env["TIKTOKEN_ENCODINGS_BASE"] == "/opt/models/tiktoken"
    mine = valid(prefixbench_model_profile="gpt-oss-120b", model_cache_tiktoken_dir="/v",
                 vllm_service_environment={"VLLM_ENGINE_READY_TIMEOUT_S": 60})
    env = server.process_environment(mine, "baseline", "/run/x")
    assert (env["VLLM_ENGINE_READY_TIMEOUT_S"], env["TIKTOKEN_ENCODINGS_BASE"]) == ("60", "/v")


def test_health_wait_shorter_than_the_engine_wait_is_refused() -> None:
    result = check(prefixbench_model_profile="gpt-oss-120b", vllm_service_health_timeout=600)
    assert result.problems == [
        "h1: vllm_service_health_timeout 600 s is shorter than "
        "vllm_service_engine_ready_timeout 5400 s: the bundle would give up on a server "
        "vLLM still lets start; set it to 5400 or more"]
    assert check(vllm_service_model="/m", vllm_service_health_timeout=30).problems == [
        "h1: vllm_service_health_timeout must be >= 60, got 30"]


def test_vocabulary_hashes_are_the_published_ones() -> None:
    assert tokenizer_vocab.expected_sha256(["o200k_base.tiktoken"]) == {
        "o200k_base.tiktoken":
            "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"}
    assert tokenizer_vocab.expected_sha256(["cl100k_base.tiktoken"])[
        "cl100k_base.tiktoken"].startswith("223921b7")
    with pytest.raises(tokenizer_vocab.UnknownVocabFile, match=r"r50k_base\.tiktoken"):
        tokenizer_vocab.expected_sha256(["r50k_base.tiktoken"])
    assert tokenizer_vocab.download_url(
        settings.catalogue_default("model_cache_tiktoken_base_url"), "o200k_base.tiktoken") \
        == "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def test_a_vocabulary_file_without_a_known_hash_is_refused() -> None:
    result = check(prefixbench_model_profile="gpt-oss-20b",
                   model_cache_tiktoken_files=["o200k_base.tiktoken", "x.tiktoken"])
    assert result.problems == [
        "h1: model_cache_tiktoken_files: no published sha256 for x.tiktoken (known: "
        "cl100k_base.tiktoken, o200k_base.tiktoken)"]
    assert "is empty" in check(prefixbench_model_profile="gpt-oss-20b",
                               model_cache_tiktoken_files=[]).problems[0]
    assert "does not match" in check(vllm_service_model="/m",
                                     model_cache_tiktoken_files=["../x"]).problems[0]
    assert "does not match" in check(vllm_service_model="/m",
                                     model_cache_tiktoken_base_url="ftp://x/").problems[0]


#: The files of openai/gpt-oss-120b at the root, in original/ and in metal/ (B.md §2).
GPT_OSS_FILES = [
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "model.safetensors.index.json",
    *(f"model-{i:05d}-of-00014.safetensors" for i in range(15)),
    "README.md", "LICENSE", "USAGE_POLICY", ".gitattributes",
    "original/config.json", "original/dtypes.json",
    *(f"original/model--{i:05d}-of-00007.safetensors" for i in range(1, 8)),
    "metal/model.bin",
]


def test_hub_patterns_keep_what_vllm_loads_and_nothing_else() -> None:
    """huggingface_hub filters with fnmatch, where `*` also matches `/`."""
    include = settings.catalogue_default("model_cache_hf_include")
    exclude = settings.catalogue_default("model_cache_hf_exclude")
    kept = [f for f in GPT_OSS_FILES
            if any(fnmatch.fnmatch(f, p) for p in include)
            and not any(fnmatch.fnmatch(f, p) for p in exclude)]
    assert len(kept) == 7 + 15
    assert not [f for f in kept if "/" in f]
    assert "chat_template.jinja" in kept and "model-00000-of-00014.safetensors" in kept


def test_the_new_role_settings_and_their_defaults() -> None:
    expected = {
        "model_cache_tiktoken": False,
        "model_cache_tiktoken_dir": "/opt/models/tiktoken",
        "model_cache_tiktoken_files": ["o200k_base.tiktoken"],
        "neuron_sdk_load_driver": True,
        "neuron_sdk_reboot_if_no_devices": False,
        "vllm_service_device_group": "neuron",
        "prefixbench_model_fit": "refuse",
    }
    assert {k: settings.catalogue_default(k) for k in expected} == expected
    assert valid(vllm_service_model="/m", vllm_service_device_group="")[
        "vllm_service_device_group"] == ""
    assert "does not match" in check(vllm_service_model="/m",
                                     vllm_service_device_group="Neuron Users").problems[0]
    with pytest.raises(KeyError):
        settings.catalogue_default("vllm_service_model")
