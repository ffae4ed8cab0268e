"""TTFT predicted: a bench's requests replayed through the scheduler model with step
durations from a host's fitted step-time model
(:mod:`prefixbench.predict.ttftfit`, :mod:`prefixbench.engines.steptime`).

The scheduler models (:mod:`prefixbench.engines.schedsim`, ``schedasync``,
``schedneuron``) decide what each step runs, exactly as the server does; the fitted
model says how long that step takes. The client is the bench's: requests released by
its arrival process (``request_rate``, gaps from a gamma distribution of shape
``burstiness``, seeded: the same process as vLLM's ``get_request``, not its random
stream), at most ``max_concurrency`` in flight. The median is the replay's; the p99 is
the replay's plus the tail the fitted model leaves unexplained on the baseline
(:attr:`prefixbench.predict.ttftfit.TimeFit.tail_s`: a first request after start-up,
the machine's other load), carried over as it was measured.

:data:`MEDIAN_TOLERANCE` and :data:`P99_TOLERANCE` are the model's stated error: a
measured TTFT further from the prediction than that is called out
(:func:`compare`): a server that does not save what its hits should, or a host that
changed between the baseline and the cached run.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.engines.cachesim import Tokens
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.steptime import replay_seconds, timed
from prefixbench.predict.ttftfit import TimeFit

__all__ = ["MEDIAN_TOLERANCE", "P99_TOLERANCE", "TtftComparison", "TtftPrediction",
           "arrival_seconds", "compare", "percentile", "predict_ttft", "startup_sets_p99"]

#: The model's stated error on the median and on the p99 TTFT (docs/performance.md,
#: "TTFT predicted": what it reaches on the recorded runs).
MEDIAN_TOLERANCE: Final = 0.10
P99_TOLERANCE: Final = 0.25


def percentile(values: Sequence[float], q: float) -> float:
    """``numpy.percentile``'s default (linear) interpolation, as ``vllm bench serve``
    computes its p99."""
    s = sorted(values)
    if not s:
        raise ValueError("no values")
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def arrival_seconds(n: int, *, request_rate: float = math.inf, burstiness: float = 1.0,
                    seed: int = 0) -> list[float]:
    """When the bench releases each of ``n`` requests (seconds from its start)."""
    if math.isinf(request_rate):
        return [0.0] * n
    if request_rate <= 0 or burstiness <= 0:
        raise ValueError("request_rate and burstiness must be > 0")
    rng = random.Random(seed)  # noqa: S311 - the bench's seeded arrival process
    theta = 1.0 / (request_rate * burstiness)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out


@dataclass(frozen=True)
class TtftPrediction:
    """Predicted TTFTs of one bench (seconds)."""

    ttfts: tuple[float, ...]
    median_s: float
    p99_s: float
    fit: TimeFit

    def as_dict(self) -> dict[str, Any]:
        return {"median_ttft_ms": self.median_s * 1e3, "p99_ttft_ms": self.p99_s * 1e3,
                "requests": len(self.ttfts), "fit": self.fit.as_dict()}


def predict_ttft(fit: TimeFit, sim: SchedulerSim, prompts: Sequence[Tokens],
                 outputs: Sequence[int], *, arrivals: Sequence[float], concurrency: int,
                 pre_requests: int = 0) -> TtftPrediction:
    """Replay ``prompts`` through ``sim`` (a fresh scheduler model of the server, or one
    that already served earlier benches: its cache carries over) with ``fit``'s step
    times. The first ``pre_requests`` prompts (the bench's ready check and warmups) are
    sent one at a time and not measured."""
    clocked = timed(sim, fit.cost) if not hasattr(sim, "clock") else sim
    if pre_requests:
        k = pre_requests
        replay_seconds(clocked, prompts[:k], outputs[:k], arrivals=[0.0] * k,
                       concurrency=1)
        prompts, outputs = prompts[k:], outputs[k:]
    start = getattr(clocked, "clock", 0.0)
    ttfts = replay_seconds(clocked, prompts, outputs,
                           arrivals=[start + a for a in arrivals], concurrency=concurrency)
    return TtftPrediction(tuple(ttfts), statistics.median(ttfts),
                          percentile(ttfts, 99) + fit.tail_s, fit)


@dataclass(frozen=True)
class TtftComparison:
    """Predicted against measured median and p99 TTFT of one bench."""

    predicted_median_ms: float
    measured_median_ms: float
    predicted_p99_ms: float
    measured_p99_ms: float
    #: The measured p99 is set by the server's first request after start-up, which the
    #: model does not time (:func:`startup_sets_p99`): the p99s are shown, not judged.
    startup_p99: bool = False
    #: Others' share of the machine's CPU (:mod:`prefixbench.measure.hostload`) while
    #: the host's baselines at concurrency 1 ran (their mean) and while this bench ran;
    #: None: not measured. Beyond ``load_max_diff`` apart, a disagreement is said to be
    #: possibly the machine's.
    baseline_load: float | None = None
    cached_load: float | None = None
    load_max_diff: float = 0.15

    @property
    def load_differs(self) -> bool:
        return (self.baseline_load is not None and self.cached_load is not None
                and abs(self.cached_load - self.baseline_load) > self.load_max_diff)

    @property
    def median_error(self) -> float:
        return self.predicted_median_ms / self.measured_median_ms - 1.0

    @property
    def p99_error(self) -> float:
        return self.predicted_p99_ms / self.measured_p99_ms - 1.0

    @property
    def agrees(self) -> bool:
        """Both within the model's stated error."""
        return (abs(self.median_error) <= MEDIAN_TOLERANCE
                and (self.startup_p99 or abs(self.p99_error) <= P99_TOLERANCE))

    def verdict(self) -> str:
        """One line: agreement, or which measured figure is beyond the stated error."""
        out = []
        if abs(self.median_error) > MEDIAN_TOLERANCE:
            out.append(f"median {self.median_error:+.1%} (stated error "
                       f"{MEDIAN_TOLERANCE:.0%})")
        if abs(self.p99_error) > P99_TOLERANCE and not self.startup_p99:
            out.append(f"p99 {self.p99_error:+.1%} (stated error {P99_TOLERANCE:.0%})")
        startup = ("; p99 not compared: it is the server's first request after start-up, "
                   "not modelled" if self.startup_p99 else "")
        if not out:
            return ("within the model's stated error" if not startup
                    else "median within the model's stated error" + startup)
        machine = (f"; the machine's other load differed: others used "
                   f"{self.baseline_load:.0%} of its CPU under the baselines, "
                   f"{self.cached_load:.0%} under this bench, so the difference may be the "
                   f"machine's, not the server's" if self.load_differs else "")
        return "prediction and measurement disagree: " + "; ".join(out) + startup + machine


def startup_sets_p99(requests: int, *, first_after_start: bool) -> bool:
    """Whether a bench's p99 TTFT is set by the server's first request after start-up:
    the bench's first request is the server's first (``first_after_start``: no ready
    check or warmup before it, nothing served since the server started) and the p99 of
    ``requests`` TTFTs interpolates between the two slowest (fewer than 101 requests,
    :func:`percentile`). That request's time outside the engine is the API server's
    start-up, not the step time the model is fitted to: on the recorded runs
    (docs/performance.md, "TTFT predicted") about 250 ms of it lies outside the server's
    own TTFT."""
    return first_after_start and (requests - 1) * 0.99 > requests - 2


def compare(prediction: TtftPrediction, measured_median_ms: float,
            measured_p99_ms: float, *, startup_p99: bool = False,
            loads: tuple[float | None, float | None] = (None, None),
            load_max_diff: float = 0.15) -> TtftComparison:
    """``loads``: others' share of the CPU under the baselines and under the bench
    (:attr:`TtftComparison.baseline_load`)."""
    return TtftComparison(prediction.median_s * 1e3, measured_median_ms,
                          prediction.p99_s * 1e3, measured_p99_ms, startup_p99,
                          loads[0], loads[1], load_max_diff)
