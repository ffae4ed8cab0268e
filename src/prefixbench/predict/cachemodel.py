"""Which cache model a prediction replays through: :class:`CacheModel` names it
(full attention, or vLLM's hybrid KV-cache manager with its sliding window) and builds a
fresh cache of it (:func:`prefixbench.predict.hybridsim.cache_sim_for`)."""

from __future__ import annotations

from dataclasses import dataclass

from prefixbench.predict.cachesim import PrefixCacheSim
from prefixbench.predict.hybridsim import (
    DEFAULT_SLIDING_WINDOW,
    CacheKind,
    HybridCacheSim,
    cache_sim_for,
)

__all__ = ["FULL_ATTENTION", "CacheModel"]


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

    def describe(self) -> str:
        """One short phrase for output and notes."""
        if self.kind == "full":
            return "full attention (one KV cache group)"
        return (f"hybrid (sliding window {self.sliding_window or DEFAULT_SLIDING_WINDOW} + "
                f"full attention, one shared block pool)")


#: The model of a server with full attention in every layer.
FULL_ATTENTION: CacheModel = CacheModel()
