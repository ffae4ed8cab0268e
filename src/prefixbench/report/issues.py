"""The common issues seen in a host's data, each with the fix the report prints.

:func:`common_issues` checks one host's benchmark summaries and failures for the
tutorial's "Common issues" (no hits, evictions under load, the server out of memory) and
those the bundle knows (hits without a TTFT gain, hits carried over between workloads, a
server that did not start). The fix texts are the ``FIX_*`` constants.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from prefixbench.report.aggregate import HostView
from prefixbench.report.model import FailureInfo, Issue
from prefixbench.report.vocab import BASELINE, CACHED, HIGH_OVERLAP, NO_OVERLAP, Thresholds

__all__ = [
    "FIX_CARRY_OVER",
    "FIX_EVICTIONS",
    "FIX_NO_GAIN",
    "FIX_NO_GAIN_CPU",
    "FIX_OOM",
    "FIX_OOM_CPU",
    "FIX_ZERO_HITS",
    "common_issues",
]

#: Words in a failure's error, stderr or journal that mean the server ran out of memory.
_OOM: Final = re.compile(
    r"out of memory|\bOOM\b|oom-kill|MemoryError|cannot allocate memory|failed to allocate|"
    r"insufficient memory|not enough memory|NRT_RESOURCE|KV cache (?:does not|doesn't) fit",
    re.IGNORECASE)
_START: Final = re.compile(
    r"fail(?:ed)? to start|did not become healthy|not healthy|health check|"
    r"start(?:ing)? the server|Application startup|exited|start request repeated",
    re.IGNORECASE)

FIX_ZERO_HITS: Final = (
    "The prefix_repetition dataset guarantees byte-identical prefixes, so this is a "
    "configuration or feature-enablement issue, not a data issue: confirm prefix caching "
    "is not disabled (--no-enable-prefix-caching must not be set on the cached server). "
    "With your own data, a single whitespace difference prevents hits at the block boundary.")
FIX_EVICTIONS: Final = (
    "The cache is full and evicts entries before they can be reused: reduce max_num_seqs "
    "or max_model_len to free memory for the prefix cache.")
FIX_OOM: Final = (
    "The KV cache does not fit in HBM: decrease VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION "
    "(the fraction of the memory budget allocated to the KV cache; default 0.30) so the "
    "cache is sized smaller at startup.")
FIX_NO_GAIN: Final = (
    "On Neuron a hit saves prefill chunks, not tokens: a warm request of P prompt tokens "
    "with h hit tokens (block-aligned) runs ceil((P - h) / S) chunks of S = "
    "max_num_batched_tokens instead of ceil(P / S), each padded to its bucket (AWS's "
    "design, vllm-neuron/docs/design/vllm/prefix-caching.md, \"Scheduler Integration\"); "
    "hits that leave as many chunks to run save no time. Check that the uncached part of "
    "a warm request spans fewer chunks than the whole prompt (prefixbench whatif --platform "
    "neuron prints the chunks saved first), and that kv_segment_size_buckets equals "
    "num_batched_tokens_buckets (a size the host's Neuron release supports: its "
    "manifest's prefix_caching.segment_sizes) on both servers. Compare the two rendered "
    "units.")
#: The same issues on vLLM's CPU platform (the simulated fleet, CPU hosts): no Neuron
#: segments or HBM budget there.
FIX_NO_GAIN_CPU: Final = (
    "On vLLM's CPU platform there are no prefill segments to align: a hit skips its "
    "blocks' prefill, and the TTFT gain is that prefill's share of a request's time. A "
    "small model prefills a short prefix in a few milliseconds, within the machine's "
    "noise: lengthen the shared prefix, or read the goodput section's break-even hit "
    "ratio. On Neuron it means hits that leave as many prefill chunks to run.")
FIX_OOM_CPU: Final = (
    "The KV cache does not fit in the host's memory: lower VLLM_CPU_KVCACHE_SPACE (GiB "
    "of KV cache, in vllm_service_environment) or vllm_service_max_model_len.")
FIX_CARRY_OVER: Final = (
    "Hits on the no-overlap workload come from prompts of an earlier workload on the same "
    "server (vLLM's prefix_repetition draws from one stream per --seed): give every "
    "workload and repetition its own seed (prefixbench plans them) or restart the server.")


def no_gain_rule(t: Thresholds) -> str:
    """When :func:`common_issues` reports hits without a TTFT gain, in words."""
    return (f"the cached high-overlap run has cache hits but its median TTFT is less than "
            f"{t.no_gain_max_reduction:.0%} below the baseline's")


def common_issues(host: HostView, failures: Sequence[FailureInfo], t: Thresholds,
                  platform: str | None = None) -> list[Issue]:
    """Every common issue seen on one host (its failures included), with its fix for the
    host's ``platform`` (its fingerprint's: ``"cpu"`` gets the CPU platform's fixes,
    anything else Neuron's)."""
    cpu = platform == "cpu"
    fix_oom = FIX_OOM_CPU if cpu else FIX_OOM
    out: list[Issue] = []
    name = host.name
    ch = host.role(CACHED, HIGH_OVERLAP)
    if ch is not None:
        ratios = [a.median for a in (ch.hit_ratio_by_source, ch.hit_ratio_queries) if a]
        if (ratios and max(ratios) == 0) or ch.prefix_caching_enabled is False:
            ev = (f"cached high_overlap hit ratio "
                  f"{max(ratios) * 100 if ratios else 0:.1f}%")
            if ch.prefix_caching_enabled is False:
                ev += "; vllm:cache_config_info says enable_prefix_caching=False"
            out.append(Issue("zero_hit_rate", "No TTFT improvement: 0% cache hit rate",
                             name, ev, FIX_ZERO_HITS))
        base = host.role(BASELINE, HIGH_OVERLAP)
        if ratios and max(ratios) > 0 and base and base.median_ttft_ms and ch.median_ttft_ms:
            red = 1 - ch.median_ttft_ms.median / base.median_ttft_ms.median
            if red < t.no_gain_max_reduction:
                out.append(Issue(
                    "hits_without_ttft_gain", "Cache hits but no TTFT improvement", name,
                    f"hit ratio {max(ratios) * 100:.1f}% but median TTFT reduction "
                    f"{red * 100:.1f}% (< {t.no_gain_max_reduction:.0%})",
                    FIX_NO_GAIN_CPU if cpu else FIX_NO_GAIN,
                    source="bundle"))
    for b in host.benches.values():
        if b.configuration != CACHED:
            continue
        signs = []
        if b.preemptions:
            signs.append(f"{b.preemptions:.0f} preemptions")
        if b.evictions_sampled:
            signs.append(f"{b.evictions_sampled:.0f} sampled block evictions")
        # (No KV-usage sign: the gauge is read when the server is idle, where it is 0.)
        if signs:
            out.append(Issue("evictions_under_load", "Cache evictions under sustained load",
                             name, f"{b.workload}: " + ", ".join(signs), FIX_EVICTIONS))
    cn = host.role(CACHED, NO_OVERLAP)
    if cn is not None and cn.hit_ratio_by_source and cn.hit_ratio_by_source.median > 0 and (
            cn.expected_block_aligned == 0):
        out.append(Issue(
            "carry_over_hits", "Hits on the no-overlap workload (prompts reused across runs)",
            name, f"cached no_overlap hit ratio {cn.hit_ratio_by_source.median * 100:.2f}% "
            f"where 0% is expected", FIX_CARRY_OVER, source="bundle"))
    for f in failures:
        text = f"{f.error}\n{f.log_tail}"
        if _OOM.search(text):
            out.append(Issue("server_oom", "Server fails to start with OOM", name,
                             f"{f.configuration}/{f.workload} rep{f.repetition}: {f.error}",
                             fix_oom))
        elif _START.search(text):
            out.append(Issue(
                "server_start_failed", "Server failed to start or became unhealthy", name,
                f"{f.configuration}/{f.workload} rep{f.repetition}: {f.error}",
                "Read the journal tail below (journalctl -u vllm-<configuration>). If it "
                "shows an out-of-memory error: " + fix_oom, source="bundle"))
    return out
