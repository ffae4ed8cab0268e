"""The ``capacity_curve`` verdict of one bench: its measured hit ratio against the
prediction at the capacity its server reported, decided only where the prediction was
made the way the bench sent its requests.

At concurrency 1 the prediction is the one-at-a-time replay, which is how the bench
sends. Above 1, requests in flight hold blocks at once, so what a bounded cache evicts
depends on how they overlap: the record's served expectation is then made by the
scheduler model (:mod:`prefixbench.engines.schedsim`) with the server's
``max_num_seqs`` and ``max_num_batched_tokens``, and the record says at which
concurrency (``served_concurrency``); the report's what-if for your prompts runs at the
workload's concurrency when the record keeps those limits. A record that does not say
(made before the scheduler model), or says another concurrency, stays INCONCLUSIVE.

Above concurrency 1 the server's hits also depend on when each request reaches the
engine, which the point prediction fixes (every request waiting as soon as the client
may send it): on the simulated fleet (the tiny gpt-oss, 12 prompts at concurrency 4)
the point was exact at 25 and 42 usable blocks in three runs, and at 63 blocks two
identical runs measured 35.00% and 38.33% against its 31.66%. So the record also keeps
the range over arrival timings (``served_band_lo`` / ``served_band_hi``,
:mod:`prefixbench.predict.arrivals`: requests late by up to 8 steps and out of order;
for a finite ``request_rate``, the bench's Poisson arrivals at step durations from 1 ms
to 1 s, one at a time and all at once): a measurement within the threshold of the point
or inside the range widened by the threshold is PASS, one outside it FAIL (no timing
tried explains it, and the scheduler model is exact against vLLM's under each). A
record without the range (made before it) keeps the older rule: PASS when it agrees
with the point, INCONCLUSIVE otherwise where the model evicts or the rate is finite.
"""

from __future__ import annotations

import math

from prefixbench.engines.workloads import Workload
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
                 evicted_blocks: int | None, band: tuple[float, float] | None) -> str | None:
    """Why a prediction at ``predicted_at`` cannot judge a bench at ``concurrency``."""
    if predicted_at is None:
        return (f"concurrency {concurrency}: the record does not say at which concurrency "
                f"its prediction was made (recorded before the scheduler model); rerun the "
                f"bench to get one at concurrency {concurrency}")
    if predicted_at != concurrency:
        return (f"concurrency {concurrency}: the prediction was made at concurrency "
                f"{predicted_at}, so its evictions are not the server's")
    if band is None and math.isfinite(request_rate):
        return (f"request_rate {request_rate:g}/s spaces arrivals the scheduler model sends "
                f"back to back, and the record has no range over arrival timings (made "
                f"before it); rerun the bench to judge this point")
    return None


def _evicts(evicted_blocks: int | None) -> str:
    return "evicts" if evicted_blocks is None else f"evicts {evicted_blocks} blocks"


def judge(measured: float | None, predicted: float | None, *, concurrency: int | None,
          note: str | None, max_diff: float, predicted_at: int | None = None,
          request_rate: float = math.inf, evicted_blocks: int | None = None,
          band: tuple[float, float] | None = None) -> tuple[Status, str]:
    """The capacity-curve verdict of one bench, and why. ``concurrency``: requests the
    workload keeps in flight (:func:`prefixbench.report.records.concurrency_of`; ``None``
    for an unknown workload); ``predicted_at``: the concurrency the prediction was made
    at (:func:`predicted_at`); ``evicted_blocks``: what the prediction evicted;
    ``band``: the record's range over arrival timings (above concurrency 1)."""
    if measured is None:
        return INCONCLUSIVE, "no measured hit ratio (the server's counters are missing)"
    if predicted is None:
        return INCONCLUSIVE, f"no prediction ({note or 'the record has none'})"
    if concurrency is None:
        return INCONCLUSIVE, ("the record's workload is unknown, so is the concurrency "
                              "its prediction must be made at")
    diff = measured - predicted
    within = abs(diff) <= max_diff + 1e-12
    head = f"measured {measured:.2%} vs predicted {predicted:.2%} ({diff * 100:+.2f} pp"
    if concurrency == 1:
        return (PASS if within else FAIL), (
            f"{head}; within {max_diff * 100:g} pp: {'yes' if within else 'no'})")
    why = _undecidable(concurrency, predicted_at, request_rate, evicted_blocks, band)
    if why is not None:
        return INCONCLUSIVE, why
    basis = f"vLLM scheduler model at concurrency {concurrency}"
    if band is not None:
        lo, hi = band
        inside = lo - max_diff - 1e-12 <= measured <= hi + max_diff + 1e-12
        span = (f"{lo:.2%} to {hi:.2%} by arrival timing"
                + (f", request_rate {request_rate:g}/s" if math.isfinite(request_rate) else ""))
        if within or inside:
            return PASS, (f"{head}; {basis}; within {max_diff * 100:g} pp of the point: "
                          f"{'yes' if within else 'no'}, of the range {span}: "
                          f"{'yes' if inside else 'no'})")
        return FAIL, (f"{head}; {basis}; outside the range {span} by more than "
                      f"{max_diff * 100:g} pp: no arrival timing tried explains it, and the "
                      f"model is exact against vLLM's scheduler under each)")
    if evicted_blocks != 0 and not within:
        return INCONCLUSIVE, (
            f"{head}) at concurrency {concurrency}, where the model "
            f"{_evicts(evicted_blocks)}: which blocks go depends on when each request "
            f"reaches the engine, and the record has no range over arrival timings (made "
            f"before it), so the difference may be timing, not the server")
    return (PASS if within else FAIL), (
        f"{head}; within {max_diff * 100:g} pp: {'yes' if within else 'no'}; {basis})")
