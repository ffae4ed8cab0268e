"""One result record read into the numbers the report aggregates.

:func:`record_view` takes a benchmark record (and the workload it ran) to a
:class:`RecordView`: both measured hit-ratio signals with the counters as a fallback,
the tutorial's and the block-aligned expectations, the cache signals (preemptions,
evictions), the per-request TTFTs with their cold flags rebuilt from the seed, and the
what-if analyzer's prediction (:func:`record_prediction`). Nothing is aggregated here;
:mod:`prefixbench.report.aggregate` does that over repetitions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefixbench.engines.prefix_repetition import prefix_repetition_cold_flags
from prefixbench.engines.schedconfig import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    Serving,
)
from prefixbench.engines.workloads import Workload, WorkloadError
from prefixbench.measure.bench_json import BenchResultError
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.metrics import SignalsDelta
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.predict.whatif import Prediction, predict
from prefixbench.servers.sweep import tokenizer_dir

__all__ = ["RecordView", "as_float", "concurrency_of", "kept_serving", "record_prediction",
           "record_view"]


def as_float(value: Any) -> float | None:
    """A finite number from a JSON value; ``None`` for anything else (bools included)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _workload(record: BenchmarkRecord, known: Mapping[str, Workload]) -> Workload | None:
    if record.workload:
        try:
            return Workload.from_dict(record.workload)
        except (WorkloadError, TypeError):
            pass
    return known.get(record.key.workload)


def _delta(record: BenchmarkRecord) -> SignalsDelta | None:
    if not record.metrics_delta:
        return None
    try:
        return SignalsDelta.from_dict(record.metrics_delta)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class RecordView:
    """One record's figures, before aggregation over repetitions."""

    record: BenchmarkRecord
    workload: Workload | None
    hit_ratio_queries: float | None
    hit_ratio_by_source: float | None
    hit_tokens: float | None
    query_tokens: float | None
    expected_block_aligned: float | None
    expected_tutorial: float | None
    block_size: int | None
    prefix_caching_enabled: bool | None
    preemptions: float | None
    evictions_sampled: float | None
    kv_cache_usage: float | None
    per_request_ms: tuple[float, ...]
    per_request_cold: tuple[bool, ...] | None
    per_request_source: str | None
    note: str | None
    predicted: Prediction | None = None
    #: Per-request TTFT (ms) in send order, None for a failed request ("ttfts" only).
    ttft_aligned: tuple[float | None, ...] = ()
    expected_served: float | None = None
    junction_lost_blocks: float | None = None
    expected_served_unbounded: float | None = None
    expected_served_full_attention: float | None = None
    #: Above concurrency 1: the lowest and highest ratio arrival timing gives the served
    #: prompts (prefixbench.predict.arrivals); ``None`` in older records.
    expected_served_band: tuple[float, float] | None = None


def _band(expected: Mapping[str, Any]) -> tuple[float, float] | None:
    lo, hi = as_float(expected.get("served_band_lo")), as_float(expected.get("served_band_hi"))
    return None if lo is None or hi is None or lo > hi else (lo, hi)


def record_prediction(record: BenchmarkRecord, workload: Workload | None, run_dir: Path,
                      ) -> Prediction | None:
    """The what-if analyzer's hit ratio for the requests of one record: its workload and
    seed, the block size and KV capacity its server reported, the run's tokenizer copy and
    (custom workloads) the prepared prompts. ``None`` for a server without prefix caching
    (nothing to predict); a :class:`Prediction` with a note when inputs are missing."""
    d = _delta(record)
    cfg = d.cache_config if d is not None else None
    if cfg is not None and cfg.enable_prefix_caching is False:
        return None
    if workload is None:
        return Prediction(ratio=None, note="workload parameters unknown")
    block = as_float(record.expected.get("block_size")) or (cfg.block_size if cfg else None)
    if not block:
        return Prediction(ratio=None, note="block size unknown (no cache_config_info)")
    seeded = workload if workload.seed is not None or record.seed is None \
        else workload.with_seed(record.seed)
    prompts = RunLayout.of(run_dir).prompts_path(workload.name)
    serving = _serving(record, workload)
    pred = predict(seeded, block_size=int(block),
                   cache_config=cfg,
                   prompts_file=prompts if prompts.is_file() else None,
                   tokenizer_dir=tokenizer_dir(run_dir), serving=serving,
                   # prefix_repetition's range is the served expectation's, in the record
                   band=workload.is_custom)
    source = (f"{prompts.relative_to(run_dir)} (the prompts the bench sent)"
              if prompts.is_file() else
              f"{workload.name}'s prompts regenerated from seed {seeded.seed or 0}")
    what = (f"replays {source} with the server's block size {int(block)} and KV capacity, "
            f"at concurrency {serving.concurrency}")
    return replace(pred, note="; ".join(n for n in (what, pred.note) if n))


def concurrency_of(workload: Workload) -> int:
    """How many requests the workload's bench keeps in flight: its ``max_concurrency``,
    unset (unbounded) all its prompts."""
    return max(1, workload.max_concurrency or workload.num_prompts or 1)


def kept_serving(record: BenchmarkRecord, workload: Workload) -> Serving | None:
    """How the record's bench sent its requests when the record keeps its server's
    scheduler limits (``max_num_seqs``, ``max_num_batched_tokens``: what the scheduler
    model needs above concurrency 1); ``None`` for a record that does not."""
    e = record.expected or {}
    if not (as_float(e.get("max_num_seqs")) and as_float(e.get("max_num_batched_tokens"))):
        return None
    return _serving(record, workload)


