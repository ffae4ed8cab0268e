"""The ``capacity_curve`` verdict of one bench: its measured hit ratio against the
prediction at the capacity its server reported, decided only where the prediction was
made the way the bench sent its requests.

At concurrency 1 the prediction is the one-at-a-time replay, which is how the bench
sends. Above 1, requests in flight hold blocks at once, so what a bounded cache evicts
depends on how they overlap: the record's served expectation is then made by the
scheduler model (:mod:`prefixbench.predict.schedsim`) with the server's
``max_num_seqs`` and ``max_num_batched_tokens``, and the record says at which
concurrency (``served_concurrency``); the report's what-if for your prompts runs at the
workload's concurrency when the record keeps those limits. A record that does not say
(made before the scheduler model), or says another concurrency, stays INCONCLUSIVE.

Where the model evicts blocks above concurrency 1, the server's own hit ratio depends on
when each request reaches the engine, which the model does not know: it has every
request arrive at a step boundary, the next one right after its predecessor finishes.
On the simulated fleet (the tiny gpt-oss, 12 prompts at concurrency 4) the model was
exact at 25 and 42 usable blocks in two runs, and at 63 blocks the same run measured
35.00% and then 38.33% against the model's 31.66%. So such a point is PASS when the
measurement agrees with the model within the threshold, and INCONCLUSIVE, not FAIL,
when it does not: the difference may be the timing, not the server.

A finite ``request_rate`` spaces arrivals that the model sends back to back, so fewer
requests overlap than it assumes. With nothing evicted in the model, where the pool is
fullest, spacing cannot change a hit (with a cache that evicts nothing, concurrency
changes no hit); with evictions it can, and the verdict stays INCONCLUSIVE.
"""

from __future__ import annotations

import math

from prefixbench.bench.workloads import Workload
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.report.records import as_float, concurrency_of, kept_serving
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, PASS, Status

__all__ = ["judge", "predicted_at"]


def predicted_at(record: BenchmarkRecord, workload: Workload, method: str | None
                 ) -> int | None:
    """The concurrency the record's prediction was made at, as the record says: 1 for a
    concurrency-1 workload (always one at a time); the served expectation's
    ``served_concurrency``; the what-if's, the workload's when the record keeps the
    server's limits. ``None`` when the record does not say."""
    if concurrency_of(workload) == 1:
        return 1
    if method == "served":
        value = as_float((record.expected or {}).get("served_concurrency"))
        return int(value) if value else None
    if method == "what-if" and kept_serving(record, workload) is not None:
        return concurrency_of(workload)
    return None


def _undecidable(concurrency: int, predicted_at: int | None, request_rate: float,
                 evicted_blocks: int | None) -> str | None:
    """Why a prediction at ``predicted_at`` cannot judge a bench at ``concurrency``."""
    if predicted_at is None:
        return (f"concurrency {concurrency}: the record does not say at which concurrency "
                f"its prediction was made (recorded before the scheduler model); rerun the "
                f"bench to get one at concurrency {concurrency}")
    if predicted_at != concurrency:
        return (f"concurrency {concurrency}: the prediction was made at concurrency "
                f"{predicted_at}, so its evictions are not the server's")
    if math.isfinite(request_rate) and evicted_blocks != 0:
        evicted = "evicts" if evicted_blocks is None else f"evicts {evicted_blocks} blocks"
        return (f"request_rate {request_rate:g}/s spaces arrivals the scheduler model sends "
                f"back to back, and at this capacity the model {evicted}, so timing changes "
                f"hits; set request_rate: inf to judge this point")
    return None


def judge(measured: float | None, predicted: float | None, *, concurrency: int | None,
          note: str | None, max_diff: float, predicted_at: int | None = None,
          request_rate: float = math.inf, evicted_blocks: int | None = None,
          ) -> tuple[Status, str]:
    """The capacity-curve verdict of one bench, and why. ``concurrency``: requests the
    workload keeps in flight (:func:`prefixbench.report.records.concurrency_of`; ``None``
    for an unknown workload); ``predicted_at``: the concurrency the prediction was made
    at (:func:`predicted_at`); ``evicted_blocks``: what the prediction evicted."""
    if measured is None:
        return INCONCLUSIVE, "no measured hit ratio (the server's counters are missing)"
    if predicted is None:
        return INCONCLUSIVE, f"no prediction ({note or 'the record has none'})"
    if concurrency is None:
        return INCONCLUSIVE, ("the record's workload is unknown, so is the concurrency "
                              "its prediction must be made at")
    basis = ""
    if concurrency > 1:
        why = _undecidable(concurrency, predicted_at, request_rate, evicted_blocks)
        if why is not None:
            return INCONCLUSIVE, why
        basis = f"; vLLM scheduler model at concurrency {concurrency}"
        if math.isfinite(request_rate):
            basis += (f", request_rate {request_rate:g}/s not modelled: nothing evicted, "
                      f"so timing cannot change a hit")
    diff = measured - predicted
    within = abs(diff) <= max_diff + 1e-12
    if concurrency > 1 and evicted_blocks != 0 and not within:
        evicted = "evicts" if evicted_blocks is None else f"evicts {evicted_blocks} blocks"
        return INCONCLUSIVE, (
            f"measured {measured:.2%} vs predicted {predicted:.2%} ({diff * 100:+.2f} pp) at "
            f"concurrency {concurrency}, where the model {evicted}: which blocks go depends on "
            f"when each request reaches the engine, which the model does not know, so the "
            f"difference may be timing, not the server")
    return (PASS if within else FAIL), (
        f"measured {measured:.2%} vs predicted {predicted:.2%} ({diff * 100:+.2f} pp; "
        f"within {max_diff * 100:g} pp: {'yes' if within else 'no'}{basis})")
