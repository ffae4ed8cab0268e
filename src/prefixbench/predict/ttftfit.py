"""The step-time model fitted to one host's own measurements
(:class:`prefixbench.engines.steptime.StepCost` from a bench result of that host).

What a fit uses, from a bench at concurrency 1 on a server without prefix caching (the
baseline): each request's TTFT and its prompt length (``--save-detailed``: ``ttfts``,
``input_lens``; without them, the run's median TTFT and its mean prompt length), and the
median inter-token latency (one decode step over the prompt's context). A request alone
on the server runs ``ceil(P / chunk)`` prefill chunks, so its TTFT is

    request_s + chunks * step_s + token_s * tokens + pair_s * pairs

and an inter-token latency ``step_s + token_s * 1 + pair_s * (context + 1)``.

**When the terms cannot be separated.** Requests of one prompt length (the tutorial's
workloads: every prompt 4096 tokens) give one TTFT equation and one ITL equation for four
coefficients. The fit then keeps two (``step_s`` and the platform's dominant prefill
term) and sets the other two to zero, and says so (:attr:`TimeFit.separable` False, its
``assumption``): on cpu attention pairs carry the prefill (the shape the recorded runs
show, :mod:`prefixbench.engines.steptime`), on Neuron padded tokens do (a large model's
matmuls; an assumption, never measured on Trainium). Prompts of three or more lengths (a
calibration bench: docs/own-traffic.md, "Calibrating the TTFT model") fit all four by
least squares, with R^2 printed.

**How the observations weigh.** The report predicts medians, so a tutorial bench enters
as its median TTFT per prompt length (weight: its requests), not as requests whose mean a
few slow ones drag (a first request after start-up, a neighbour's burst); the calibration
bench, whose lengths are all different, enters request by request. Each residual counts
relative to its own measured value (weight / seconds^2): an inter-token latency of a few
milliseconds then pulls as hard as a TTFT of a hundred, where absolute residuals left
the decode step to the TTFTs' scatter (a fit on the simulated fleet reproduced its own
median ITL only to +107%). With the tutorial benches' requests many times the
calibration's, the fit reproduces the host's own medians and the calibration decides
how the rest splits between the terms.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prefixbench.engines.steptime import StepCost, chunk_work, decode_work
from prefixbench.measure.bench_json import BenchResult

__all__ = ["Observation", "TimeFit", "fit_cost", "observations"]

#: Coefficient names, in the order of the fit's columns; scaled so the columns are of
#: comparable size (ms, ms, us, ns).
_NAMES = ("request_s", "step_s", "token_s", "pair_s")
_SCALE = (1e-3, 1e-3, 1e-6, 1e-9)
#: The coefficients kept when one prompt length cannot separate them, per platform.
_KEPT = {"cpu": ("step_s", "pair_s"), "neuron": ("step_s", "token_s")}


@dataclass(frozen=True)
class Observation:
    """One measured latency: a TTFT of a prompt of ``prompt_len`` tokens with ``hit``
    of them cached (``kind`` "ttft"), or an inter-token latency over ``prompt_len``
    tokens of context (``kind`` "itl"); ``weight``: how many requests it stands for."""

    kind: str
    prompt_len: int
    seconds: float
    hit: int = 0
    weight: float = 1.0
    #: From the calibration bench (varied lengths): it separates the terms, but the
    #: tail carried over is measured on the other benches (:func:`fit_cost`).
    calibration: bool = False


@dataclass(frozen=True)
class TimeFit:
    """A fitted step cost and how well it reproduces what it was fitted to."""

    cost: StepCost
    separable: bool
    #: Relative error of the fitted median TTFT and median ITL against the measured ones.
    ttft_error: float
    itl_error: float
    #: R^2 of per-request TTFTs (None: fewer than three prompt lengths).
    r2: float | None
    #: The measured TTFT's own spread, std / median (the noise no model removes).
    spread: float
    lengths: tuple[int, ...]
    assumption: str = ""
    #: The measured baseline's p99 minus what the fitted model gives for it: the tail
    #: (start-up, the machine's other load) carried over to predictions.
    tail_s: float = 0.0
    source: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        c = self.cost
        terms = (f"request {c.request_s * 1e3:.2f} ms, step {c.step_s * 1e3:.3f} ms, "
                 f"token {c.token_s * 1e6:.3f} us, pair {c.pair_s * 1e9:.3f} ns")
        quality = (f"median TTFT {self.ttft_error:+.1%}, median ITL {self.itl_error:+.1%}"
                   + (f", R^2 {self.r2:.3f}" if self.r2 is not None else ""))
        shown = (", ".join(map(str, self.lengths)) if len(self.lengths) <= 4 else
                 f"{self.lengths[0]}-{self.lengths[-1]} ({len(self.lengths)} lengths)")
        how = (f"fitted on prompts of {shown} tokens" if self.separable else
               f"prompts of {shown} tokens only: terms not separable, {self.assumption}")
        benches = self.source.get("benches") or []
        used = f"; from benches {', '.join(map(str, benches))}" if benches else ""
        return f"{terms}; fit: {quality}; {how}{used}; measured spread {self.spread:.1%}"

    def as_dict(self) -> dict[str, Any]:
        return {"cost": self.cost.as_dict(), "separable": self.separable,
                "ttft_error": self.ttft_error, "itl_error": self.itl_error, "r2": self.r2,
                "spread": self.spread, "lengths": list(self.lengths),
                "assumption": self.assumption, "tail_ms": self.tail_s * 1e3,
                "source": self.source}


def observations(result: BenchResult, *, calibration: bool = False) -> list[Observation]:
    """The TTFT and ITL observations of one bench result at concurrency 1 without prefix
    caching (the caller knows the server; the hits are 0). ``calibration``: the result
    is the calibration bench's (:mod:`prefixbench.bench.calibration`: ``ttfts`` and
    ``input_lens`` of prompts of varied lengths)."""
    raw = result.data
    detail = result.detail
    obs: list[Observation] = []
    if detail.ttfts is not None and detail.input_lens is not None:
        by_len: dict[int, list[float]] = {}
        for ok, ttft, plen in zip(detail.succeeded, detail.ttfts, detail.input_lens,
                                  strict=True):
            if ok and ttft > 0:
                by_len.setdefault(int(plen), []).append(float(ttft))
        for plen, ttfts in sorted(by_len.items()):
            if calibration:  # every length its own: request by request
                obs += [Observation("ttft", plen, t, calibration=True) for t in ttfts]
            else:  # the median of each length, standing for its requests
                obs.append(Observation("ttft", plen, statistics.median(ttfts),
                                       weight=float(len(ttfts))))
    else:
        n = int(raw["completed"])
        obs.append(Observation("ttft", round(int(raw["total_input_tokens"]) / n),
                               float(raw["median_ttft_ms"]) / 1e3, weight=float(n),
                               calibration=calibration))
    itl = raw.get("median_itl_ms")
    if itl:
        n = int(raw["completed"])
        out = int(raw["total_output_tokens"]) / n
        context = round(int(raw["total_input_tokens"]) / n + out / 2)
        obs.append(Observation("itl", context, float(itl) / 1e3, weight=float(n),
                               calibration=calibration))
    return obs


def _row(base: StepCost, ob: Observation, chunk: int) -> list[float]:
    """The fit's columns (scaled) for one observation."""
    if ob.kind == "itl":
        t, p = decode_work(base, [ob.prompt_len])
        cols = [0.0, 1.0, float(t), p]
    else:
        prior, chunks, tokens, pairs = ob.hit, 0, 0, 0.0
        while prior < ob.prompt_len:
            new = min(chunk, ob.prompt_len - prior)
            t, p = chunk_work(base, prior, new)
            chunks, tokens, pairs, prior = chunks + 1, tokens + t, pairs + p, prior + new
        cols = [1.0, float(chunks), float(tokens), pairs]
    return [c * s for c, s in zip(cols, _SCALE, strict=True)]


