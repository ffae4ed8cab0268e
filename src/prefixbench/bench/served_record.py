"""The record's served expectation: a prefix_repetition bench's expected counters from the
tokens its server sees (:func:`prefixbench.predict.served.served_expectation`), replayed
through the engine model of the hosts' platform
(:func:`prefixbench.predict.engines.engine_model`), as record keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefixbench.bench.workloads import Workload
from prefixbench.measure import metrics
from prefixbench.predict.engines import engine_model
from prefixbench.predict.schedconfig import SERIAL, Serving
from prefixbench.servers import sweep

__all__ = ["served_expected"]


def served_expected(workload: Workload, run_dir: Path | None, block_size: int,
                    config: metrics.CacheConfig, *, serving: Serving = SERIAL,
                    platform: str = "cpu", max_model_len: int | None = None,
                    async_scheduling: bool = True) -> dict[str, Any]:
    """The expected ratio from the tokens the server sees (prefixbench.predict.served
    .served_expectation), as record keys; a note instead when it cannot be made. The
    engine model is the ``platform``'s (:func:`prefixbench.predict.engines.engine_model`:
    on Neuron the plugin's scheduler over full attention, its cap at ``max_model_len``,
    ``NeuronAsyncScheduler`` unless ``async_scheduling`` is False: the sync
    ``NeuronScheduler`` a CPU server runs from ``prefixbench_sim/neuron_scheduler.py``),
    and the record says which it assumed (``expected_scheduler``,
    ``expected_kv_manager``). The range over arrival timings (``served_band_*``) is
    replayed through the same engine model."""
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library
    from prefixbench.predict.served import served_expectation  # noqa: PLC0415
    from prefixbench.predict.tokenizer import TokenizerError  # noqa: PLC0415

    tok = sweep.tokenizer_dir(run_dir) if run_dir is not None else None
    if tok is None:
        return {"served_note": "no tokenizer copy in the run directory"}
    capacity, model, note = whatif.server_cache_model(config)
    engine = engine_model(platform, cache_model=model.chunked(serving.max_num_batched_tokens),
                          serving=serving, max_model_len=max_model_len,
                          async_scheduling=async_scheduling)
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
        **engine.record()}
    out.update(served.band.record("served_band") if served.band is not None else {})
    if notes := [n for n in (served.note, note) if n]:
        out["served_note"] = "; ".join(notes)
    return out
