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

The range is the engine model's the record names (``expected_scheduler``,
:func:`prefixbench.engines.platforms.engine_model`): on Neuron the plugin's scheduler, one
prefill at a time and never beside a decode, over one full-attention group, whose range
is far narrower than vLLM's over the hybrid manager (the tiny gpt-oss's 12 prompts at
concurrency 4: 20.00 points wide at 63 blocks on cpu; 0 to 8.33 points at block 32 on
the Neuron model, docs/capacity-and-goodput.md). So that a reader sees how much a
verdict could fail, every decided verdict says what it accepted: the interval of
measured hit ratios it passes (the point +- the threshold, joined with the range widened
by it; within 0-100%) and its width in points (:attr:`CapacityVerdict.accepted`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prefixbench.engines.workloads import Workload
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.report.records import as_float, concurrency_of, kept_serving
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, PASS, Status

__all__ = ["CapacityVerdict", "accepted_interval", "accepted_text", "decide", "judge",
           "predicted_at", "scheduler_of"]


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


@dataclass(frozen=True)
class CapacityVerdict:
    """The ``capacity_curve`` verdict of one bench, why, and the measured hit ratios it
    accepted as PASS (``accepted``: ``(low, high)``, ``None`` when no interval decided
    it): how much power the verdict had."""

    status: Status
    detail: str
    accepted: tuple[float, float] | None = None

    @property
    def accepted_width_pp(self) -> float | None:
        """How wide the accepted interval is, in percentage points."""
        return None if self.accepted is None else (self.accepted[1] - self.accepted[0]) * 100


def accepted_interval(predicted: float, max_diff: float,
                      band: tuple[float, float] | None = None) -> tuple[float, float]:
    """The measured hit ratios a verdict passes: ``predicted`` +- ``max_diff``, joined
    with ``band`` (the range over arrival timings) widened by ``max_diff``, within 0-1
    (a hit ratio is neither negative nor above 1)."""
    lo, hi = predicted, predicted
    if band is not None:
        lo, hi = min(lo, band[0]), max(hi, band[1])
    return max(0.0, lo - max_diff), min(1.0, hi + max_diff)


def accepted_text(interval: tuple[float, float]) -> str:
    """An accepted interval and its width in points, as the reports show it."""
    lo, hi = interval
    return f"{lo:.2%}-{hi:.2%} ({(hi - lo) * 100:.2f} points wide)"


def _accepted(interval: tuple[float, float]) -> str:
    return f"accepted {accepted_text(interval)}"


def scheduler_of(record: BenchmarkRecord) -> str | None:
    """The scheduler the record's served expectation assumed (``expected_scheduler``;
    ``None``: a record made before it said)."""
    value = (record.expected or {}).get("expected_scheduler")
    return value if isinstance(value, str) else None


def _basis(concurrency: int, scheduler: str | None) -> str:
    """The model the prediction came from, as the record says (``expected_scheduler``;
    ``None``: a record made before it said, always vLLM's)."""
    if scheduler is not None and scheduler.startswith("Neuron"):
        return f"the Neuron plugin's scheduler model ({scheduler}) at concurrency {concurrency}"
    return f"vLLM scheduler model at concurrency {concurrency}"


def _oracle(scheduler: str | None) -> str:
    """What the model is checked against under timed clients
    (``tests/integration/test_schedsim_vs_vllm.py``, ``test_schedneuron_vs_vllm.py``)."""
    if scheduler is not None and scheduler.startswith("Neuron"):
        return "vLLM's scheduler running the plugin's design"
    return "vLLM's scheduler"


def judge(measured: float | None, predicted: float | None, *, concurrency: int | None,
          note: str | None, max_diff: float, predicted_at: int | None = None,
          request_rate: float = math.inf, evicted_blocks: int | None = None,
          band: tuple[float, float] | None = None, scheduler: str | None = None
          ) -> tuple[Status, str]:
    """The capacity-curve verdict of one bench, and why (:func:`decide`)."""
    v = decide(measured, predicted, concurrency=concurrency, note=note, max_diff=max_diff,
               predicted_at=predicted_at, request_rate=request_rate,
               evicted_blocks=evicted_blocks, band=band, scheduler=scheduler)
    return v.status, v.detail


def decide(measured: float | None, predicted: float | None, *, concurrency: int | None,
           note: str | None, max_diff: float, predicted_at: int | None = None,
           request_rate: float = math.inf, evicted_blocks: int | None = None,
           band: tuple[float, float] | None = None, scheduler: str | None = None
           ) -> CapacityVerdict:
    """The capacity-curve verdict of one bench, why, and what it accepted.
    ``concurrency``: requests the workload keeps in flight
    (:func:`prefixbench.report.records.concurrency_of`; ``None`` for an unknown
    workload); ``predicted_at``: the concurrency the prediction was made at
    (:func:`predicted_at`); ``evicted_blocks``: what the prediction evicted; ``band``:
    the record's range over arrival timings (above concurrency 1); ``scheduler``: the
    scheduler the record's expectation assumed (``expected_scheduler``)."""
    if measured is None:
        return CapacityVerdict(INCONCLUSIVE,
                               "no measured hit ratio (the server's counters are missing)")
    if predicted is None:
        return CapacityVerdict(INCONCLUSIVE, f"no prediction ({note or 'the record has none'})")
    if concurrency is None:
        return CapacityVerdict(INCONCLUSIVE, (
            "the record's workload is unknown, so is the concurrency its prediction must be "
            "made at"))
    diff = measured - predicted
    within = abs(diff) <= max_diff + 1e-12
    head = f"measured {measured:.2%} vs predicted {predicted:.2%} ({diff * 100:+.2f} pp"
    point = accepted_interval(predicted, max_diff)
    if concurrency == 1:
        return CapacityVerdict((PASS if within else FAIL), (
            f"{head}; within {max_diff * 100:g} pp: {'yes' if within else 'no'}; "
            f"{_accepted(point)})"), point)
    why = _undecidable(concurrency, predicted_at, request_rate, evicted_blocks, band)
    if why is not None:
        return CapacityVerdict(INCONCLUSIVE, why)
    basis = _basis(concurrency, scheduler)
    if band is not None:
        lo, hi = band
        inside = lo - max_diff - 1e-12 <= measured <= hi + max_diff + 1e-12
        span = (f"{lo:.2%} to {hi:.2%} by arrival timing"
                + (f", request_rate {request_rate:g}/s" if math.isfinite(request_rate) else ""))
        accepted = accepted_interval(predicted, max_diff, band)
        if within or inside:
            return CapacityVerdict(PASS, (
                f"{head}; {basis}; within {max_diff * 100:g} pp of the point: "
                f"{'yes' if within else 'no'}, of the range {span}: "
                f"{'yes' if inside else 'no'}; {_accepted(accepted)})"), accepted)
        return CapacityVerdict(FAIL, (
            f"{head}; {basis}; outside the range {span} by more than {max_diff * 100:g} pp: "
            f"no arrival timing tried explains it, and the model is exact against "
            f"{_oracle(scheduler)} under each; {_accepted(accepted)})"), accepted)
    if evicted_blocks != 0 and not within:
        return CapacityVerdict(INCONCLUSIVE, (
            f"{head}) at concurrency {concurrency}, where the model "
            f"{_evicts(evicted_blocks)}: which blocks go depends on when each request "
            f"reaches the engine, and the record has no range over arrival timings (made "
            f"before it), so the difference may be timing, not the server"))
    return CapacityVerdict((PASS if within else FAIL), (
        f"{head}; within {max_diff * 100:g} pp: {'yes' if within else 'no'}; {basis}; "
        f"{_accepted(point)})"), point)
