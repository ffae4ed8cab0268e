"""The KV capacity to model for a vLLM server, and when the capacity model does not apply.

:class:`prefixbench.predict.cachesim.PrefixCacheSim` takes a number of usable KV blocks:
:func:`usable_blocks` turns the server's ``num_gpu_blocks`` (``vllm:cache_config_info``)
into it, and :func:`capacity_note` says from the same labels when the server's hybrid
KV-cache manager makes a full-attention-only capacity model wrong.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["capacity_note", "usable_blocks"]


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


def capacity_note(cache_config_labels: Mapping[str, str] | None) -> str | None:
    """Why the KV capacity model does not apply to a server, or ``None`` when it does.

    ``cache_config_labels`` are the labels of ``vllm:cache_config_info`` (vLLM 0.32: every
    field of its ``CacheConfig``). The model assumes one KV cache group of full-attention
    layers: a request at ``max_model_len`` then takes ``cdiv(max_model_len, block)``
    blocks. vLLM reports its group-aware capacity (``kv_cache_max_concurrency`` =
    ``num_gpu_blocks`` / blocks a request at ``max_model_len`` takes over all groups, and
    ``kv_cache_size_tokens`` = that times ``max_model_len``); when a request takes more
    blocks than full attention alone needs, the hybrid KV-cache manager runs several
    groups (full + sliding-window layers as gpt-oss has, or Mamba layers) from one pool,
    and the model's evictions are not the server's. (With the hybrid manager disabled,
    sliding-window layers are allocated as full attention and the model applies.)
    """
    if not cache_config_labels:
        return None
    labels = cache_config_labels
    mamba_mode = labels.get("mamba_cache_mode")
    if _label(labels, "mamba_block_size") is not None or mamba_mode not in (None, "none"):
        return ("vLLM reports Mamba state caching (mamba_block_size / mamba_cache_mode): "
                "a hybrid model's KV cache is not modelled; the prediction ignores the "
                "server's KV capacity")
    blocks = _label(labels, "num_gpu_blocks")
    block = _label(labels, "effective_attention_block_size") or _label(labels, "block_size")
    concurrency = _label(labels, "kv_cache_max_concurrency")
    size_tokens = _label(labels, "kv_cache_size_tokens")
    window = labels.get("sliding_window")
    if None in (blocks, block, concurrency, size_tokens) or not concurrency or not block:
        if window not in (None, "", "None"):
            return (f"sliding window {window} and no group-aware capacity in "
                    f"cache_config_info: whether vLLM's hybrid KV-cache manager is on "
                    f"cannot be told, so the KV capacity model may not apply")
        return None
    assert blocks is not None and size_tokens is not None
    per_request = blocks / concurrency
    # kv_cache_size_tokens = int(concurrency * max_model_len): max_model_len lies in
    # [size_tokens / concurrency, (size_tokens + 1) / concurrency).
    low = -(-math.ceil(size_tokens / concurrency - 1e-6) // int(block))
    high = -(-math.floor((size_tokens + 1) / concurrency - 1e-9) // int(block))
    if low - 0.5 <= per_request <= high + 0.5:
        return None
    return (f"vLLM's hybrid KV-cache manager is on (several KV cache groups share the "
            f"block pool): a request at max_model_len takes "
            f"{per_request:.0f} KV blocks over all its cache groups where full attention "
            f"alone takes {high} (num_gpu_blocks {blocks:.0f}, kv_cache_max_concurrency "
            f"{concurrency:g}); the KV capacity model (num_gpu_blocks - 1 full-attention "
            f"blocks) does not apply, so the prediction ignores the server's capacity")
