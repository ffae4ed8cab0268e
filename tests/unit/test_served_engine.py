"""The record's expectation models the scheduler the server runs, read from its command
line (prefixbench.servers.served_engine), and the settings that make a CPU server
schedule as Neuron does (--scheduler-cls, --disable-hybrid-kv-cache-manager)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cachesim import FULL_16, HYBRID_16
from test_hybrid_callers import long_prefix
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import benchrun
from prefixbench.config import settings
from prefixbench.engines.platforms import engine_model
from prefixbench.engines.schedconfig import Serving
from prefixbench.measure.metrics import CacheConfig
from prefixbench.predict.served import served_expectation
from prefixbench.servers import server
from prefixbench.servers.served_engine import parse_cmdline, scheduler_of

FOUR = Serving(concurrency=4, max_num_seqs=4, max_num_batched_tokens=512)
REFERENCE = "prefixbench_neuron_scheduler.NeuronScheduler"
NEURON_CONFIG = json.dumps({"neuron_config": {"on_device_sampling_config": {"all_greedy": True}}})


def _argv(*extra: str) -> list[str]:
    return ["/opt/venv/bin/python3", "/opt/venv/bin/vllm", "serve", "/opt/model", *extra]


def test_the_command_line_names_the_scheduler() -> None:
    ref = scheduler_of(_argv("--scheduler-cls", REFERENCE), "cpu", source="cmdline")
    assert (ref.kind, ref.async_scheduling, ref.scheduler_cls) == ("neuron", False, REFERENCE)
    assert ref.source == f"cmdline: --scheduler-cls {REFERENCE}"
    both = scheduler_of(_argv("--scheduler-cls=x.NeuronAsyncScheduler"), "cpu", source="s")
    assert (both.kind, both.async_scheduling) == ("neuron", True)
    own = scheduler_of(_argv("--scheduler-cls", "vllm.v1.core.sched.scheduler.Scheduler"),
                       "cpu", source="s")
    assert (own.kind, own.async_scheduling) == ("vllm", False)
    assert scheduler_of(_argv(), "cpu", source="s").kind == "vllm"


def test_on_neuron_async_follows_on_device_sampling() -> None:
    """reference-configuration.md (v2.32.0): async is the default and needs on-device
    sampling; --no-async-scheduling turns it off."""
    served = scheduler_of(_argv("--additional-config", NEURON_CONFIG), "neuron", source="s")
    assert (served.kind, served.async_scheduling) == ("neuron", True)
    assert "on-device sampling configured" in served.source
    off = scheduler_of(_argv("--additional-config", NEURON_CONFIG, "--no-async-scheduling"),
                       "neuron", source="s")
    assert (off.kind, off.async_scheduling) == ("neuron", False)
    cpu_sampling = scheduler_of(
        _argv("--additional-config", json.dumps({"neuron_config": {}})), "neuron", source="s")
    assert (cpu_sampling.kind, cpu_sampling.async_scheduling) == ("neuron", False)
    assert "no on-device sampling" in cpu_sampling.source
    broken = scheduler_of(_argv("--additional-config", "{not json"), "neuron", source="s")
    assert broken.async_scheduling is False


def test_proc_cmdline_is_split_on_nul() -> None:
    assert parse_cmdline("a\0b c\0--x\0") == ["a", "b c", "--x"]
    assert parse_cmdline(b"vllm\0serve\0") == ["vllm", "serve"]
    assert parse_cmdline("") == []


def _settings(**over: object) -> dict[str, Any]:
    result = settings.validate({"prefixbench_platform": "cpu",
                                "prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "/opt/model",
                                "vllm_service_max_model_len": 8192, **over}, host="h")
    assert result.ok, result.problems
    return result.settings


def test_the_unit_carries_the_scheduler_and_the_full_attention_switch() -> None:
    argv = server.serve_argv(_settings(
        vllm_service_scheduler_cls=REFERENCE,
        vllm_service_disable_hybrid_kv_cache_manager=True), "cached")
    assert argv[argv.index("--scheduler-cls") + 1] == REFERENCE
    assert "--disable-hybrid-kv-cache-manager" in argv
    plain = server.serve_argv(_settings(), "cached")
    assert "--scheduler-cls" not in plain
    assert "--disable-hybrid-kv-cache-manager" not in plain


def test_preflight_keeps_the_fleets_overrides_off_neuron() -> None:
    result = settings.validate({
        "prefixbench_instance_type": "trn2.48xlarge", "prefixbench_neuron_release": "2.32.0",
        "vllm_service_model": "openai/gpt-oss-120b", "vllm_service_scheduler_cls": REFERENCE,
        "vllm_service_disable_hybrid_kv_cache_manager": True}, host="h")
    problems = [p for p in result.problems if "vllm_service_" in p and (
        "scheduler_cls" in p or "hybrid" in p)]
    assert len(problems) == 2, result.problems
    assert any("would replace the Neuron plugin's own scheduler" in p for p in problems)
    bad = settings.validate({"prefixbench_platform": "cpu", "vllm_service_model": "/m",
                             "prefixbench_instance_type": "trn2.48xlarge",
                             "vllm_service_scheduler_cls": "not a class"}, host="h")
    assert not bad.ok and any("vllm_service_scheduler_cls" in p for p in bad.problems)


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("run") / "tokenizer")


def test_the_record_models_what_the_server_runs(tok: Path) -> None:
    """A cpu host whose server runs the reference Neuron scheduler over full attention:
    the expectation is the sync Neuron model's, and the record says where it was read."""
    w = long_prefix()
    full = CacheConfig.from_labels(FULL_16)
    ref = scheduler_of(_argv("--scheduler-cls", REFERENCE), "cpu",
                       source="the server's command line")
    out = benchrun.served_expected(w, tok.parent, 16, full, serving=FOUR, platform="cpu",
                                   max_model_len=1024, scheduler=ref)
    assert (out["expected_platform"], out["expected_scheduler"], out["expected_kv_manager"]) \
        == ("cpu", "NeuronScheduler", "full attention (one KV cache group)")
    assert out["expected_scheduler_source"] == (
        f"the server's command line: --scheduler-cls {REFERENCE}")
    engine = engine_model("neuron", serving=FOUR, max_model_len=1024, async_scheduling=False)
    want = served_expectation(w, tok, 16, capacity_blocks=FULL_16_USABLE,
                              serving=engine.serving)
    assert out["served_ratio"] == want.ratio
    # The same server without --scheduler-cls: vLLM's scheduler.
    own = scheduler_of(_argv(), "cpu", source="the server's command line")
    vllm = benchrun.served_expected(w, tok.parent, 16, full, serving=FOUR, platform="cpu",
                                    max_model_len=1024, scheduler=own)
    assert vllm["expected_scheduler"] == "Scheduler"
    # The Neuron scheduler over a hybrid manager is modelled over full attention, saying so.
    hybrid = benchrun.served_expected(w, tok.parent, 16, CacheConfig.from_labels(HYBRID_16),
                                      serving=FOUR, platform="cpu", max_model_len=1024,
                                      scheduler=ref)
    assert hybrid["expected_kv_manager"] == "full attention (one KV cache group)"
    assert "over a hybrid KV-cache manager" in hybrid["served_note"]