def _serving(record: BenchmarkRecord, workload: Workload) -> Serving:
    """How the record's bench sent its requests: the workload's concurrency (unset: all
    its prompts at once) and the server's limits the record kept (else the tutorial's)."""
    e = record.expected
    seqs = as_float(e.get("max_num_seqs"))
    budget = as_float(e.get("max_num_batched_tokens"))
    return Serving(concurrency=concurrency_of(workload),
                   max_num_seqs=int(seqs) if seqs else DEFAULT_MAX_NUM_SEQS,
                   max_num_batched_tokens=int(budget) if budget
                   else DEFAULT_MAX_NUM_BATCHED_TOKENS)


def record_view(record: BenchmarkRecord, known: Mapping[str, Workload],
                run_dir: Path | None = None, *, custom_only: bool = False) -> RecordView:
    """What the report reads of one record; ``run_dir`` given: with its prediction
    (``custom_only``: for a custom workload only, whose record keeps no replay of the
    prompts its server was sent at the bench's concurrency)."""
    w = _workload(record, known)
    d = _delta(record)
    m, e = record.measured, record.expected
    hq = as_float(m.get("hit_ratio_queries"))
    hs = as_float(m.get("hit_ratio_by_source"))
    hits = as_float(m.get("hit_tokens"))
    queries = as_float(m.get("query_tokens"))
    if d is not None:
        hq = hq if hq is not None else d.hit_ratio_queries
        hs = hs if hs is not None else d.hit_ratio_by_source
        hits = hits if hits is not None else d.hits
        queries = queries if queries is not None else d.queries
    cfg = d.cache_config if d is not None else None
    block = as_float(e.get("block_size"))
    block_size = int(block) if block else (cfg.block_size if cfg else None)
    exp_block = as_float(e.get("block_aligned_ratio", e.get("block_aligned")))
    exp_tut = as_float(e.get("tutorial_ratio", e.get("tutorial")))
    if w is not None and not w.is_custom:
        if exp_tut is None:
            exp_tut = w.tutorial_ratio()
        if exp_block is None and block_size:
            exp_block = w.expected(block_size).ratio
    counters = d.counters if d is not None else {}
    pre = as_float(m.get("preemptions"))
    values, cold, source, note = _per_request(record, w, queries)
    return RecordView(
        ttft_aligned=_ttft_aligned(record),
        expected_served=as_float(e.get("served_ratio")),
        junction_lost_blocks=as_float(e.get("junction_lost_blocks")),
        expected_served_unbounded=as_float(e.get("served_unbounded_ratio")),
        expected_served_full_attention=as_float(e.get("served_full_attention_ratio")),
        expected_served_band=_band(e),
        record=record, workload=w, hit_ratio_queries=hq, hit_ratio_by_source=hs,
        hit_tokens=hits, query_tokens=queries, expected_block_aligned=exp_block,
        expected_tutorial=exp_tut, block_size=block_size,
        prefix_caching_enabled=cfg.enable_prefix_caching if cfg else None,
        preemptions=pre if pre is not None else counters.get("num_preemptions"),
        evictions_sampled=counters.get("kv_block_evictions_sampled"),
        kv_cache_usage=d.kv_cache_usage_after if d is not None else None,
        per_request_ms=values, per_request_cold=cold, per_request_source=source, note=note,
        predicted=None if run_dir is None or (custom_only and not (w and w.is_custom))
        else record_prediction(record, w, run_dir))


def _ttft_aligned(record: BenchmarkRecord) -> tuple[float | None, ...]:
    """Every request's TTFT in ms, in send order; None where the request failed."""
    try:
        detail = record.bench_result.detail
    except BenchResultError:
        return ()
    if detail.ttfts is None:
        return ()
    ok = detail.succeeded
    return tuple(v * 1000.0 if good else None
                 for v, good in zip(detail.ttfts, ok, strict=False))


def _per_request(
    record: BenchmarkRecord, w: Workload | None, queries: float | None,
) -> tuple[tuple[float, ...], tuple[bool, ...] | None, str | None, str | None]:
    """Per-request TTFTs in ms (or latencies), and cold flags rebuilt from the seed."""
    try:
        detail = record.bench_result.detail
    except BenchResultError:
        return (), None, None, "bench result unreadable"
    if detail.ttfts is not None:
        raw, source = detail.ttfts, "ttfts"
    elif detail.latencies:
        raw, source = detail.latencies, "latencies"
    else:
        return (), None, None, "no per-request detail saved"
    ok = detail.succeeded
    values = tuple(v * 1000.0 for v, good in zip(raw, ok, strict=False) if good)
    if w is None:
        return values, None, source, "workload parameters unknown: no cold/warm split"
    if w.is_custom:
        return values, None, source, None
    pre = w.pre_requests
    if queries:
        inferred = w.infer_pre_requests(queries)
        if inferred is not None:
            pre = inferred
    try:
        flags = prefix_repetition_cold_flags(
            record.seed, w.num_prompts, w.prefix_repetition_num_prefixes,
            shuffle=not w.disable_shuffle, pre_requests=pre)
    except ValueError as exc:
        return values, None, source, f"cold/warm split impossible: {exc}"
    if len(flags) != len(raw):
        return values, None, source, (
            f"{len(raw)} per-request values but {len(flags)} requests planned: no split")
    cold = tuple(c for c, good in zip(flags, ok, strict=True) if good)
    return values, cold, source, None
