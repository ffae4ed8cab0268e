"""The settings catalogue and preflight validation of single values."""

from __future__ import annotations

from typing import Any

import pytest

from prefixbench.config import settings

VALID: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}


def check(**overrides: Any) -> settings.ValidationResult:
    values = {**VALID, **overrides}
    return settings.validate(values, host="h1", extra_names=values.keys())


def test_defaults_fill_what_the_inventory_leaves_out() -> None:
    result = check()
    assert result.ok, result.problems
    assert result.settings["vllm_service_max_num_seqs"] == 4
    assert result.settings["prefixbench_configurations"] == ["baseline", "cached"]


def test_every_catalogued_default_is_valid_for_its_own_setting() -> None:
    for setting in settings.CATALOGUE:
        if not setting.required:
            assert settings.coerce(setting, setting.default) == setting.default, setting.name


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("vllm_service_max_num_seqs", "4", 4),
        ("vllm_service_port", 8000.0, 8000),
        ("prefixbench_skip_provision", "yes", True),
        ("prefixbench_skip_provision", "False", False),
        ("prefixbench_neuron_release", 2.31, "2.31"),
    ],
)
def test_values_are_coerced_like_ansible_does(name: str, value: Any, expected: Any) -> None:
    result = check(**{name: value})
    assert result.ok, result.problems
    assert result.settings[name] == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("vllm_service_max_num_seqs", "four", "must be an integer, got 'four' (str)"),
        ("vllm_service_max_num_seqs", True, "must be an integer, got True (bool)"),
        ("vllm_service_max_num_seqs", 4.5, "must be an integer"),
        ("vllm_service_max_num_seqs", 0, "must be >= 1"),
        ("vllm_service_port", 70000, "must be <= 65535"),
        ("prefixbench_platform", "gpu", "'gpu' is not one of: neuron, cpu"),
        ("prefixbench_configurations", ["baseline", "warm"], "'warm' is not one of"),
        ("prefixbench_configurations", "baseline", "must be a list"),
        ("prefixbench_skip_provision", "maybe", "must be a boolean"),
        ("prefixbench_run_id", "../etc", "does not match the expected form"),
        ("prefixbench_instance_type", "TRN2 big", "does not match the expected form"),
        ("vllm_service_model", "/opt/m\nExecStart=/bin/sh", "control characters"),
        ("vllm_service_neuron_config", [1024], "must be a mapping"),
        ("prefixbench_workloads", [{"name": "a"}, "b"], "must be a mapping"),
        ("model_cache_s3_uri", "http://bucket", "does not match"),
    ],
)
def test_invalid_values_get_one_line_naming_host_and_setting(
        name: str, value: Any, message: str) -> None:
    result = check(**{name: value})
    assert len(result.problems) == 1, result.problems
    line = result.problems[0]
    assert line.startswith(f"h1: {name} ")
    assert message in line
    assert "\n" not in line


def test_required_setting_missing_says_where_to_set_it() -> None:
    result = settings.validate({"vllm_service_model": "/m"}, host="h1")
    assert result.problems == [
        "h1: prefixbench_instance_type is required (EC2 instance type of the host (host "
        "variable; the EC2 inventory sets it).) - set it in the inventory's group_vars or "
        "host_vars"]


def test_misspelt_owned_variable_is_reported_with_a_suggestion() -> None:
    values = {**VALID, "vllm_service_max_num_seq": 4}
    result = settings.validate(values, host="h1", extra_names=values.keys())
    assert result.problems == [
        "h1: vllm_service_max_num_seq is not a setting of this bundle "
        "- did you mean vllm_service_max_num_seqs?"]


def test_variables_of_other_owners_are_left_alone() -> None:
    values = {**VALID, "ansible_user": "ubuntu", "vault_hf_token": "x"}
    assert settings.validate(values, host="h1", extra_names=values.keys()).ok


def test_secret_settings_are_only_checked_for_presence() -> None:
    assert "model_cache_hf_token" in settings.SECRETS
    result = check(model_cache_hf_token=settings.REDACTED)
    assert result.ok


def test_plain_strips_subclasses() -> None:
    class Tagged(str):
        pass

    value = settings.plain({Tagged("k"): [Tagged("v"), 1, True]})
    assert value == {"k": ["v", 1, True]}
    assert type(next(iter(value))) is str
    assert type(value["k"][0]) is str


def test_cross_field_rules_run_only_on_valid_values() -> None:
    calls: list[int] = []

    def probe(values: Any) -> list[str]:
        calls.append(1)
        return ["probe says no"]

    settings.RULES.append(probe)
    try:
        assert check(vllm_service_port="x").problems[0].startswith("h1: vllm_service_port")
        assert calls == []
        assert check().problems == ["h1: probe says no"]
    finally:
        settings.RULES.remove(probe)


def test_a_model_profile_fills_the_model_and_tp_and_the_inventory_wins() -> None:
    base = {"prefixbench_instance_type": "trn2.48xlarge"}
    r20 = settings.validate({**base, "prefixbench_model_profile": "gpt-oss-20b"}, host="h1")
    assert r20.ok, r20.problems
    assert r20.settings["vllm_service_model"] == "/opt/models/gpt-oss-20b"
    assert r20.settings["model_cache_repo_id"] == "openai/gpt-oss-20b"
    assert r20.settings["vllm_service_tensor_parallel_size"] == 8
    mine = settings.validate({**base, "prefixbench_model_profile": "gpt-oss-120b",
                              "vllm_service_tensor_parallel_size": 16}, host="h1")
    assert mine.settings["vllm_service_tensor_parallel_size"] == 16
    assert mine.settings["vllm_service_served_model_name"] == "openai/gpt-oss-120b"


def test_an_unknown_profile_names_the_known_ones() -> None:
    result = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                                "prefixbench_model_profile": "llama"}, host="h1")
    assert result.problems == ["h1: prefixbench_model_profile 'llama' is not a known profile "
                               "(known: gpt-oss-120b, gpt-oss-20b)"]
