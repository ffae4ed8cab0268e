"""The KV capacity to model for a vLLM server, and which cache model applies to it.

:class:`prefixbench.engines.cachesim.PrefixCacheSim` and
:class:`prefixbench.engines.hybridsim.HybridCacheSim` take a number of usable KV blocks:
:func:`usable_blocks` turns the server's ``num_gpu_blocks`` (``vllm:cache_config_info``)
into it. :func:`kv_cache_kind` tells from the same labels whether the server runs one
full-attention group or vLLM's hybrid KV-cache manager (several groups on one pool, as
gpt-oss's sliding-window + full-attention layers), and :func:`capacity_note` says so for
the report when the full-attention model is the wrong one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

__all__ = ["KvCacheKind", "capacity_note", "kv_cache_kind", "kv_cache_line", "usable_blocks"]

#: ``"full"``: one full-attention group (PrefixCacheSim); ``"hybrid"``: several groups on
#: one pool (HybridCacheSim, gpt-oss's layout); ``"mamba"``: Mamba state caching (not
#: modelled); ``"unknown"``: a sliding window and no group-aware capacity reported.
KvCacheKind = Literal["full", "hybrid", "mamba", "unknown"]


def usable_blocks(num_gpu_blocks: int | None) -> int | None:
    """The capacity to model for a server reporting ``num_gpu_blocks``
    (``vllm:cache_config_info``): one less, as vLLM's block 0 is its null block, never
    allocated. ``None`` (unbounded) when unknown or when no block is usable."""
    if num_gpu_blocks is None or num_gpu_blocks <= 1:
        return None
    return num_gpu_blocks - 1


def _label(labels: Mapping[str, str], name: str) -> float | None:
    text = labels.get(name)
    if text is None or text in ("", "None"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _kind(labels: Mapping[str, str]) -> tuple[KvCacheKind, str | None]:
    """The server's KV-cache kind and, unless it is plain full attention, why."""
    mamba_mode = labels.get("mamba_cache_mode")
    if _label(labels, "mamba_block_size") is not None or mamba_mode not in (None, "none"):
        return "mamba", ("vLLM reports Mamba state caching (mamba_block_size / "
                         "mamba_cache_mode): a hybrid model's KV cache is not modelled; the "
                         "prediction ignores the server's KV capacity")
    blocks = _label(labels, "num_gpu_blocks")
    block = _label(labels, "effective_attention_block_size") or _label(labels, "block_size")
    concurrency = _label(labels, "kv_cache_max_concurrency")
    size_tokens = _label(labels, "kv_cache_size_tokens")
    window = labels.get("sliding_window")
    if None in (blocks, block, concurrency, size_tokens) or not concurrency or not block:
        if window not in (None, "", "None"):
            return "unknown", (
                f"sliding window {window} and no group-aware capacity in "
                f"cache_config_info: whether vLLM's hybrid KV-cache manager is on "
                f"cannot be told, so the KV capacity model may not apply")
        return "full", None
    assert blocks is not None and size_tokens is not None
    per_request = blocks / concurrency
    # kv_cache_size_tokens = int(concurrency * max_model_len): max_model_len lies in
    # [size_tokens / concurrency, (size_tokens + 1) / concurrency).
    low = -(-math.ceil(size_tokens / concurrency - 1e-6) // int(block))
    high = -(-math.floor((size_tokens + 1) / concurrency - 1e-9) // int(block))
    if low - 0.5 <= per_request <= high + 0.5:
        return "full", None
    return "hybrid", (
        f"vLLM's hybrid KV-cache manager is on (several KV cache groups share the "
        f"block pool): a request at max_model_len takes {per_request:.0f} KV blocks over "
        f"all its cache groups where full attention alone takes {high} (num_gpu_blocks "
        f"{blocks:.0f}, kv_cache_max_concurrency {concurrency:g}); the hybrid cache model "
        f"applies (a sliding-window and a full-attention group on num_gpu_blocks - 1 "
        f"shared blocks, prefixbench.engines.hybridsim), not the full-attention one")


def kv_cache_kind(cache_config_labels: Mapping[str, str] | None) -> KvCacheKind:
    """Which cache model applies to a server, from ``vllm:cache_config_info``'s labels
    (``"full"`` when they say nothing): see :data:`KvCacheKind` and
    :func:`capacity_note`."""
    if not cache_config_labels:
        return "full"
    return _kind(cache_config_labels)[0]


def capacity_note(cache_config_labels: Mapping[str, str] | None) -> str | None:
    """For the report: why the full-attention cache model is not the server's, or
    ``None`` when it is.

    ``cache_config_labels`` are the labels of ``vllm:cache_config_info`` (vLLM 0.32: every
    field of its ``CacheConfig``). The full-attention model assumes one KV cache group: a
    request at ``max_model_len`` then takes ``cdiv(max_model_len, block)`` blocks. vLLM
    reports its group-aware capacity (``kv_cache_max_concurrency`` = ``num_gpu_blocks`` /
    blocks a request at ``max_model_len`` takes over all groups, and
    ``kv_cache_size_tokens`` = that times ``max_model_len``); when a request takes more
    blocks than full attention alone needs, the hybrid KV-cache manager runs several
    groups from one pool: for full + sliding-window layers (gpt-oss) the note names the
    hybrid cache model (:class:`prefixbench.engines.hybridsim.HybridCacheSim`), which
    applies; Mamba layers are not modelled. (With the hybrid manager disabled,
    sliding-window layers are allocated as full attention and the full-attention model
    applies.)
    """
    if not cache_config_labels:
        return None
    return _kind(cache_config_labels)[1]


def kv_cache_line(cache_config_labels: Mapping[str, str] | None) -> str:
    """One line for the report: which KV-cache manager the server ran, as far as
    ``vllm:cache_config_info`` tells, and which cache model the predictions use.

    The labels say it through the group-aware capacity (:func:`capacity_note`): vLLM 0.32
    reports ``sliding_window="None"`` for gpt-oss even with the hybrid manager on, so
    without ``kv_cache_max_concurrency`` a full-attention server and a hybrid one look
    alike, and the line says full attention is assumed."""
    if not cache_config_labels:
        return "KV cache: not observed (no vllm:cache_config_info)"
    kind = kv_cache_kind(cache_config_labels)
    if kind == "hybrid":
        window = cache_config_labels.get("sliding_window", "None")
        said = (f"sliding window {window}" if window.isdigit()
                else "sliding window not reported, gpt-oss's 128 assumed")
        return (f"KV cache: hybrid (sliding window + full attention: several KV cache "
                f"groups on one block pool, told by cache_config_info's group-aware "
                f"capacity); predictions use the hybrid cache model, {said}")
    if kind == "mamba":
        return "KV cache: Mamba state caching (not modelled; predictions ignore the capacity)"
    if kind == "unknown":
        return ("KV cache: not told (a sliding window and no group-aware capacity in "
                "cache_config_info); predictions use full attention, unbounded")
    if _label(cache_config_labels, "kv_cache_max_concurrency") is None:
        return ("KV cache: full attention assumed (cache_config_info has no group-aware "
                "capacity to tell a hybrid manager by)")
    return ("KV cache: full attention (one KV cache group, told by cache_config_info's "
            "group-aware capacity)")
