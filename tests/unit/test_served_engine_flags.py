"""servers.served_engine reads a server's flags as vLLM's argparse and the Neuron plugin do.

Sources (the module's docstring): vLLM 0.32's ``EngineArgs`` (``--scheduler-cls``,
``--[no-]async-scheduling``: argparse, the last occurrence wins) and aws-neuron-sdk
``vllm-neuron/docs/guides/reference-configuration.md`` at v2.31.1 and v2.32.0 ("Scheduling
options": async needs on-device sampling; "Sampling options": ``on_device_sampling_config``
is a mapping of sampling parameters, any mapping configures it, ``{}`` included)."""

from __future__ import annotations

import json

import pytest

from prefixbench.servers.served_engine import parse_cmdline, scheduler_of

SAMPLING = json.dumps({"neuron_config": {"on_device_sampling_config": {"global_topk": 64}}})


def _neuron(*flags: str) -> tuple[bool, str]:
    s = scheduler_of(["vllm", "serve", "/opt/model", *flags], "neuron", source="cmdline")
    assert s.kind == "neuron" and s.scheduler_cls is None
    return s.async_scheduling, s.source


def test_an_empty_on_device_sampling_config_is_on_device_sampling() -> None:
    empty = json.dumps({"neuron_config": {"on_device_sampling_config": {}}})
    assert _neuron("--additional-config", empty) == (
        True, "cmdline: the Neuron plugin's scheduler (on-device sampling configured)")
    null = json.dumps({"neuron_config": {"on_device_sampling_config": None}})
    assert _neuron("--additional-config", null) == (
        False, "cmdline: the Neuron plugin's scheduler (no on-device sampling)")


@pytest.mark.parametrize("config", [
    json.dumps(["neuron_config"]),                       # not a mapping
    json.dumps({"neuron_config": ["on_device_sampling_config"]}),
    json.dumps({"other": {"on_device_sampling_config": {}}}),
    "",
])
def test_no_neuron_config_mapping_is_no_on_device_sampling(config: str) -> None:
    assert _neuron("--additional-config", config) == (
        False, "cmdline: the Neuron plugin's scheduler (no on-device sampling)")


def test_the_last_async_flag_wins_as_with_argparse() -> None:
    cfg = ("--additional-config", SAMPLING)
    assert _neuron(*cfg, "--no-async-scheduling", "--async-scheduling")[0] is True
    assert _neuron(*cfg, "--async-scheduling", "--no-async-scheduling") == (
        False, "cmdline: the Neuron plugin's scheduler (--no-async-scheduling)")
    assert _neuron(*cfg, "--async-scheduling")[0] is True
    # Without on-device sampling, --async-scheduling does not make it async.
    assert _neuron("--async-scheduling")[0] is False


def test_the_equals_form_keeps_a_value_holding_equals_signs() -> None:
    config = json.dumps({"neuron_config": {"on_device_sampling_config": {}},
                         "note": "a=b=c"})
    assert _neuron(f"--additional-config={config}")[0] is True
    # The last occurrence wins, whichever form.
    assert _neuron(f"--additional-config={SAMPLING}", "--additional-config", "{}")[0] is False
    assert _neuron("--additional-config", "{}", f"--additional-config={SAMPLING}")[0] is True


def test_a_flag_without_its_value_is_not_read() -> None:
    s = scheduler_of(["vllm", "serve", "m", "--scheduler-cls"], "cpu", source="settings")
    assert (s.kind, s.async_scheduling, s.scheduler_cls) == ("vllm", False, None)
    assert s.source == "settings: vLLM's own scheduler (async off on the cpu platform)"
    assert _neuron("--additional-config")[0] is False


def test_a_bare_class_name_is_read_too() -> None:
    s = scheduler_of(["--scheduler-cls", "NeuronAsyncScheduler"], "cpu", source="s")
    assert (s.kind, s.async_scheduling) == ("neuron", True)
    s = scheduler_of(["--scheduler-cls", "a.b.AsyncScheduler"], "neuron", source="s")
    assert (s.kind, s.async_scheduling, s.source) == (
        "vllm", True, "s: --scheduler-cls a.b.AsyncScheduler")


def test_a_command_line_that_is_not_utf8_is_still_read() -> None:
    assert parse_cmdline(b"vllm\0serve\0\xff\0") == ["vllm", "serve", "\ufffd"]
