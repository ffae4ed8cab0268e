"""A step-by-step model of vLLM's scheduler and prefix cache, to predict hits at
concurrency.

:class:`prefixbench.engines.cachesim.PrefixCacheSim` replays requests one at a time.
:class:`SchedulerSim` replays them the way a client with a concurrency cap sends them
to one vLLM server: the client keeps up to N requests in flight and sends the next one
when one finishes, and the server's scheduler admits, chunks, decodes and preempts them
step by step, sharing one block pool. It is the full-attention ``KVCacheManager`` of
:mod:`prefixbench.engines.cachesim` (same keys, same LRU free queue, same copies) driven
by a model of the synchronous v1 ``Scheduler``.

What is modelled, read from vLLM 0.32's ``vllm/v1/core/sched/scheduler.py``
(``schedule``, ``_preempt_request``, ``update_from_output``), ``kv_cache_manager.py``
(``get_computed_blocks``, ``allocate_slots``), ``single_type_kv_cache_manager.py``
(``FullAttentionManager``) and ``block_pool.py``, and checked request by request against
vLLM's own ``Scheduler`` (``tests/integration/test_schedsim_vs_vllm.py``):

* **A step.** The token budget is ``max_num_batched_tokens``. Running requests come
  first, in admission order: each is given the tokens it still lacks (the rest of its
  prompt, or one decode token), at most the budget left, so a long prompt is prefilled
  in chunks. Then, if nothing was preempted in the step, waiting requests are admitted
  in arrival order while budget is left and fewer than ``max_num_seqs`` run; the first
  one that does not fit stops admission for the step (FCFS, no skipping).
* **The hit** is looked up when a request is admitted (``num_computed_tokens`` from the
  prefix cache): the longest run of leading full blocks cached, at most
  ``(num_tokens - 1) // block_size`` blocks.
* **When a block becomes visible.** vLLM caches a request's full blocks inside
  ``allocate_slots``, i.e. when the step that computes them is *scheduled*, not after
  the model ran. So a request admitted later in the same step already hits the blocks
  an earlier request of that step is about to compute (only Mamba groups defer such
  same-step hits, ``cached_blocks_this_step``). With full attention a request therefore
  sees every block an earlier request was scheduled for; what it misses is what the
  budget has not yet scheduled, and what was evicted.
* **Admission** (``scheduler_reserve_full_isl``, on by default): a waiting request is
  admitted only if the free queue (never-used, freed uncached, and cached unused blocks)
  covers its whole sequence minus its hit, plus its hit blocks that sit in the free
  queue (taking them removes them from it). Its first chunk then takes its blocks: free
  uncached blocks first, then the least recently freed cached ones (evicting them).
* **Decode.** After a step that completes a request's prompt (or its recomputation) and
  after every decode step, one token is sampled; the request finishes when it has
  ``output_len`` tokens, and its blocks are freed tail first (cached ones to the back of
  the free queue, the others to the front). Finished requests are freed in the order
  they were scheduled in the step. The client then sends its next request, which is
  waiting before the next step is scheduled.
* **Preemption.** When a running request cannot get the block its next tokens need,
  the last running request is preempted (FCFS: the most recently admitted), repeatedly,
  until it fits or it preempted itself. A preempted request frees its blocks, forgets
  its computed tokens and goes to the front of the waiting queue; it keeps its generated
  tokens, so when it is admitted again it looks up prompt + output so far and may hit
  its own blocks, still cached. No new request is admitted in a step that preempted.
* **Counting.** As vLLM's ``PrefixCacheStats``: a request's first admission adds its
  prompt length to queries and its hit to hits (``vllm:prefix_cache_queries`` /
  ``vllm:prefix_cache_hits``); the lookups of preempted requests being admitted again
  are counted apart (``preempted_queries`` / ``preempted_hits``, not in those counters).
* **Generated tokens** are unique to their request (no other prompt or request has
  them), as the oracle's stand-in model runner makes them; their blocks are cached under
  keys of their own, so they take room and age, and only their own request hits them
  (after a preemption).

Concurrency 1 reduces to :meth:`PrefixCacheSim.replay`: the same hits and evictions
(``tests/unit/test_schedsim.py`` checks it on seeded workloads).

Simplifications, stated so a reader can judge: this is the synchronous ``Scheduler``,
what vLLM's CPU platform runs (it turns async scheduling off); vLLM's default elsewhere,
``AsyncScheduler``, is the subclass
:class:`prefixbench.engines.schedasync.AsyncSchedulerSim`; a finished request's
successor arrives before the next step (no client, network or tokenizer latency) unless
the client is timed (:mod:`prefixbench.engines.schedclient`, in steps, not seconds;
:mod:`prefixbench.predict.arrivals` gives the range of hits over such timings); the
FCFS policy (not ``priority``); no speculative decoding, LoRA, multimodal inputs, KV
connectors, watermark, ``long_prefill_token_threshold`` or prompt logprobs; stop
strings and EOS are not modelled (every request generates ``output_len`` tokens, as
``ignore_eos``);
``max_model_len`` is not enforced; keys are 64-bit Python hashes (vLLM: sha256). vLLM's
hybrid KV-cache manager (gpt-oss's sliding-window + full attention) is the subclass
:class:`prefixbench.engines.schedhybrid.HybridSchedulerSim`
(:func:`prefixbench.engines.schedhybrid.scheduler_sim_for` picks one).

The block pool is :class:`prefixbench.engines.schedpool.BlockPool`; the client's and
server's settings a prediction uses, :class:`prefixbench.engines.schedconfig.Serving`.

Speed: steps in which every running request only decodes and no request can be admitted
are skipped in bulk up to the next block boundary or finish; ``make bench-schedsim``
measures requests per second.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from prefixbench.engines.cachesim import (
    CapacityError,
    ReplayResult,
    Tokens,
    block_hashes,
    same_kind,
)
from prefixbench.engines.schedclient import send_timed
from prefixbench.engines.schedconfig import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS
from prefixbench.engines.schedpool import BlockPool, BlockTable

__all__ = [
    "SchedReplayResult",
    "SchedulerSim",
    "sched_replay",
]

@dataclass
class SchedReplayResult(ReplayResult):
    """Per-request hits at first admission (what vLLM's counters count), with the
    scheduler's own figures."""

    #: Times each request was preempted.
    preemptions: list[int] = field(default_factory=list)
    #: Lookups of preempted requests admitted again (not in vLLM's hit/query counters).
    preempted_hit_tokens: int = 0
    preempted_query_tokens: int = 0
    #: Scheduler steps the replay took.
    steps: int = 0
    #: Each prompt's request index in the model (its send order).
    sent: list[int] = field(default_factory=list)


class _Request(BlockTable):
    """One request in the server: its blocks and its progress."""

    __slots__ = ("computed", "fl", "hit", "index", "live", "num_tokens", "out", "out_len",
                 "ph", "preemptions", "prompt_len", "scheduled", "stale")

    def __init__(self, index: int, keys: list[int], prompt_len: int, out_len: int) -> None:
        super().__init__(keys)
        self.index = index
        self.prompt_len = prompt_len
        self.num_tokens = prompt_len
        self.out_len = out_len
        self.out = 0
        self.computed = 0
        self.scheduled = 0
        self.preemptions = 0
        self.hit = -1
        #: Asynchronous scheduling only: output placeholders (tokens sampled in a step
        #: whose output is not processed yet), tokens scheduled and not processed, of
        #: those the ones scheduled before a preemption, and whether it is running.
        self.ph = self.fl = self.stale = 0
        self.live = False


class SchedulerSim(BlockPool):
    """One vLLM server (scheduler + full-attention prefix cache) and its client.

    ``capacity_blocks``: usable KV blocks, vLLM's ``num_gpu_blocks`` minus its null
    block (:func:`prefixbench.engines.kvcapacity.usable_blocks`); ``None``: unbounded
    (nothing is evicted, nothing preempted). ``max_num_seqs`` and
    ``max_num_batched_tokens`` are the server's flags.

    Keep one instance across phases (e.g. the ready check at concurrency 1, then the
    warmups and the run at N) to carry the cache over: :meth:`send` each request with
    the client's current concurrency cap, :meth:`drain` between phases.
    """

    #: vLLM's ``max_concurrent_batches``: steps scheduled and not yet processed.
    in_flight_batches = 1
    #: Whether vLLM's ``AsyncScheduler`` is modelled
    #: (:class:`prefixbench.engines.schedasync.AsyncSchedulerSim`).
    async_scheduling = False

    def __init__(
        self,
        block_size: int,
        capacity_blocks: int | None = None,
        *,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ) -> None:
        super().__init__(block_size, capacity_blocks)
        if max_num_seqs < 1 or max_num_batched_tokens < 1:
            raise ValueError(f"max_num_seqs and max_num_batched_tokens must be >= 1, got "
                             f"{max_num_seqs} and {max_num_batched_tokens}")
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self._token_kind: str | None = None
        self._waiting: deque[_Request] = deque()
        self._running: list[_Request] = []
        #: Asynchronous scheduling: the step in flight (request, tokens, sampled).
        self._batch: list[tuple[_Request, int, bool]] = []
        self._in_flight = 0
        self._requests: list[_Request] = []
        self.steps = 0
        self.hit_tokens_total = 0
        self.query_tokens_total = 0
        self.preempted_hit_tokens = 0
        self.preempted_query_tokens = 0

    # -- the client --------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests sent and not finished."""
        return self._in_flight

    def send(self, tokens: Tokens, output_len: int = 0, *, concurrency: int = 1) -> int:
        """Send one request as a client keeping at most ``concurrency`` in flight: wait
        (run steps) until fewer are; return its index (its hit is known once admitted:
        :meth:`hit_tokens`). ``output_len``: tokens it generates (at least one is)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        while self._in_flight >= concurrency:
            self._advance(None)
        self._token_kind = same_kind(self._token_kind, tokens)
        req = self._new_request(len(self._requests), block_hashes(tokens, self.block_size),
                                len(tokens), max(output_len, 1))
        if not req.prompt_len:
            raise ValueError("a request needs at least one prompt token")
        self._requests.append(req)
        self._waiting.append(req)
        self._in_flight += 1
        return req.index

    @property
    def running(self) -> int:
        """Requests admitted and not finished or preempted."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests sent (or preempted) and not admitted."""
        return len(self._waiting)

    def step(self) -> None:
        """Run exactly one scheduler step (for tests and tracing; :meth:`send` and
        :meth:`drain` run steps as needed)."""
        self._step()

    def _new_request(self, index: int, keys: list[int], prompt_len: int, out_len: int
                     ) -> _Request:
        return _Request(index, keys, prompt_len, out_len)

    def advance(self, until: int | None = None) -> None:
        """Run one step, or several identical decode-only steps at once, never past step
        ``until`` (for a client that times its own sends:
        :func:`prefixbench.predict.arrivals.replay_timed`)."""
        self._advance(until)

    def drain(self) -> None:
        """Run until every request sent has finished."""
        while self._in_flight:
            self._advance(None)

    def hit_tokens(self, index: int) -> int:
        """Hit tokens of request ``index`` at its first admission (-1: not yet)."""
        return self._requests[index].hit

    def replay(self, prompts: Iterable[Tokens], output_len: int | Sequence[int] = 0, *,
               concurrency: int = 1, release: Sequence[int] | None = None,
               lag: Sequence[int] | None = None) -> SchedReplayResult:
        """Send ``prompts`` in order with at most ``concurrency`` in flight, run until
        all finished; per-request hits, in ``prompts``' order. ``release`` and ``lag``
        time the client (:func:`prefixbench.engines.schedclient.send_timed`; default:
        each request waiting as soon as a slot is free)."""
        steps0, evicted0 = self.steps, self.evicted_blocks
        ph0, pq0 = self.preempted_hit_tokens, self.preempted_query_tokens
        sent = list(prompts)
        n = len(sent)
        outs = [output_len] * n if isinstance(output_len, int) else list(output_len)
        zero = [0] * n
        order = send_timed(self, sent, outs, concurrency=concurrency,
                           release=zero if release is None else release,
                           lag=zero if lag is None else lag)
        done = [self._requests[i] for i in order]
        return SchedReplayResult(
            hit_tokens=[r.hit for r in done],
            query_tokens=sum(r.prompt_len for r in done),
            evicted_blocks=self.evicted_blocks - evicted0,
            prompt_lens=[r.prompt_len for r in done],
            preemptions=[r.preemptions for r in done],
            preempted_hit_tokens=self.preempted_hit_tokens - ph0,
            preempted_query_tokens=self.preempted_query_tokens - pq0,
            steps=self.steps - steps0, sent=order)

    # -- the scheduler ---------------------------------------------------------------------
    def _advance(self, until: int | None) -> None:
        """One step, or several identical decode-only steps at once (not past step
        ``until``)."""
        skip = self._decode_only_steps()
        if until is not None:
            skip = min(skip, until - self.steps)
        if skip > 1:
            self._skip(skip - 1)
        else:
            self._step()

    def _decode_only_steps(self) -> int:
        """How many steps from now on only decode, allocate nothing, finish nothing
        before the last, and admit nothing (0: this step may do more)."""
        running = self._running
        if not running or len(running) > self.max_num_batched_tokens:
            return 0
        if self._admission_possible():
            return 0
        bs = self.block_size
        steps = 1 << 62
        for req in running:
            if req.num_tokens - req.computed != 1:
                return 0
            steps = min(steps, len(req.table) * bs - req.computed, req.out_len - req.out)
        return self._window_steps(steps)

    def _admission_possible(self) -> bool:
        """Whether the next step may admit a waiting request (no bulk decode skip)."""
        return bool(self._waiting) and len(self._running) < min(
            self.max_num_seqs, self.max_num_batched_tokens)

    def _window_steps(self, steps: int) -> int:
        """``steps`` of :meth:`_decode_only_steps`, fewer if a running request would free
        a block leaving its attention window before (the hybrid manager)."""
        return steps

    def _skip(self, steps: int) -> None:
        for req in self._running:
            req.computed += steps
            req.num_tokens += steps
            req.out += steps
            self._cache(req, req.computed)
        self.steps += steps

    def _step(self) -> None:
        self.steps += 1
        scheduled = self._schedule()
        for req in scheduled:
            req.computed += req.scheduled
        finished = False
        for req in scheduled:
            if req.computed >= req.num_tokens:  # a token is sampled
                req.num_tokens += 1
                req.out += 1
                if req.out >= req.out_len:
                    self._free(req)
                    req.scheduled = -1  # finished
                    self._in_flight -= 1
                    finished = True
        if finished:
            self._running = [r for r in self._running if r.scheduled != -1]

    def _schedule(self) -> list[_Request]:
        """vLLM's ``schedule``: running, then (none preempted) waiting; those scheduled."""
        scheduled: list[_Request] = []
        budget, preempted = self._schedule_running(self.max_num_batched_tokens, scheduled)
        if not preempted:
            self._schedule_waiting(budget, scheduled)
        return scheduled

    def _schedule_running(self, budget: int, scheduled: list[_Request]) -> tuple[int, bool]:
        running = self._running
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            i += 1
            wanted = self._wanted(req)
            if wanted is None:
                continue
            n = min(wanted, budget)
            end = req.computed + n
            while not self._grow(req, end):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    if not running:
                        self._no_room(req, end)
                    return budget, preempted
            req.scheduled = n
            scheduled.append(req)
            budget -= n
        return budget, preempted

    def _wanted(self, req: _Request) -> int | None:
        """Tokens a running request asks this step; None: skip it this step."""
        return req.num_tokens - req.computed

    def _no_room(self, req: _Request, end: int) -> NoReturn:
        raise CapacityError(
            f"a request of {req.prompt_len} prompt tokens cannot grow to {end} tokens "
            f"even alone in the KV cache (capacity {self.capacity} blocks of "
            f"{self.block_size} tokens): vLLM would preempt it forever")

    def _grow(self, req: _Request, end: int) -> bool:
        """Give a running request the blocks its first ``end`` tokens need and cache
        its full ones (vLLM's ``allocate_slots``); False if too few blocks are free."""
        need = -(-end // self.block_size) - len(req.table)
        if need > self._free_total():
            return False
        if need > 0:
            req.table.extend(self._take(need))
        self._cache(req, min(end, req.num_tokens))
        return True

    def _preempt(self, req: _Request) -> None:
        self._free(req)
        req.computed = 0
        req.preemptions += 1
        self._waiting.appendleft(req)

    def _schedule_waiting(self, budget: int, scheduled: list[_Request]) -> None:
        waiting, running = self._waiting, self._running
        while budget > 0 and waiting and len(running) < self.max_num_seqs:
            req = waiting[0]
            num_tokens = req.num_tokens
            hit_tokens = self._admit(req, budget)
            if hit_tokens is None:
                if not running:
                    raise CapacityError(
                        f"a request of {num_tokens} tokens needs more KV blocks than the "
                        f"cache has ({self.capacity} blocks of {self.block_size} tokens)")
                return
            if req.preemptions:
                self.preempted_hit_tokens += hit_tokens
                self.preempted_query_tokens += num_tokens
            else:
                req.hit = hit_tokens
                self.hit_tokens_total += hit_tokens
                self.query_tokens_total += num_tokens
            waiting.popleft()
            running.append(req)
            scheduled.append(req)
            budget -= req.scheduled

    def _admit(self, req: _Request, budget: int) -> int | None:
        """Look up a waiting request's hit and, if the admission gate lets it in, hold
        the hit, allocate and cache its first chunk (at most ``budget`` tokens); its hit
        tokens, or None."""
        bs = self.block_size
        num_tokens = req.num_tokens
        blocks = self._hit(self._keys_to(req, num_tokens // bs), (num_tokens - 1) // bs)
        hit = len(blocks)
        lru = self._lru
        evictable = sum(1 for block in blocks if block in lru)
        if -(-num_tokens // bs) - hit + evictable > self._free_total():
            return None
        self._touch(blocks)
        hit_tokens = hit * bs
        n = min(num_tokens - hit_tokens, budget)
        req.table = blocks
        req.num_cached = hit
        new = -(-(hit_tokens + n) // bs) - hit
        if new > 0:
            blocks.extend(self._take(new))
        self._cache(req, hit_tokens + n)
        req.computed = hit_tokens
        req.scheduled = n
        return hit_tokens


def sched_replay(
    prompts: Iterable[Tokens],
    block_size: int,
    capacity_blocks: int | None = None,
    output_len: int | Sequence[int] = 0,
    *,
    concurrency: int = 1,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> SchedReplayResult:
    """Replay ``prompts`` through a fresh server at ``concurrency``."""
    sim = SchedulerSim(block_size, capacity_blocks, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=max_num_batched_tokens)
    return sim.replay(prompts, output_len, concurrency=concurrency)
