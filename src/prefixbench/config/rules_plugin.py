"""The vLLM Neuron plugin's own start-up refusals, checked in preflight before any host is
touched. Registered with the catalogue on import (:mod:`prefixbench.config.settings`
imports this module); :func:`plugin_refusals` is also what ``prefixbench whatif`` asks.

Read in the plugin's source at version 0.24.0.1.1.0 (public forks of
vllm-project/vllm-neuron at its ``release-0.24.0.1.1.0`` branch; Neuron 2.32 ships it):

* ``vllm_neuron/utils/bucket_utils.py``, ``get_max_num_batched_tokens``: the chunk is
  ``min(max_num_batched_tokens, max_model_len)``;
* the same file, ``resolve_segmented_prefill_config``, called by
  ``vllm_neuron/vllm/core/scheduler.py`` (``NeuronScheduler.__init__``) and the model
  runner when ``kv_segment_size_buckets`` is not set: with that chunk below
  ``max_model_len`` the plugin turns segmented prefill on by itself with buckets
  ``[max_num_batched_tokens]``, and refuses to start unless it is a supported segment
  size ("is not a supported chunked prefill size on Neuron"); otherwise (single-shot
  prefill) segmented prefill stays off;
* the model runner, after resolving the buckets: "Automatic Prefix Caching (APC)
  requires segmented prefill to be enabled": prefix caching without segmented prefill
  is refused at start.

The supported sizes are the release data's (``prefix_caching.segment_sizes``,
:func:`prefixbench.config.rules.segment_sizes_allowed`), never a literal here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from prefixbench.config import catalogue
from prefixbench.config.rules import segment_sizes_allowed

__all__ = ["PLUGIN_SOURCE", "neuron_servers_start", "plugin_refusals"]

#: Where the refusals are read (the sizes come from the release data).
PLUGIN_SOURCE: Final = ("the vllm-neuron of Neuron 2.32, vllm_neuron/utils/bucket_utils.py "
                        "resolve_segmented_prefill_config and vllm_neuron/vllm/core/"
                        "scheduler.py NeuronScheduler.__init__, and its model runner's "
                        "prefix-caching check")


def plugin_refusals(max_num_batched_tokens: int, max_model_len: int | None,
                    neuron_config: Mapping[str, Any], sizes: Sequence[int], *,
                    prefix_caching: bool = True, flags: bool = False) -> Iterator[str]:
    """One line per reason the plugin refuses to start a server with these settings
    (``flags``: worded for ``prefixbench whatif``'s flags, else for the settings)."""
    mnbt_name = "--max-num-batched-tokens" if flags else "vllm_service_max_num_batched_tokens"
    mml_name = "--max-model-len" if flags else "vllm_service_max_model_len"
    if neuron_config.get("kv_segment_size_buckets"):
        return  # set explicitly: rules.segment_buckets checks it against the release
    chunk = (max_num_batched_tokens if max_model_len is None
             else min(max_num_batched_tokens, max_model_len))
    allowed = ", ".join(map(str, sizes))
    if max_model_len is not None and chunk < max_model_len:
        if chunk not in sizes:
            yield (f"{mnbt_name} {max_num_batched_tokens} is below {mml_name} "
                   f"{max_model_len}, so the Neuron plugin turns segmented prefill on with "
                   f"it as the segment, and it is not a supported segment size: use one of "
                   f"{allowed} (prefix_caching.segment_sizes; {PLUGIN_SOURCE})")
        batched = neuron_config.get("num_batched_tokens_buckets")
        if batched and batched != [chunk]:
            # validate_kv_segment_size_buckets, on the automatic buckets: a configured
            # num_batched_tokens_buckets must equal them.
            yield (f"num_batched_tokens_buckets {batched} must be [{chunk}]: without "
                   f"kv_segment_size_buckets the Neuron plugin turns segmented prefill on "
                   f"with [{chunk}] ({mnbt_name}) as the segment, and the prefill buckets "
                   f"must equal it; set both, or leave num_batched_tokens_buckets out "
                   f"({PLUGIN_SOURCE})")
        return
    if prefix_caching:
        yield (f"{mnbt_name} {max_num_batched_tokens} is not below {mml_name} "
               f"{max_model_len}: single-shot prefill, no segmented prefill, and the Neuron "
               f"plugin refuses prefix caching without it (\"Automatic Prefix Caching (APC) "
               f"requires segmented prefill\"): set {mnbt_name} to one of {allowed} below "
               f"{mml_name}, or kv_segment_size_buckets ({PLUGIN_SOURCE})")


@catalogue.rule
def neuron_servers_start(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, neither server is one the plugin refuses to start: automatic segmented
    prefill needs a supported segment size, and prefix caching needs segmented prefill."""
    if s.get("prefixbench_platform") != "neuron":
        return
    config = s.get("vllm_service_neuron_config") or {}
    if not isinstance(config, Mapping):
        return
    sizes, _ = segment_sizes_allowed(s)
    mnbt = int(s.get("vllm_service_max_num_batched_tokens") or 0)
    mml = int(s.get("vllm_service_max_model_len") or 0) or None
    if mnbt < 1:
        return
    seen: set[str] = set()
    for caching in (True, False):  # the cached server, then the baseline
        for line in plugin_refusals(mnbt, mml, config, sizes, prefix_caching=caching):
            if line not in seen:  # the same setting refused for both: said once
                seen.add(line)
                yield line
