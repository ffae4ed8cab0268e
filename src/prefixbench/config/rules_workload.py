"""Warnings about workloads whose numbers would mislead, before any host is touched.

Registered in the catalogue's warnings like :mod:`prefixbench.config.rules_fit`, so
preflight shows them with the host's other warnings (and the plan under each host). Each
rests on the bundle's own model of what the bench sends and what vLLM caches
(:mod:`prefixbench.config.workload_estimate`): vLLM caches whole blocks and never the
prompt's last token (:func:`prefixbench.measure.ratios.block_aligned_hit_tokens`); the
bench sends ``num_prompts // num_prefixes`` prompts per prefix and drops the rest
(:attr:`prefixbench.engines.workloads.Workload.requests_sent`); the server admits at most
``max_num_seqs`` requests and queues the others (:mod:`prefixbench.engines.schedsim`);
generated tokens' blocks never hit (:mod:`prefixbench.engines.hybridsim`); gpt-oss's
sliding-window group caches a prompt's last blocks, and a shared prefix's end only once a
request has hit it with full attention, so each prefix's first repeat misses.
The goodput ladder's rungs are open-loop by design and not warned about.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import combinations
from typing import Any

from prefixbench.bench import criteria, experiment
from prefixbench.config import catalogue
from prefixbench.config.workload_estimate import Sizing, estimate, sizing_of
from prefixbench.engines.cachemodel import FULL_ATTENTION
from prefixbench.engines.workloads import Workload, WorkloadError
from prefixbench.measure.ratios import block_aligned_hit_tokens

#: Two expected ratios closer than this (0.05 points) are the same to the report.
SAME_RATIO = 0.0005
#: The share of full attention's hits the sliding window must cost to be warned about:
#: half (a prefix sent 3 times or fewer). Below it the plan's expected line says the cost.
WINDOW_SHARE = 0.5


def _overlap(w: Workload, sizing: Sizing) -> Iterator[str]:
    """Whether the prompts can share anything."""
    name, ppp, p = w.name, w.prompts_per_prefix, w.prefix_repetition_num_prefixes
    if ppp == 1 and criteria.infer_role(w) in (criteria.HIGH_OVERLAP, criteria.SUSTAINED):
        yield (f"workload {name}: {w.requests_sent} prompts on {p} prefixes is one prompt "
               f"per prefix, so every prompt is cold and there is no hit to measure: raise "
               f"num_prompts to at least {2 * p} or lower prefix_repetition_num_prefixes")
    if w.requests_sent < w.num_prompts:
        yield (f"workload {name}: num_prompts {w.num_prompts} is not a multiple of "
               f"prefix_repetition_num_prefixes {p}: vLLM sends {w.requests_sent} ({ppp} per "
               f"prefix) and drops {w.num_prompts - w.requests_sent}; set num_prompts to "
               f"{w.requests_sent} or {w.requests_sent + p}")
    bs, prefix = sizing.block_size, w.prefix_repetition_prefix_len
    if ppp > 1 and prefix and not block_aligned_hit_tokens(prefix, w.prompt_len, bs):
        yield (f"workload {name}: its prefix ({prefix} tokens) does not fill one KV block "
               f"({bs}, {sizing.block_source}) and vLLM caches whole blocks only, so no "
               f"shared-prefix hit is possible: raise prefix_repetition_prefix_len to at "
               f"least {bs + 1 if not w.prefix_repetition_suffix_len else bs}")


def _sliding_window(w: Workload, sizing: Sizing) -> Iterator[str]:
    """What gpt-oss's sliding-window layers cost this workload."""
    if sizing.model.kind != "hybrid" or w.prompts_per_prefix < 2:
        return
    hybrid, full = estimate(w, sizing), estimate(w, sizing, FULL_ATTENTION)
    if hybrid.ratio is None or not full.ratio or (
            full.ratio - hybrid.ratio < WINDOW_SHARE * full.ratio - 1e-12):
        return
    window = sizing.model.sliding_window or 128
    yield (f"workload {w.name}: gpt-oss's sliding-window layers keep the last {window} "
           f"tokens, so each prefix's first repeat hits nothing (the window's blocks at the "
           f"prefix's end are cached only then): expected {hybrid.ratio * 100:.1f}% against "
           f"{full.ratio * 100:.1f}% with full attention; send more prompts per prefix "
           f"(now {w.prompts_per_prefix}; the tutorial's high_overlap sends 10)")


