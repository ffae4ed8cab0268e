"""One replay of a bench, the same for every caller: the record's served expectation
(:mod:`prefixbench.predict.served`), the plan's estimate
(:mod:`prefixbench.config.workload_estimate`, through
:func:`prefixbench.predict.whatif.predict_prefix_repetition`) and the what-if
(:mod:`prefixbench.predict.whatif`) all replay a workload's requests here, so for one
workload and one server they give the same expectation and the same range over arrival
timings.

How ``vllm bench serve`` sends a workload (vLLM 0.32, ``vllm/benchmarks/serve.py``,
``benchmark``), each phase finished before the next starts:

1. **the ready check**, when ``ready_check_timeout_sec`` > 0: the first prompt, alone
   (``wait_for_endpoint``, which returns once one request succeeded);
2. **the warmups**: ``num_warmups`` copies of the first prompt, at most
   ``max_concurrency`` in flight (a semaphore), all awaited (``asyncio.gather``);
3. **the run**: the prompts, at most ``max_concurrency`` in flight, released by the
   arrival process (``request_rate``, ``burstiness``).

:func:`prefixbench.engines.schedconfig.bench_phases` puts the first two on a
:class:`~prefixbench.engines.schedconfig.Serving` (and
:func:`~prefixbench.engines.schedconfig.bench_serving` builds a bench's whole one);
:func:`replay_bench` replays the requests (the pre-requests first) as it says, through
the scheduler model above concurrency 1, and gives the range over arrival
timings of the run's requests (the ready check and the warmups always as the point:
:func:`prefixbench.predict.arrivals.arrival_band`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace

from prefixbench.engines.cachemodel import CacheModel
from prefixbench.engines.cachesim import Tokens
from prefixbench.engines.schedconfig import Serving, bench_phases
from prefixbench.engines.workloads import Workload
from prefixbench.predict.arrivals import ArrivalBand, arrival_band
from prefixbench.predict.replay import Prediction, new_scheduler, replay_requests

__all__ = ["BenchReplay", "bench_band", "replay_bench"]


@dataclass(frozen=True)
class BenchReplay:
    """A bench's replay: the prediction (with the range over arrival timings above
    concurrency 1, when asked) and that range in full (``None``: not asked, one at a
    time, or refused)."""

    prediction: Prediction
    band: ArrivalBand | None = None


def bench_band(prompts: Sequence[Tokens], outputs: Sequence[int], *,
               workload: Workload | None, block_size: int, capacity_blocks: int | None,
               cache_model: CacheModel, serving: Serving) -> ArrivalBand:
    """The range over arrival timings of a bench's requests (``prompts``: the
    pre-requests ``serving`` phases first, then the run's), paced as the workload says
    (``request_rate``, ``burstiness``, its seed). Raises
    :class:`prefixbench.engines.cachesim.CapacityError` if a request cannot fit."""
    w = workload
    return arrival_band(
        prompts, outputs, serving=serving,
        request_rate=w.request_rate if w is not None else math.inf,
        burstiness=w.burstiness if w is not None else 1.0,
        seed=(w.seed or 0) if w is not None else 0,
        new_sim=lambda: new_scheduler(block_size, capacity_blocks, cache_model, serving))


def replay_bench(
    prompts: Sequence[array[int]],
    outputs: Sequence[int],
    *,
    workload: Workload | None,
    block_size: int,
    capacity_blocks: int | None,
    cache_model: CacheModel,
    serving: Serving,
    method: str,
    note: str | None = None,
    band: bool = True,
    pre_requests: int | None = None,
) -> BenchReplay:
    """Replay a bench of ``workload``: ``prompts`` and their ``outputs`` in send order,
    its pre-requests first (``pre_requests`` copies of the first prompt, default the
    workload's ready check and warmups), phased as ``vllm bench serve`` sends them
    (:func:`~prefixbench.engines.schedconfig.bench_phases`), at ``serving``'s
    concurrency; with ``band`` and above concurrency 1 also the range over arrival
    timings."""
    serving = bench_phases(workload, serving, pre_requests)
    if serving.ready + serving.warmups > len(prompts):
        raise ValueError(f"{serving.ready + serving.warmups} pre-requests but only "
                         f"{len(prompts)} requests to replay")
    pred = replay_requests(prompts, outputs, block_size=block_size,
                           capacity_blocks=capacity_blocks, method=method, note=note,
                           cache_model=cache_model, serving=serving)
    if not (band and serving.scheduled) or pred.ratio is None:
        return BenchReplay(pred)
    timed = bench_band(prompts, outputs, workload=workload, block_size=block_size,
                       capacity_blocks=capacity_blocks, cache_model=cache_model,
                       serving=serving)
    return BenchReplay(replace(pred, band=(timed.lo, timed.hi), band_note=timed.describe()),
                       timed)
