"""The tutorial's rules: every invalid setting is rejected with a message of its own."""

from __future__ import annotations

from typing import Any

import pytest

from prefixbench.config import settings

BASE: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}
NC = {"num_batched_tokens_buckets": [1024], "num_seqs_buckets": [4],
      "kv_segment_size_buckets": [1024], "on_device_sampling_config": {"all_greedy": True}}


def nc(**changes: Any) -> dict[str, Any]:
    out = dict(NC)
    for key, value in changes.items():
        if value is None:
            out.pop(key)
        else:
            out[key] = value
    return out


# (overrides, the message that must appear) - each line a different mistake.
INVALID: list[tuple[dict[str, Any], str]] = [
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=[2048])},
     "kv_segment_size_buckets [2048] must equal num_batched_tokens_buckets [1024]"),
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=[768],
                                       num_batched_tokens_buckets=[768]),
      "vllm_service_max_num_batched_tokens": 768},
     "kv_segment_size_buckets [768] not supported"),
    ({"vllm_service_max_num_batched_tokens": 2048},
     "vllm_service_max_num_batched_tokens 2048 must match the prefill segment"),
    # vllm-neuron 0.21: "Only a single segment size is supported at this time".
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=[512, 1024],
                                       num_batched_tokens_buckets=[512, 1024])},
     "kv_segment_size_buckets [512, 1024] has 2 sizes: vllm-neuron supports a single "
     "segment size (aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/"
     "reference-configuration.md, \"Prefix caching constraints\"): keep one, e.g. [512]"),
    # ... and "Block size must divide evenly into the segment size".
    ({"vllm_service_block_size": 48},
     "vllm_service_block_size 48 does not divide kv_segment_size_buckets [1024]"),
    ({"vllm_service_num_gpu_blocks_override": 4096},
     "vllm_service_num_gpu_blocks_override on Neuron needs vllm_service_block_size"),
    ({"vllm_service_neuron_config": nc(num_seqs_buckets=[8])},
     "num_seqs_buckets [8] must reach vllm_service_max_num_seqs 4"),
    # The plugin's own start-up refusals (vllm-neuron 0.24.0.1.1.0, bucket_utils.py
    # resolve_segmented_prefill_config, the model runner's APC check): without
    # kv_segment_size_buckets and with max_num_batched_tokens below max_model_len the
    # plugin makes max_num_batched_tokens the segment, which must be a supported size ...
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=None,
                                       num_batched_tokens_buckets=None),
      "vllm_service_max_num_batched_tokens": 768},
     "vllm_service_max_num_batched_tokens 768 is below vllm_service_max_model_len 8192, so "
     "the Neuron plugin turns segmented prefill on with it as the segment, and it is not a "
     "supported segment size: use one of 512, 1024, 2048, 4096"),
    # ... and the configured prefill buckets must equal it ...
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=None,
                                       num_batched_tokens_buckets=[512, 1024]),
      "vllm_service_max_num_batched_tokens": 1024},
     "num_batched_tokens_buckets [512, 1024] must be [1024]: without kv_segment_size_buckets"),
    # ... and prefix caching without segmented prefill is refused.
    ({"vllm_service_neuron_config": nc(kv_segment_size_buckets=None,
                                       num_batched_tokens_buckets=None),
      "vllm_service_max_num_batched_tokens": 8192},
     "vllm_service_max_num_batched_tokens 8192 is not below vllm_service_max_model_len "
     "8192: single-shot prefill, no segmented prefill, and the Neuron plugin refuses "
     "prefix caching without it"),
    ({"vllm_service_neuron_config": nc(num_seqs_buckets="4")},
     "num_seqs_buckets must be a non-empty list of integers"),
    ({"vllm_service_neuron_config": nc(num_seqs_buckets=[])},
     "num_seqs_buckets must be a non-empty list of integers, got []"),
    ({"vllm_service_neuron_config": nc(on_device_sampling_config=True)},
     "on_device_sampling_config must be a mapping"),
    ({"vllm_service_neuron_config": nc(kv_segment_size=[1024])},
     "vllm_service_neuron_config.kv_segment_size is not a neuron_config key"),
    ({"vllm_service_environment": {"NEURON_RT_ALLOW_LEGACY_NEFF": "1"}},
     "NEURON_RT_ALLOW_LEGACY_NEFF is for Trn3 only and this host is trn2"),
    ({"vllm_service_environment": {"BAD NAME": "1"}},
     "'BAD NAME' is not a valid variable name"),
    ({"vllm_service_environment": {"X": "a\nb"}},
     "vllm_service_environment.X must not contain control characters"),
    ({"vllm_service_environment": {"X": ["a"]}},
     "vllm_service_environment.X must be a string or number"),
    ({"vllm_service_max_num_seqs": "four"}, "must be an integer, got 'four'"),
    ({"vllm_service_port": 0}, "vllm_service_port must be >= 1"),
    ({"vllm_service_model": "/opt/m\nExecStartPre=/bin/sh"}, "control characters"),
    ({"vllm_service_cache_root": "relative/dir"}, "vllm_service_cache_root"),
    ({"vllm_service_tensor_parallel_size": "eight"}, "must be an integer"),
    ({"vllm_service_hf_overrides": "{}"}, "vllm_service_hf_overrides must be a mapping"),
]


@pytest.mark.parametrize(("overrides", "message"), INVALID,
                         ids=[m[:40] for _, m in INVALID])
def test_each_invalid_setting_is_rejected_with_its_own_message(
        overrides: dict[str, Any], message: str) -> None:
    result = settings.validate({**BASE, **overrides}, host="h1")
    assert not result.ok
    assert any(message in p for p in result.problems), result.problems
    assert all(p.startswith("h1: ") and "\n" not in p for p in result.problems)


