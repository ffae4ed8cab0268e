"""Which cache model a prediction replays through: :class:`CacheModel` names it
(full attention, or vLLM's hybrid KV-cache manager with its sliding window) and builds a
fresh cache of it (:func:`prefixbench.engines.hybridsim.cache_sim_for`).

Callers take it from the server: :func:`prefixbench.predict.whatif.server_cache_model`
reads ``vllm:cache_config_info`` (:func:`prefixbench.engines.kvcapacity.kv_cache_kind`).

Which model applies on Trn (vLLM with the Neuron plugin) is not confirmed from source:
the 0.21 plugin's source is not at hand. What the sources say:

* The Neuron SDK docs at tag v2.31.1, ``vllm-neuron/docs/design/vllm/
  vllm-integration-kv-cache.md``: the prose says sliding-window layers "get reduced
  allocation matching window size requirements", but its ``get_kv_cache_spec`` excerpt
  builds a ``FullAttentionSpec`` for every layer, with ``sliding_window`` as a field of it.
  vLLM puts layers that are all ``FullAttentionSpec`` in one full-attention group, which
  is the case :class:`prefixbench.engines.cachesim.PrefixCacheSim` models.
  ``prefix-caching.md`` (same tag) does not mention sliding windows, the hybrid manager
  or gpt-oss.
* The public vllm-project/vllm-neuron plugin (release 0.2.x, an older line) registers a
  single ``FullAttentionSpec`` with ``sliding_window=None``
  (``vllm_neuron/worker/neuronx_distributed_model_runner.py``): one group, full attention.

So full attention is the likely model on Neuron, and the hybrid one is the model for vLLM
on CPU/GPU. On a real host the report's ``kv_cache`` line, taken from the server's own
``cache_config_info``, says which one the server ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.hybridsim import (
    DEFAULT_SLIDING_WINDOW,
    CacheKind,
    HybridCacheSim,
    cache_sim_for,
)
from prefixbench.engines.tokenizer import model_directory

__all__ = ["FULL_ATTENTION", "CacheModel", "from_model_config", "from_model_dir"]


@dataclass(frozen=True)
class CacheModel:
    """Which cache model a prediction replays through: ``kind`` ``"full"``
    (:class:`PrefixCacheSim`) or ``"hybrid"`` (:class:`HybridCacheSim` with
    ``sliding_window`` tokens, default gpt-oss's 128, and prefill chunks of
    ``max_chunk_tokens``, default the whole prompt)."""

    kind: CacheKind = "full"
    sliding_window: int | None = None
    max_chunk_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("full", "hybrid"):
            raise ValueError(f"unknown KV-cache manager kind {self.kind!r}: use 'full' or "
                             f"'hybrid'")
        if self.sliding_window is not None and self.sliding_window < 2:
            raise ValueError(f"sliding_window must be at least 2 tokens, got "
                             f"{self.sliding_window}")

    def sim(self, block_size: int, capacity_blocks: int | None) -> PrefixCacheSim | HybridCacheSim:
        """A fresh cache of this model."""
        return cache_sim_for(self.kind, block_size, capacity_blocks,
                             sliding_window=self.sliding_window,
                             max_chunk_tokens=self.max_chunk_tokens)

    def chunked(self, max_num_batched_tokens: int | None) -> CacheModel:
        """This model with prefill in chunks of the server's ``--max-num-batched-tokens``
        (the hybrid manager frees sliding-window blocks between chunks, so the chunk
        size changes what a tight pool evicts; full attention does not care)."""
        if self.kind == "full" or max_num_batched_tokens is None:
            return self
        return replace(self, max_chunk_tokens=max_num_batched_tokens)

    def describe(self) -> str:
        """One short phrase for output and notes."""
        if self.kind == "full":
            return "full attention (one KV cache group)"
        return (f"hybrid (sliding window {self.sliding_window or DEFAULT_SLIDING_WINDOW} + "
                f"full attention, one shared block pool)")


#: The model of a server with full attention in every layer.
FULL_ATTENTION: CacheModel = CacheModel()


def from_model_config(config: Mapping[str, Any]) -> CacheModel | None:
    """The cache model vLLM (CPU/GPU, prefix caching on) serves a model with, from its
    ``config.json``: hybrid when it has sliding-window and full-attention layers (gpt-oss,
    whose even layers vLLM makes sliding whatever ``layer_types`` says), full attention
    when it has no sliding window, ``None`` when it cannot be told."""
    window = config.get("sliding_window")
    layer_types = config.get("layer_types")
    if config.get("model_type") == "gpt_oss" or (
            isinstance(layer_types, list) and "sliding_attention" in layer_types
            and "full_attention" in layer_types):
        return CacheModel("hybrid", sliding_window=window if isinstance(window, int)
                          and window >= 2 else None)
    if window is None and config.get("architectures"):
        return FULL_ATTENTION
    return None


def from_model_dir(tokenizer: Path | None) -> CacheModel | None:
    """:func:`from_model_config` of the ``config.json`` beside a tokenizer (the model's
    directory, or a run's copy of its tokenizer files), named as ``--tokenizer`` names it:
    the directory or its ``tokenizer.json``
    (:func:`prefixbench.engines.tokenizer.model_directory`); ``None`` without a readable
    one."""
    directory = model_directory(tokenizer)
    if directory is None or not (directory / "config.json").is_file():
        return None
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return from_model_config(config) if isinstance(config, dict) else None
