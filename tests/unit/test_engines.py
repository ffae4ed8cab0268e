"""The platform picks the engine model (prefixbench.engines.platforms): the Neuron plugin's
scheduler over full attention on Neuron, today's models on cpu; the record's served
expectation uses it and says which it assumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cachesim import FULL_16, HYBRID_16
from test_hybrid_callers import long_prefix
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import benchrun
from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.platforms import default_block_size, engine_model, scheduler_model
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedhybrid import HybridSchedulerSim
from prefixbench.engines.schedneuron import NeuronAsyncSchedulerSim, NeuronSchedulerSim
from prefixbench.measure.metrics import CacheConfig
from prefixbench.predict.served import served_expectation

HYBRID = CacheModel("hybrid")
FOUR = Serving(concurrency=4, max_num_seqs=4, max_num_batched_tokens=512)


def test_neuron_runs_the_plugins_scheduler_over_full_attention() -> None:
    engine = engine_model("neuron", cache_model=HYBRID, serving=FOUR, max_model_len=8192)
    assert engine.cache_model is FULL_ATTENTION  # every layer a FullAttentionSpec
    assert (engine.serving.scheduler, engine.serving.async_scheduling) == ("neuron", True)
    assert engine.record() == {"expected_platform": "neuron",
                               "expected_scheduler": "NeuronAsyncScheduler",
                               "expected_kv_manager": "full attention (one KV cache group)"}
    sim = scheduler_model(32, 1023, engine.cache_model, engine.serving)
    # 1024 blocks over cdiv(8192, 32) = 256 a request: 4 at max_model_len.
    assert isinstance(sim, NeuronAsyncSchedulerSim) and sim.kv_concurrency == 4
    sync = engine_model("neuron", serving=FOUR, async_scheduling=False)
    assert type(scheduler_model(32, None, sync.cache_model, sync.serving)) is \
        NeuronSchedulerSim
    assert default_block_size("neuron") == 32 and default_block_size("cpu") is None


def test_cpu_keeps_todays_models() -> None:
    engine = engine_model("cpu", cache_model=HYBRID, serving=FOUR)
    assert (engine.cache_model, engine.serving) == (HYBRID, FOUR)
    assert engine.scheduler == "Scheduler" and engine.kv_manager.startswith("hybrid")
    assert type(scheduler_model(16, 99, engine.cache_model, engine.serving)) is \
        HybridSchedulerSim
    gpu_like = engine_model("cpu", serving=Serving(async_scheduling=True))
    assert gpu_like.scheduler == "AsyncScheduler"
    assert type(scheduler_model(16, None, gpu_like.cache_model, gpu_like.serving)) is \
        AsyncSchedulerSim
    with pytest.raises(ValueError, match="unknown platform 'gpu'"):
        engine_model("gpu")


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("run") / "tokenizer")


def test_the_record_says_which_engine_its_expectation_assumed(tok: Path) -> None:
    """A hybrid-reporting server on cpu: the hybrid model and vLLM's scheduler; the same
    server on Neuron: full attention and the plugin's scheduler, whose expectation is
    the Neuron model's replay of the same prompts."""
    w = long_prefix()
    config = CacheConfig.from_labels(HYBRID_16)
    cpu = benchrun.served_expected(w, tok.parent, 16, config, serving=FOUR)
    assert (cpu["expected_scheduler"], cpu["expected_kv_manager"]) == (
        "Scheduler", "hybrid (sliding window 128 + full attention)")
    neuron = benchrun.served_expected(w, tok.parent, 16, config, serving=FOUR,
                                      platform="neuron", max_model_len=1024)
    assert (neuron["expected_scheduler"], neuron["expected_kv_manager"]) == (
        "NeuronAsyncScheduler", "full attention (one KV cache group)")
    engine = engine_model("neuron", serving=FOUR, max_model_len=1024)
    want = served_expectation(w, tok, 16, capacity_blocks=19999, serving=engine.serving)
    assert neuron["served_ratio"] == want.ratio
    assert "Neuron plugin's async scheduler model" in neuron["served_note"]
    full = benchrun.served_expected(w, tok.parent, 16, CacheConfig.from_labels(FULL_16),
                                    serving=FOUR)
    assert full["expected_kv_manager"] == "full attention (one KV cache group)"
    assert full["expected_scheduler"] == "Scheduler"


def test_the_report_says_which_engine_the_expectation_assumed() -> None:
    from types import SimpleNamespace  # noqa: PLC0415
    from typing import cast  # noqa: PLC0415

    from prefixbench.engines.kvcapacity import kv_cache_line  # noqa: PLC0415
    from prefixbench.measure.records import BenchmarkRecord  # noqa: PLC0415
    from prefixbench.report.build import kv_cache_of  # noqa: PLC0415

    engine = engine_model("neuron", serving=FOUR, max_model_len=1024)
    record = cast(BenchmarkRecord, SimpleNamespace(
        metrics_delta={"cache_config": FULL_16}, expected=engine.record()))
    assert kv_cache_of([record]) == (
        f"{kv_cache_line(FULL_16)}; the expectation assumed NeuronAsyncScheduler over "
        f"full attention (one KV cache group)")