def _solve(rows: list[list[float]], ys: list[float], ws: list[float], keep: list[int]
           ) -> list[float]:
    """Weighted least squares over the columns ``keep`` (normal equations, Gaussian
    elimination with partial pivoting); the other coefficients 0."""
    k = len(keep)
    a = [[0.0] * (k + 1) for _ in range(k)]
    for row, y, w in zip(rows, ys, ws, strict=True):
        sel = [row[j] for j in keep]
        for i in range(k):
            for j in range(k):
                a[i][j] += w * sel[i] * sel[j]
            a[i][k] += w * sel[i] * y
    for col in range(k):
        piv = max(range(col, k), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-300:
            raise ValueError("the observations do not determine the step time")
        a[col], a[piv] = a[piv], a[col]
        for r in range(k):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    theta = [0.0] * 4
    for i, j in enumerate(keep):
        theta[j] = a[i][k] / a[i][i]
    return theta


def _weighted_median(values: Sequence[tuple[float, float]]) -> float:
    """The median of ``(value, weight)`` pairs, each value counted ``weight`` times (the
    lower and upper middle averaged when the weights split evenly)."""
    ranked = sorted(values)
    total = sum(w for _, w in ranked)
    below = 0.0
    for i, (v, w) in enumerate(ranked):
        below += w
        if below > total / 2:
            return v
        if below == total / 2:
            return (v + ranked[i + 1][0]) / 2
    return ranked[-1][0]


def _predicted(theta: list[float], row: list[float]) -> float:
    return sum(t * x for t, x in zip(theta, row, strict=True))


def fit_cost(obs: Sequence[Observation], *, platform: str, chunk: int,
             buckets: tuple[int, ...] = (), segment: int = 0,
             decode_buckets: tuple[int, ...] = (), spread: float = 0.0,
             measured_p99_s: float | None = None, request_s: float | None = None,
             source: dict[str, Any] | None = None) -> TimeFit:
    """Fit a :class:`StepCost` to ``obs`` (TTFTs and ITLs of one host; ``chunk`` its
    ``max_num_batched_tokens``). ``spread``: the measured TTFT's std / median;
    ``measured_p99_s``: the baseline's p99 TTFT, whose excess over the fitted model is
    the tail carried over (:attr:`TimeFit.tail_s`); ``request_s``: the time outside the
    engine when it was measured apart (the client's TTFT less the server's own queue and
    prefill time), then held, not fitted. Coefficients are never negative."""
    ttfts = [o for o in obs if o.kind == "ttft"]
    itls = [o for o in obs if o.kind == "itl"]
    if not ttfts or not itls:
        raise ValueError("a step-time fit needs TTFTs and inter-token latencies of the "
                         "same host (a bench JSON with median_itl_ms)")
    base = StepCost(platform, 0.0, 0.0, 0.0, 0.0, buckets, segment, decode_buckets)
    lengths = tuple(sorted({(o.prompt_len - o.hit) for o in ttfts}))
    separable = len(lengths) >= 3
    rows = [_row(base, o, chunk) for o in obs]
    outside = 0.0 if request_s is None else max(0.0, request_s)
    ys = [o.seconds - (outside if o.kind == "ttft" else 0.0) for o in obs]
    # relative residuals: each observation's weight over its own measured value squared
    ws = [o.weight / max(o.seconds, 1e-9) ** 2 for o in obs]
    keep = list(range(4)) if separable else [_NAMES.index(n) for n in _KEPT[platform]]
    if request_s is not None:
        keep = [j for j in keep if j != 0]
    theta = _solve(rows, ys, ws, keep)
    while any(theta[j] < 0 for j in keep):  # drop a negative term, refit the rest
        keep = [j for j in keep if theta[j] >= 0 and j != min(keep, key=theta.__getitem__)]
        theta = _solve(rows, ys, ws, keep)
    if request_s is not None:
        theta[0] = outside / _SCALE[0]
    cost = replace(base, request_s=theta[0] * _SCALE[0], step_s=theta[1] * _SCALE[1],
                   token_s=theta[2] * _SCALE[2], pair_s=theta[3] * _SCALE[3])

    def err(kind: str) -> float:
        """Against the tutorial benches' own medians (the calibration's lengths vary on
        purpose); every observation when there are only calibration ones."""
        sel = [(r, o) for r, o in zip(rows, obs, strict=True) if o.kind == kind]
        sel = [(r, o) for r, o in sel if not o.calibration] or sel
        fitted = _weighted_median([(_predicted(theta, r), o.weight) for r, o in sel])
        measured = _weighted_median([(o.seconds, o.weight) for _, o in sel])
        return fitted / measured - 1.0

    r2 = None
    if separable:
        sel = [(r, o) for r, o in zip(rows, obs, strict=True) if o.kind == "ttft"]
        mean = statistics.fmean(o.seconds for _, o in sel)
        ss_tot = sum((o.seconds - mean) ** 2 for _, o in sel)
        ss_res = sum((o.seconds - _predicted(theta, r)) ** 2 for r, o in sel)
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    kept = ", ".join(_NAMES[j] for j in keep)
    carrier = "attention pairs" if platform == "cpu" else "padded tokens"
    assumption = "" if separable else (
        f"fitted {kept} only, the rest 0 ({carrier} carry the prefill); a calibration "
        f"bench of varied lengths separates them")
    if request_s is not None:
        assumption = (f"request_s measured apart (client TTFT less the server's queue and "
                      f"prefill time){'; ' if assumption else ''}{assumption}")
    # The tail is over the benches the p99 was measured on: the calibration's longer
    # prompts would hide it.
    tail_obs = [o for o in ttfts if not o.calibration] or ttfts
    fitted_ttft = max(_predicted(theta, _row(base, o, chunk)) for o in tail_obs)
    tail = 0.0 if measured_p99_s is None else max(0.0, measured_p99_s - fitted_ttft)
    return TimeFit(cost, separable, err("ttft"), err("itl"), r2,
                   spread if math.isfinite(spread) else 0.0, lengths, assumption, tail,
                   dict(source or {}))
