"""The bench client in front of the scheduler model: when each request reaches the
engine.

``vllm bench serve`` hands its requests out in order: request ``i`` is released by the
arrival process (all at once for ``request_rate: inf``), waits for one of
``max_concurrency`` slots, and is then sent; the API server tokenizes it and passes it
to the engine core, which adds it to the scheduler's waiting queue between two steps.
:func:`send_timed` plays that client against a
:class:`prefixbench.engines.schedsim.SchedulerSim`, in steps: request ``i`` gets a slot
once one is free and no earlier than step ``release[i]``, and reaches the engine
``lag[i]`` steps later; requests due at the same step join the queue in index order.
With every release and lag 0 it is the model's own client (a finished request's
successor waits before the next step), which
:meth:`~prefixbench.engines.schedsim.SchedulerSim.replay` uses.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Protocol

from prefixbench.engines.cachesim import Tokens

__all__ = ["Engine", "send_timed"]


class Engine(Protocol):
    """What the client needs of the server model
    (:class:`prefixbench.engines.schedsim.SchedulerSim`)."""

    steps: int

    @property
    def in_flight(self) -> int: ...

    def send(self, tokens: Tokens, output_len: int = 0, *, concurrency: int = 1) -> int: ...

    def advance(self, until: int | None = None) -> None: ...

    def drain(self) -> None: ...


def send_timed(sim: Engine, prompts: Sequence[Tokens], outputs: Sequence[int], *,
               concurrency: int, release: Sequence[int], lag: Sequence[int]) -> list[int]:
    """Send ``prompts`` (``outputs[i]`` tokens each) through ``sim`` as the client above
    with ``concurrency`` slots and run until all have finished; each request's index in
    ``sim`` (:meth:`~prefixbench.engines.schedsim.SchedulerSim.hit_tokens`)."""
    n = len(prompts)
    if not len(release) == len(lag) == len(outputs) == n:
        raise ValueError(f"{n} prompts need as many outputs, releases and lags, got "
                         f"{len(outputs)}, {len(release)} and {len(lag)}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    everyone = n + concurrency + 1  # the model's own slot check never holds a send back
    due: list[tuple[int, int]] = []  # (arrival step, request): handed a slot, not sent
    index = [-1] * n
    nxt = 0
    while True:
        while nxt < n and sim.in_flight + len(due) < concurrency:
            heapq.heappush(due, (max(sim.steps, release[nxt]) + lag[nxt], nxt))
            nxt += 1
        while due and due[0][0] <= sim.steps:
            i = heapq.heappop(due)[1]
            index[i] = sim.send(prompts[i], outputs[i], concurrency=everyone)
        if sim.in_flight:
            sim.advance(due[0][0] if due else None)
        elif due:
            sim.steps = due[0][0]  # an idle engine: straight to the next arrival
        else:
            break
    sim.drain()
    return index
