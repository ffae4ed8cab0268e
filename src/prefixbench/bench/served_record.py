"""The record's served expectation: a prefix_repetition bench's expected counters from the
tokens its server sees (:func:`prefixbench.predict.served.served_expectation`), replayed
through the engine model of the server that served it, as record keys: its scheduler as
its command line names it (:mod:`prefixbench.servers.served_engine`), its KV-cache manager
as its ``vllm:cache_config_info`` says; without the command line, the hosts' platform's
(:func:`prefixbench.engines.platforms.engine_model`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.platforms import EngineModel, engine_model, neuron_serving
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.workloads import Workload
from prefixbench.measure import metrics
from prefixbench.servers import sweep
from prefixbench.servers.served_engine import ServerScheduler

__all__ = ["served_engine", "served_expected"]


def served_expected(workload: Workload, run_dir: Path | None, block_size: int,
                    config: metrics.CacheConfig, *, serving: Serving = SERIAL,
                    platform: str = "cpu", max_model_len: int | None = None,
                    scheduler: ServerScheduler | None = None,
                    async_scheduling: bool = True,
                    neuron_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The expected ratio from the tokens the server sees (prefixbench.predict.served
    .served_expectation), as record keys; a note instead when it cannot be made.

    ``scheduler``, when given, is what the server runs
    (:meth:`prefixbench.bench.benchrun.BenchRequest.scheduler`, read from its command
    line): it decides the scheduler model (the Neuron plugin's over full attention, its
    cap at ``max_model_len``, or vLLM's over the server's manager), and the record says
    where it was read (``expected_scheduler_source``). Without it the engine model is the
    ``platform``'s (:func:`prefixbench.engines.platforms.engine_model`: on Neuron the
    plugin's scheduler over full attention, ``NeuronAsyncScheduler`` unless
    ``async_scheduling`` is False). The record says which it assumed
    (``expected_scheduler``, ``expected_kv_manager``); the range over arrival timings
    (``served_band_*``) is replayed through the same engine model. On Neuron the record
    also carries the server's ``max_model_len`` and ``neuron_config`` (``neuron_config``:
    its ``vllm_service_neuron_config``), from which the plugin resolves its buckets: the
    TTFT model pads to them (:mod:`prefixbench.report.ttft_predicted`)."""
    from prefixbench.engines.tokenizer import TokenizerError  # noqa: PLC0415
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library
    from prefixbench.predict.served import served_expectation  # noqa: PLC0415

    tok = sweep.tokenizer_dir(run_dir) if run_dir is not None else None
    if tok is None:
        return {"served_note": "no tokenizer copy in the run directory"}
    capacity, model, note = whatif.server_cache_model(config)
    chunked = model.chunked(serving.max_num_batched_tokens)
    if scheduler is None:
        engine = engine_model(platform, cache_model=chunked, serving=serving,
                              max_model_len=max_model_len,
                              async_scheduling=async_scheduling, neuron_config=neuron_config)
    else:
        engine = served_engine(platform, scheduler, chunked, serving, max_model_len,
                               neuron_config=neuron_config)
        if engine.serving.scheduler == "neuron" and model.kind != "full":
            # The Neuron scheduler model runs over full attention (its plugin allocates
            # every layer as full attention); a server that runs it over vLLM's hybrid
            # manager (the simulated fleet without --disable-hybrid-kv-cache-manager) is
            # not what it models.
            note = (f"{note}; " if note else "") + (
                "the server runs the Neuron scheduler over a hybrid KV-cache manager: "
                "modelled over full attention, as on Neuron")
    if engine.platform == "neuron":
        note = None  # one full-attention group on Neuron, whatever the model's layers
    try:
        served = served_expectation(workload, tok, block_size, capacity_blocks=capacity,
                                    cache_model=engine.cache_model, serving=engine.serving)
    except (TokenizerError, ValueError, OSError) as exc:
        return {"served_note": f"cannot replay the prompts: {exc}"}
    out: dict[str, Any] = {
        "served_ratio": served.ratio, "served_hit_tokens": served.hit_tokens,
        "served_query_tokens": served.query_tokens,
        # The same prompts with an unbounded cache: what the KV capacity itself costs is
        # served_unbounded_ratio - served_ratio (prefixbench.report.shortfall).
        "served_unbounded_ratio": (served.unbounded_hit_tokens / served.query_tokens
                                   if served.query_tokens else 0.0),
        # ... and with full attention: minus served_unbounded_ratio, the sliding window's.
        "served_full_attention_ratio": (
            served.full_attention_hit_tokens / served.query_tokens
            if served.query_tokens and served.full_attention_hit_tokens is not None
            else None),
        "served_evicted_blocks": served.evicted_blocks,
        "junction_resplits": served.junction_resplits,
        "junction_lost_blocks": served.lost_blocks,
        "junction_gained_blocks": served.gained_blocks,
        "max_num_batched_tokens": serving.max_num_batched_tokens,  # the hybrid model's chunk
        "max_num_seqs": serving.max_num_seqs, "served_concurrency": serving.concurrency,
        **engine.record(),
        **({"expected_scheduler_source": scheduler.source} if scheduler is not None else {}),
        **({"max_model_len": max_model_len, "neuron_config": dict(neuron_config or {})}
           if engine.platform == "neuron" and max_model_len else {})}
    out.update(served.band.record("served_band") if served.band is not None else {})
    if notes := [n for n in (served.note, note) if n]:
        out["served_note"] = "; ".join(notes)
    return out


def served_engine(platform: str, scheduler: ServerScheduler, cache_model: CacheModel,
                  serving: Serving, max_model_len: int | None, *,
                  neuron_config: Mapping[str, Any] | None = None) -> EngineModel:
    """The engine model of a server on ``platform`` that runs ``scheduler`` over
    ``cache_model`` (the manager its ``cache_config_info`` reports): the Neuron plugin's
    scheduler model over full attention, its KV-concurrency cap at ``max_model_len``; or
    vLLM's scheduler model over ``cache_model``."""
    if scheduler.kind == "neuron":
        return EngineModel(platform, FULL_ATTENTION, neuron_serving(
            serving, max_model_len, async_scheduling=scheduler.async_scheduling,
            neuron_config=neuron_config))
    return EngineModel(platform, cache_model, replace(
        serving, async_scheduling=scheduler.async_scheduling))
