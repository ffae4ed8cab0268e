"""The two servers of the tutorial as argv, environment and unit lines."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prefixbench.config import settings
from prefixbench.hosts import instances
from prefixbench.servers import sandbox, server

TUTORIAL: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    # The host's release, as roles/neuron_sdk tasks_from: release reads it.
    "prefixbench_neuron_release": "2.31.1",
    "vllm_service_model": "openai/gpt-oss-120b",
}


def valid(**overrides: Any) -> dict[str, Any]:
    result = settings.validate({**TUTORIAL, **overrides}, host="h")
    assert result.ok, result.problems
    return result.settings


def test_baseline_is_the_tutorials_step_1_command() -> None:
    argv = server.serve_argv(valid(), "baseline")
    expected = shlex.split("""vllm serve openai/gpt-oss-120b
        --tensor-parallel-size 8 --max-num-seqs 4 --max-model-len 8192
        --max-num-batched-tokens 1024 --no-enable-prefix-caching""")
    assert argv[: len(expected)] == expected
    hf = argv[argv.index("--hf-overrides") + 1]
    assert hf == '{"quantization_config": {}}'
    additional = argv[argv.index("--additional-config") + 1]
    assert additional == (
        '{"neuron_config": {"num_batched_tokens_buckets": [1024], "num_seqs_buckets": [4], '
        '"kv_segment_size_buckets": [1024], "on_device_sampling_config": '
        '{"all_greedy": true}}}')
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8000"]


def test_cached_differs_from_baseline_only_by_the_caching_flag() -> None:
    s = valid()
    baseline = server.serve_argv(s, "baseline")
    cached = server.serve_argv(s, "cached")
    assert [a for a in baseline if a != "--no-enable-prefix-caching"] == cached


def test_cpu_platform_leaves_out_neuron_only_options() -> None:
    argv = server.serve_argv(valid(prefixbench_platform="cpu", vllm_service_hf_overrides={}),
                             "cached")
    assert "--additional-config" not in argv
    assert "--hf-overrides" not in argv


@pytest.mark.parametrize(("instance", "has_legacy_neff"),
                         [("trn2.48xlarge", False), ("trn3.48xlarge", True)])
def test_environment_follows_the_tutorial(instance: str, has_legacy_neff: bool) -> None:
    env = server.environment(valid(prefixbench_instance_type=instance), "cached", "/run/x")
    assert env["VLLM_NEURON_COMPILATION_TIMEOUT"] == "1200"
    assert env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "1200"
    assert ("NEURON_RT_ALLOW_LEGACY_NEFF" in env) is has_legacy_neff
    assert env["PROMETHEUS_MULTIPROC_DIR"] == "/run/x/prometheus"
    assert env["VLLM_CACHE_ROOT"] == "/var/cache/vllm-prefixbench"


def test_cpu_environment_has_no_neuron_variables() -> None:
    env = server.process_environment(valid(prefixbench_platform="cpu",
                                   vllm_service_environment={"VLLM_CPU_KVCACHE_SPACE": 1}),
                             "baseline", "/run/x")
    assert not any(k.startswith(("VLLM_NEURON", "NEURON_")) for k in env)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # vLLM's AOT artifact does not load back with torch 2.13: the Inductor FX graph
    # cache does, kept under VLLM_CACHE_ROOT (PrivateTmp empties /tmp at each start).
    assert env["VLLM_USE_AOT_COMPILE"] == "0"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/var/cache/vllm-prefixbench/inductor"


def test_neuron_environment_keeps_vllm_compile_defaults() -> None:
    env = server.environment(valid(), "cached", "/run/x")
    assert "VLLM_USE_AOT_COMPILE" not in env and "TORCHINDUCTOR_CACHE_DIR" not in env


@pytest.mark.parametrize(
    ("arg", "quoted"),
    [
        ("--port", "--port"),
        ("/opt/models/x", "/opt/models/x"),
        ('{"a": 1}', '"{\\"a\\": 1}"'),
        ("100%", "100%%"),
        ("$HOME", "\"$$HOME\""),
        ("a b", '"a b"'),
        ("back\\slash", '"back\\\\slash"'),
        ("", '""'),
    ],
)
def test_systemd_quoting(arg: str, quoted: str) -> None:
    assert server.systemd_quote(arg) == quoted


def test_systemd_quoting_refuses_control_characters() -> None:
    with pytest.raises(ValueError, match="control character"):
        server.systemd_quote("a\nb")


def test_unit_spec_pairs_the_units_as_conflicting() -> None:
    spec = server.unit_spec(valid(), "baseline", "/opt/venv/bin/vllm")
    assert spec.name == "vllm-baseline.service"
    assert spec.conflicts == "vllm-cached.service"
    assert spec.exec_start.startswith("/opt/venv/bin/vllm serve openai/gpt-oss-120b ")
    assert '"PROMETHEUS_MULTIPROC_DIR=/run/vllm-baseline/prometheus"' not in spec.environment
    assert "PROMETHEUS_MULTIPROC_DIR=/run/vllm-baseline/prometheus" in spec.environment


def test_family_of_instance_types() -> None:
    assert instances.family("trn2.48xlarge") == "trn2"
    assert instances.family("trn2u.48xlarge") == "trn2"
    assert instances.family("trn3pds.48xlarge") == "trn3"
    assert instances.family("inf2.xlarge") == "inf2"


def test_environment_values_reach_the_process_unaltered() -> None:
    # Environment= does no $ expansion (systemd.exec(5)): a doubled $ would reach vLLM as
    # "$$". % is a specifier there too, so it is doubled; quotes are escaped.
    assert server.environment_lines({"TOKEN": "a$b", "P": "50%", "Q": 'say "hi"'}) == [
        'P=50%%', '"Q=say \\"hi\\""', '"TOKEN=a$b"']
    # In ExecStart= $ is expanded, so there it is escaped.
    assert server.exec_line(["echo", "a$b"]) == 'echo "a$$b"'


def test_internal_channels_stay_on_loopback_when_the_api_does() -> None:
    local = server.environment({"vllm_service_host": "127.0.0.1",
                                "prefixbench_platform": "cpu"}, "cached", "/run/x")
    assert {k: local[k] for k in server.LOOPBACK_ENVIRONMENT} == {
        "VLLM_HOST_IP": "127.0.0.1", "VLLM_LOOPBACK_IP": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo"}
    assert "IPAddressDeny=any" in sandbox.hardening("cpu", loopback_only=True,
                                                    level="strict")
    exposed = server.environment({"vllm_service_host": "10.0.0.5",
                                  "prefixbench_platform": "cpu"}, "cached", "/run/x")
    assert not set(server.LOOPBACK_ENVIRONMENT) & set(exposed)
    assert "IPAddressDeny=any" not in sandbox.hardening("cpu", loopback_only=False,
                                                        level="strict")
    assert server.is_loopback("::1") and server.is_loopback("localhost")
    assert not server.is_loopback("0.0.0.0")


def test_inventory_environment_and_api_key_go_to_the_root_only_file() -> None:
    s = valid(prefixbench_platform="cpu",
              vllm_service_environment={"VLLM_CPU_KVCACHE_SPACE": 1, "PB": "a$b%c \"q\""})
    spec = server.unit_spec(s, "cached", "/opt/venv/bin/vllm")
    key = "k3y-0123456789abcdef+/="
    assert not any("VLLM_CPU_KVCACHE_SPACE" in line or "PB=" in line
                   for line in spec.environment)
    assert spec.environment_file == server.ENV_FILE
    text = server.env_file_text(server.private_environment(s, key))
    assert text.splitlines()[1:] == [
        "PB='a$b%c \"q\"'", f"VLLM_API_KEY='{key}'", "VLLM_CPU_KVCACHE_SPACE='1'"]
    assert key not in spec.exec_start and all(key not in line for line in spec.environment)


def test_env_file_refuses_what_it_cannot_carry_verbatim() -> None:
    with pytest.raises(ValueError, match="single quote"):
        server.env_file_text({"X": "it's"})
    with pytest.raises(ValueError, match="single quote or a control"):
        server.env_file_text({"X": "a\nb"})
    with pytest.raises(ValueError, match="16 or more characters") as err:
        server.private_environment({}, "short$key")
    assert "short$key" not in str(err.value)


def test_the_bench_reads_the_key_on_the_host_and_sends_it(tmp_path: Path) -> None:
    """The wrapper, run by a real /bin/sh: the key from the file becomes OPENAI_API_KEY
    of the bench; it is nowhere on the command line."""
    key = "k3y-0123456789abcdef+/="
    env_file = tmp_path / "vllm.env"
    env_file.write_text(server.env_file_text(
        server.private_environment({"vllm_service_environment": {"A": "x$y"}}, key)))
    argv = server.bench_argv_with_key(
        [sys.executable, "-c", "import os; print(repr(os.environ.get('OPENAI_API_KEY')), "
         "repr(os.environ.get('A')))"], str(env_file))
    assert key not in " ".join(argv)
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == [repr(key), "'x$y'"]
    # Without a key in the file the bench sends none (vLLM skips an empty key).
    env_file.write_text(server.env_file_text({}))
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["''", "None"]


def test_the_unit_runs_with_the_venvs_bin_on_path_and_awss_open_files_limit() -> None:
    spec = server.unit_spec(valid(), "cached", "/opt/venv/bin/vllm")
    path = next(line for line in spec.environment if line.startswith("PATH="))
    # neuronx-cc, which the plugin runs as a subprocess, lives in the venv's bin.
    assert path.split("=", 1)[1].split(":")[:2] == ["/opt/venv/bin", "/opt/aws/neuron/bin"]
    assert spec.limit_nofile == 65536
    cpu = server.unit_spec(valid(prefixbench_platform="cpu"), "cached", "/opt/venv/bin/vllm")
    assert cpu.limit_nofile == 16384


def test_sandbox_levels_each_directive_with_its_reason() -> None:
    strict = sandbox.sandbox("neuron", level="strict")
    first = sandbox.sandbox("neuron", level="aws")
    assert sandbox.sandbox("neuron", level="off") == []
    assert all(d.reason for d in strict)
    keys = {d.key for d in strict} - {d.key for d in first}
    # The first-start level leaves alone what could cut the runtime's devices, TCP or
    # system calls; strict adds it.
    assert {"DevicePolicy", "DeviceAllow", "IPAddressDeny", "SystemCallFilter"} <= keys
    assert {"ProtectSystem", "NoNewPrivileges"} <= {d.key for d in first}
    lines = server.unit_spec(valid(), "cached", "/v/bin/vllm").hardening
    assert "ProtectSystem=strict" in lines and "DevicePolicy=closed" not in lines
    assert server.unit_spec(valid(vllm_service_sandbox="off"), "cached",
                            "/v/bin/vllm").hardening == ()
    with pytest.raises(ValueError, match="vllm_service_sandbox must be one of"):
        sandbox.sandbox("neuron", level="loose")
    bad = settings.validate({**TUTORIAL, "vllm_service_sandbox": "loose"}, host="h")
    assert not bad.ok