def _load(w: Workload, sizing: Sizing) -> Iterator[str]:
    """Whether the concurrency the workload asks for is the one the server sees."""
    name, c, sent, seqs = w.name, w.max_concurrency, w.requests_sent, sizing.max_num_seqs
    if c is None:
        if w.request_rate != float("inf"):
            yield (f"workload {name}: request_rate {w.request_rate:g}/s with "
                   f"max_concurrency unset is an open loop: if the server falls behind, "
                   f"requests queue without bound and TTFT measures the queue, and the "
                   f"cache model assumes all {sent} in flight; set max_concurrency to the "
                   f"clients you expect")
        elif sent > seqs:
            yield (f"workload {name}: max_concurrency unset and request_rate inf send all "
                   f"{sent} requests at once; the server runs {seqs} (vllm_service_max_"
                   f"num_seqs) and queues the rest, so TTFT measures the queue: set "
                   f"max_concurrency")
        return
    if c > sent:
        yield (f"workload {name}: max_concurrency {c} is more than the {sent} requests it "
               f"sends, so at most {sent} are ever in flight: raise num_prompts well above "
               f"{c}")
    elif c > seqs:
        yield (f"workload {name}: max_concurrency {c} > vllm_service_max_num_seqs {seqs}: "
               f"the server runs {seqs} at once and queues the rest, so TTFT includes the "
               f"queue; raise vllm_service_max_num_seqs or lower max_concurrency")


def _decode(w: Workload, sizing: Sizing) -> Iterator[str]:
    out = w.prefix_repetition_output_len
    if out >= w.prompt_len:
        blocks = -(-out // sizing.block_size)
        yield (f"workload {w.name}: out {out} >= its {w.prompt_len}-token prompt: the run "
               f"is mostly decode, which prefix caching does not shorten, and each request "
               f"holds {blocks} decode blocks that never hit; lower "
               f"prefix_repetition_output_len (the tutorial's is 128) unless decode is what "
               f"you size")


def _same_ratio(workloads: Sequence[Workload], sizing: Sizing) -> Iterator[str]:
    """Workloads whose prompts differ but whose expected ratios do not."""
    def shape(w: Workload) -> tuple[int, ...]:
        return (w.prefix_repetition_prefix_len, w.prefix_repetition_suffix_len,
                w.prefix_repetition_num_prefixes, w.requests_sent)

    ratios = {w.name: estimate(w, sizing).ratio for w in workloads}
    for a, b in combinations(workloads, 2):
        ra, rb = ratios[a.name], ratios[b.name]
        if ra is None or rb is None or shape(a) == shape(b) or abs(ra - rb) >= SAME_RATIO:
            continue
        yield (f"workloads {a.name} and {b.name} send different prompts but both expect "
               f"{ra * 100:.1f}%, so comparing them says nothing about prefix sharing: make "
               f"their shared prefixes differ by whole blocks (block {sizing.block_size})")


def workload_warnings(s: Mapping[str, Any]) -> list[str]:
    """Every warning about the inventory's prefix_repetition workloads, one line each."""
    try:
        workloads = [w for w in experiment.base_workloads(s) if not w.is_custom]
    except (WorkloadError, KeyError, TypeError, ValueError):
        return []  # workloads_fit_the_server says what is wrong
    sizing = sizing_of(s)
    lines = [line for w in workloads for check in (_overlap, _sliding_window, _load, _decode)
             for line in check(w, sizing)]
    return lines + list(_same_ratio(workloads, sizing))


@catalogue.warning
def workloads_measure_what_they_say(s: Mapping[str, Any]) -> Iterator[str]:
    """The workloads' numbers mean what their names suggest (:func:`workload_warnings`)."""
    yield from workload_warnings(s)