def test_messages_are_distinct() -> None:
    assert len({m for _, m in INVALID}) == len(INVALID)


def test_the_tutorials_own_settings_pass() -> None:
    assert settings.validate(BASE, host="h1").ok


def test_a_simulated_instance_type_is_refused_on_neuron() -> None:
    result = settings.validate({**BASE, "prefixbench_instance_type": "trn3sim.48xlarge"},
                               host="h1")
    assert len(result.problems) == 1, result.problems
    problem = result.problems[0]
    assert problem.startswith("h1: prefixbench_instance_type: trn3sim.48xlarge is a "
                              "simulated instance type, not one for prefixbench_platform "
                              "neuron: set a real one (")
    assert problem.endswith("or prefixbench_platform: cpu for the simulated fleet")
    offered = problem.split("set a real one (")[1].split(")")[0].split(", ")
    assert "trn2.48xlarge" in offered and not any("sim" in t for t in offered)
    # The simulated fleet runs it on platform cpu, as it should.
    assert settings.validate({**BASE, "prefixbench_instance_type": "trn3sim.48xlarge",
                              "prefixbench_platform": "cpu"}, host="h1").ok


def test_trn3_host_may_not_set_the_bundles_own_variable_by_hand() -> None:
    result = settings.validate({**BASE, "prefixbench_instance_type": "trn3.48xlarge",
                                "vllm_service_environment":
                                    {"NEURON_RT_ALLOW_LEGACY_NEFF": "1"}}, host="h1")
    assert result.problems == ["h1: vllm_service_environment.NEURON_RT_ALLOW_LEGACY_NEFF is "
                               "set by the bundle on Trn3 hosts: remove it from the inventory"]


def test_the_api_stays_on_loopback_unless_opted_in_with_a_key() -> None:
    from prefixbench.config import settings as catalogue  # noqa: PLC0415

    base = {"prefixbench_instance_type": "trn2.48xlarge", "vllm_service_model": "/m",
            "prefixbench_platform": "cpu"}
    for host in ("0.0.0.0", "10.1.2.3", "trn-a.internal"):
        problems = catalogue.validate({**base, "vllm_service_host": host}, "h1").problems
        assert problems == [f"h1: vllm_service_host {host} is not a loopback address: the "
                            "API would face the network; keep 127.0.0.1 (the benchmark runs "
                            "on the host itself), or set vllm_service_expose: true and a "
                            "vllm_service_api_key from Ansible Vault"]
        opted = {**base, "vllm_service_host": host, "vllm_service_expose": True}
        assert catalogue.validate(opted, "h1").problems == [
            f"h1: vllm_service_host {host} with vllm_service_expose needs an API key: set "
            "vllm_service_api_key (in Ansible Vault)"]
        # Preflight passes a secret as a placeholder, never its value.
        keyed = {**opted, "vllm_service_api_key": catalogue.REDACTED}
        assert catalogue.validate(keyed, "h1").problems == []
    for host in ("127.0.0.1", "::1", "localhost"):
        assert catalogue.validate({**base, "vllm_service_host": host}, "h1").problems == []


def test_the_plugins_automatic_segmented_prefill_is_accepted() -> None:
    """Without kv_segment_size_buckets (and num_batched_tokens_buckets), a supported
    max_num_batched_tokens below max_model_len is the segment the plugin picks itself
    (resolve_segmented_prefill_config): a server it starts, so preflight passes it."""
    auto = {**BASE, "vllm_service_neuron_config": nc(kv_segment_size_buckets=None,
                                                     num_batched_tokens_buckets=None)}
    result = settings.validate(auto, host="h1")
    assert result.ok, result.problems
    assert settings.validate({**auto, "vllm_service_max_num_batched_tokens": 2048},
                             host="h1").ok


def test_a_block_size_that_divides_the_segment_is_accepted() -> None:
    assert settings.validate({**BASE, "vllm_service_block_size": 32}, host="h1").ok
    assert settings.validate({**BASE, "vllm_service_block_size": 1024}, host="h1").ok


def _with_prefix(prefix_len: int, suffix_len: int) -> settings.ValidationResult:
    workload = {"name": "rag", "dataset_name": "prefix_repetition", "num_prompts": 20,
                "prefix_repetition_prefix_len": prefix_len,
                "prefix_repetition_suffix_len": suffix_len,
                "prefix_repetition_num_prefixes": 2, "prefix_repetition_output_len": 16,
                "max_concurrency": 1}
    return settings.validate({**BASE, "prefixbench_workloads": [workload]}, host="h1")


def test_a_prefix_is_worth_caching_when_warm_requests_run_fewer_chunks() -> None:
    """prefix-caching.md's rule, not the tutorial's whole-segment sentence: an 800-token
    prefix (25 blocks of 32) with a 600-token suffix runs ceil(600 / 1024) = 1 chunk warm
    against ceil(1400 / 1024) = 2 cold, so it is accepted; a 1000-token prefix (992 tokens
    hit) with a 1024-token suffix runs ceil(1032 / 1024) = 2, as cold: refused."""
    assert _with_prefix(800, 600).ok, _with_prefix(800, 600).problems
    refused = _with_prefix(1000, 1024)
    assert not refused.ok
    assert any("a warm request of 2024 prompt tokens hits 992 and still runs "
               "ceil((2024 - 992) / 1024) = 2 prefill chunks, as many as a cold one" in p
               for p in refused.problems), refused.problems
