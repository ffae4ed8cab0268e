"""When requests reach the engine: the range of hits over arrival timings.

The scheduler model (:class:`prefixbench.engines.schedsim.SchedulerSim`) has a finished
request's successor waiting before the next step, and every request of a burst waiting
at once. A real client is not that punctual: the response travels back, the next
request is sent, the API server tokenizes it, and it reaches the engine core some steps
later; requests sent together reach it in different steps, possibly out of order. With
a cache that evicts, which blocks go depends on that timing, so one server and one
workload can give different hit ratios from run to run (the simulated fleet measured
35.00% and 38.33% in two identical runs where the model gives 31.66%).

:func:`arrival_band` replays the same requests through fresh copies of the server model
under arrival timings the model can state, and gives the lowest and highest hits:

* **the point** (what the model predicts): every request waiting as soon as the
  client may send it;
* **jitter**: each request reaches the engine a random 0 to ``span`` steps after the
  client may send it (spans 1, 2, 4 and 8 steps, several seeds each), so requests sent
  together can arrive in any order;
* **paced traffic** (a finite ``request_rate``): the bench's own arrival process, gaps
  drawn from a gamma distribution with shape ``burstiness`` and mean ``1 / rate``
  seconds, at several step durations from 1 ms to 1 s (what a step takes is the
  server's: a decode step of the tiny model on a CPU takes about 9 ms), with a little
  jitter; and both of its limits: all at once (steps far longer than the gaps) and one
  at a time (steps far shorter).

The band is not a bound over every timing a server can see: it is the range over the
timings tried. A measurement inside it is explained by timing; one outside it by more
than the threshold is not explained by any timing tried, and the scheduler model itself
is exact against vLLM's (``tests/integration/test_schedsim_vs_vllm.py``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.engines.cachesim import Tokens
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedsim import SchedulerSim

__all__ = ["ArrivalBand", "Timing", "arrival_band", "timings"]

#: Jitter spans in steps, and seeds per span.
JITTER_SPANS = (1, 2, 4, 8)
JITTER_SEEDS = 8
#: Step durations (seconds) paced traffic is replayed at.
STEP_SECONDS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
PACED_SEEDS = 3
#: Replayed requests over all variants, at most: fewer seeds above it.
MAX_VARIANT_REQUESTS = 400_000


@dataclass(frozen=True)
class Timing:
    """One arrival timing of the measured requests
    (:func:`prefixbench.engines.schedclient.send_timed`): the step from which the client
    may send request ``i`` (``release[i]``; it also waits for a free slot) and the steps
    it then takes to reach the engine (``lag[i]``)."""

    name: str
    release: tuple[int, ...]
    lag: tuple[int, ...]


@dataclass(frozen=True)
class ArrivalBand:
    """The lowest and highest hits over ``variants`` arrival timings (the point
    included), of ``query_tokens`` prompt tokens."""

    lo_hit_tokens: int
    hi_hit_tokens: int
    query_tokens: int
    variants: int
    #: The timing that gave the lowest and the highest.
    lo_timing: str
    hi_timing: str

    @property
    def lo(self) -> float:
        return self.lo_hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def hi(self) -> float:
        return self.hi_hit_tokens / self.query_tokens if self.query_tokens else 0.0

    def describe(self) -> str:
        return (f"{self.lo:.2%} to {self.hi:.2%} over {self.variants} arrival timings "
                f"(lowest: {self.lo_timing}; highest: {self.hi_timing})")

    def record(self, prefix: str) -> dict[str, Any]:
        """The record keys a bench keeps (``<prefix>_lo``, ``_hi``, ``_variants``,
        ``_note``)."""
        return {f"{prefix}_lo": self.lo, f"{prefix}_hi": self.hi,
                f"{prefix}_variants": self.variants, f"{prefix}_note": self.describe()}

    def to_dict(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi, "lo_hit_tokens": self.lo_hit_tokens,
                "hi_hit_tokens": self.hi_hit_tokens, "query_tokens": self.query_tokens,
                "variants": self.variants, "lo_timing": self.lo_timing,
                "hi_timing": self.hi_timing}


def timings(n: int, *, request_rate: float = math.inf, burstiness: float = 1.0,
            seed: int = 0, serial_gap: int = 1, seeds: int | None = None
            ) -> Iterator[Timing]:
    """The arrival timings of :func:`arrival_band` for ``n`` requests: the point first.
    ``serial_gap``: steps apart that make requests never overlap (one at a time)."""
    zero = (0,) * n
    yield Timing("as soon as the client may send", zero, zero)
    rng = random.Random(seed)  # noqa: S311 - seeded variants, not secrets
    if math.isinf(request_rate):
        for span in JITTER_SPANS:
            for k in range(JITTER_SEEDS if seeds is None else seeds):
                yield Timing(f"jitter 0-{span} steps, seed {k}", zero,
                             tuple(rng.randint(0, span) for _ in range(n)))
        return
    yield Timing("one at a time", tuple(i * serial_gap for i in range(n)), zero)
    theta = 1.0 / (request_rate * burstiness)
    for k in range(PACED_SEEDS if seeds is None else seeds):
        t, at = 0.0, []
        for _ in range(n):
            at.append(t)
            t += rng.gammavariate(burstiness, theta)
        for step_s in STEP_SECONDS:
            yield Timing(f"{request_rate:g}/s, steps of {step_s * 1000:g} ms, seed {k}",
                         tuple(int(a / step_s) for a in at),
                         tuple(rng.randint(0, 2) for _ in range(n)))


def arrival_band(prompts: Sequence[Tokens], outputs: Sequence[int], *,
                 new_sim: Callable[[], SchedulerSim], serving: Serving,
                 request_rate: float = math.inf, burstiness: float = 1.0,
                 seed: int = 0) -> ArrivalBand:
    """Hits of ``prompts`` (pre-requests first: ``serving.ready`` one at a time, then
    ``serving.warmups``, each phase finished before the next, always as the point)
    through a fresh ``new_sim()`` per timing of :func:`timings`; lowest and highest.
    Raises :class:`prefixbench.engines.cachesim.CapacityError` if a request cannot fit."""
    pre = serving.ready + serving.warmups
    measured = len(prompts) - pre
    per_variant = max(1, len(prompts))
    budget = max(1, MAX_VARIANT_REQUESTS // per_variant)
    full = 1 + (len(JITTER_SPANS) * JITTER_SEEDS if math.isinf(request_rate)
                else 1 + PACED_SEEDS * len(STEP_SECONDS))
    seeds = None
    if budget < full:
        per_seed = len(JITTER_SPANS) if math.isinf(request_rate) else len(STEP_SECONDS)
        seeds = max(1, (budget - 2) // per_seed)
    gap = max((len(p) for p in prompts), default=1) + max(outputs, default=1) + 2
    lo: tuple[int, str] | None = None
    hi: tuple[int, str] | None = None
    variants = queries = 0
    for timing in timings(measured, request_rate=request_rate, burstiness=burstiness,
                          seed=seed, serial_gap=gap, seeds=seeds):
        sim = new_sim()
        for i in range(pre):
            if i == serving.ready:
                sim.drain()
            sim.send(prompts[i], outputs[i],
                     concurrency=1 if i < serving.ready else serving.concurrency)
        sim.drain()
        sim.replay(prompts[pre:], outputs[pre:], concurrency=serving.concurrency,
                   release=timing.release, lag=timing.lag)
        hits, queries = sim.hit_tokens_total, sim.query_tokens_total
        variants += 1
        if lo is None or hits < lo[0]:
            lo = (hits, timing.name)
        if hi is None or hits > hi[0]:
            hi = (hits, timing.name)
    assert lo is not None and hi is not None
    return ArrivalBand(lo_hit_tokens=lo[0], hi_hit_tokens=hi[0], query_tokens=queries,
                       variants=variants, lo_timing=lo[1], hi_timing=hi[1])