FULL_16_USABLE = int(FULL_16["num_gpu_blocks"]) - 1


def test_a_bench_request_reads_the_command_line_first() -> None:
    req = benchrun.BenchRequest.from_settings(
        "h", _settings(vllm_service_scheduler_cls=REFERENCE), configuration="cached",
        workload="high_overlap", repetition=1, vllm_executable="vllm")
    assert "--scheduler-cls" in req.server_argv
    read = req.scheduler("\0".join(_argv()) + "\0")
    assert (read.kind, read.source) == (
        "vllm", "the server's command line: vLLM's own scheduler (async off on the cpu "
                "platform)")
    fallback = req.scheduler("")
    assert fallback.kind == "neuron"
    assert fallback.source.startswith("the settings (the server's command line was not read)")


def test_the_report_says_where_the_scheduler_was_read() -> None:
    from types import SimpleNamespace  # noqa: PLC0415
    from typing import cast  # noqa: PLC0415

    from prefixbench.measure.records import BenchmarkRecord  # noqa: PLC0415
    from prefixbench.report.build import kv_cache_of  # noqa: PLC0415

    expected = {"expected_scheduler": "NeuronScheduler",
                "expected_kv_manager": "full attention (one KV cache group)",
                "expected_scheduler_source": f"the server's command line: --scheduler-cls "
                                             f"{REFERENCE}"}
    record = cast(BenchmarkRecord, SimpleNamespace(
        metrics_delta={"cache_config": FULL_16}, expected=expected))
    line = kv_cache_of([record]) or ""
    assert line.endswith(
        f"the expectation assumed NeuronScheduler over full attention (one KV cache group) "
        f"(from the server's command line: --scheduler-cls {REFERENCE})"), line


def test_the_plan_predicts_with_the_scheduler_the_settings_start() -> None:
    """The plan reads the scheduler from the same rendered argv the unit runs: the
    simulated fleet's settings (reference NeuronScheduler, hybrid manager off) give the
    sync Neuron model over full attention; without them, vLLM's over the hybrid manager;
    the tutorial's Neuron servers (on-device sampling), the plugin's async scheduler."""
    from prefixbench.config.workload_estimate import serving_of, sizing_of  # noqa: PLC0415
    from prefixbench.engines.workloads import tutorial_workloads  # noqa: PLC0415

    w = next(w for w in tutorial_workloads() if w.name == "sustained_c4")
    gptoss = {"vllm_service_model": "/opt/models/tiny-gptoss"}
    sim = sizing_of(_settings(**gptoss, vllm_service_scheduler_cls=REFERENCE,
                              vllm_service_disable_hybrid_kv_cache_manager=True))
    assert sim.model.kind == "full" and "--disable-hybrid" in sim.model_source
    served = serving_of(w, sim)
    assert (served.scheduler, served.async_scheduling) == ("neuron", False)
    own = sizing_of(_settings(**gptoss))
    assert own.model.kind == "hybrid"
    assert serving_of(w, own).scheduler == "vllm"
    tutorial = settings.validate({
        "prefixbench_instance_type": "trn2.48xlarge", "prefixbench_neuron_release": "2.32.0",
        "vllm_service_model": "openai/gpt-oss-120b"}, host="h")
    assert tutorial.ok, tutorial.problems
    on_neuron = serving_of(w, sizing_of(tutorial.settings))
    assert (on_neuron.scheduler, on_neuron.async_scheduling) == ("neuron", True)
