"""The vLLM Neuron plugin's scheduler, written from AWS's design document, as a vLLM 0.32
``Scheduler`` subclass: :class:`NeuronScheduler` and :class:`NeuronAsyncScheduler`.

The bundle's executable reference of the design that
``prefixbench.engines.schedneuron`` models (the oracle test drives vLLM's real
``Scheduler`` and ``KVCacheManager`` through it), and what a CPU server runs to schedule
as a Neuron one does::

    PYTHONPATH=<dir of this file> vllm serve ... --scheduler-cls neuron_scheduler.NeuronScheduler
    (or neuron_scheduler.NeuronAsyncScheduler with async scheduling on)

It imports vLLM only (no prefixbench), so it works from a single file on a host's venv.
Source, every rule: aws-neuron/aws-neuron-sdk tag v2.31.1,
``vllm-neuron/docs/design/vllm/neuron-scheduler.md`` (same behaviour at v2.32.0); the
section of each rule is named where it is applied. What this reading adds where the
document says nothing or does not fit vLLM 0.32:

* vLLM 0.32's waiting queue is a ``RequestQueue``: the document's ``popleft`` /
  ``append`` are its ``pop_request`` / ``add_request``; ``max_num_seqs`` is
  ``scheduler_config.max_num_seqs``.
* ``SchedulerOutput`` has no ``num_scheduled_tokens_padded`` field in vLLM 0.32: it is
  set as an attribute (nothing downstream on CPU reads it).
* Default buckets: powers of two from 128 while below ``min(max_num_batched_tokens,
  max_model_len)``, then that size itself (the document's generator stops at the last
  power of two; its constraint says the largest bucket is the effective maximum).
* Requests waiting on a KV connector (``kv_holding_waiting``) are not held back (the
  plugin's scheduler predates that queue; no connector is used here).
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

__all__ = ["NeuronAsyncScheduler", "NeuronScheduler", "default_buckets"]

#: "Current Limitation: Only 1 Prefill Per Batch": hardcoded in NeuronScheduler.
MAX_PREFILLS_PER_BATCH = 1


class SchedulerState(enum.Enum):
    """"Scheduler State Machine"."""

    IDLE = "idle"
    ACTIVE_PREFILL = "active_prefill"
    ACTIVE_DECODE = "active_decode"


def default_buckets(max_num_batched_tokens: int, max_model_len: int) -> list[int]:
    """"Bucket Configuration", default buckets (see the module docstring)."""
    top = min(max_num_batched_tokens, max_model_len)
    out: list[int] = []
    size = 128
    while size < top:
        out.append(size)
        size *= 2
    return [*out, top]


class NeuronScheduler(Scheduler):
    """vLLM's ``Scheduler`` behind a holdback queue ("Holdback Queue Pattern")."""

    running: list[Request]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holdback_queue: deque[Request] = deque()
        self.max_prefills_per_batch = MAX_PREFILLS_PER_BATCH
        self.max_num_seqs: int = self.scheduler_config.max_num_seqs
        # "Deadlock Prevention: KV Cache Admission Control", Solution.
        kv_cache_config = self.kv_cache_config
        if kv_cache_config.kv_cache_groups:
            max_concurrent = int(get_max_concurrency_for_kv_cache_config(
                self.vllm_config, kv_cache_config))
        else:
            max_concurrent = kv_cache_config.num_blocks * self.block_size // self.max_model_len
        self._max_kv_concurrent = max_concurrent if max_concurrent > 0 else self.max_num_seqs
        # "Bucket Configuration": custom buckets from neuron_config, else the default.
        neuron_config = (self.vllm_config.additional_config or {}).get("neuron_config", {})
        top = min(self.scheduler_config.max_num_batched_tokens, self.max_model_len)
        buckets = neuron_config.get("num_batched_tokens_buckets")
        if buckets is None:
            buckets = default_buckets(self.scheduler_config.max_num_batched_tokens,
                                      self.max_model_len)
        elif list(buckets) != sorted(set(buckets)) or buckets[-1] != top:
            raise ValueError(f"num_batched_tokens_buckets {buckets} must be ascending and "
                             f"end at min(max_num_batched_tokens, max_model_len) = {top}")
        self.num_batched_tokens_buckets: list[int] = list(buckets)
        self.total_padding_tokens = 0
        self.prefill_steps = 0
        self._state = SchedulerState.IDLE

    # -- "Admission Control" -------------------------------------------------------------
    @property
    def at_capacity(self) -> bool:
        """True if running requests >= max_num_seqs."""
        return len(self.running) >= self.max_num_seqs

    @property
    def has_prefill_in_running(self) -> bool:
        """True if any request in the running queue is in prefill phase."""
        return any(self._is_prefill_request(req) for req in self.running)

    def _is_prefill_request(self, request: Request) -> bool:
        """"Request Classification"."""
        return request.num_computed_tokens < request.num_prompt_tokens

    def can_schedule(self, request: Request) -> bool:
        """"Admission Control Flow": the four checks, in the document's order."""
        if self.at_capacity:
            return False
        if self.has_prefill_in_running:
            return False
        if len(self.waiting) >= self.max_prefills_per_batch:
            return False
        return len(self.running) < self._max_kv_concurrent

    # -- "Holdback Queue Pattern" --------------------------------------------------------
    def _call_base_schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        return Scheduler.schedule(self, throttle_prefills)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        # Step 1: move waiting -> holdback (clear the parent's view).
        while self.waiting:
            self.holdback_queue.append(self.waiting.pop_request())
        # Step 2: selectively restore via can_schedule(), FIFO.
        while self.holdback_queue:
            if self.can_schedule(self.holdback_queue[0]):
                self.waiting.add_request(self.holdback_queue.popleft())
            else:
                break
        # Step 3: prefill/decode separation ("Prefill/Decode Separation").
        running = self.running
        running_holdback: list[Request] = []
        if self.has_prefill_in_running:
            running_holdback = [r for r in running if not self._is_prefill_request(r)]
            self.running = [r for r in running if self._is_prefill_request(r)]
        elif len(self.waiting) > 0:
            running_holdback = running
            self.running = []
        # Step 4: the parent scheduler.
        try:
            scheduler_output = self._call_base_schedule(throttle_prefills)
        finally:
            # Step 5: restore everything.
            self.running = self.running + running_holdback
            while self.holdback_queue:
                self.waiting.add_request(self.holdback_queue.popleft())
        # Steps 6-7: padding and the mixed-batch check; step 8: the state.
        scheduler_output = self._apply_padding_and_log_stats(scheduler_output)
        self._update_state(scheduler_output)
        return scheduler_output

    # -- "Padding Algorithm" ---------------------------------------------------------------
    def _calculate_padded_count(self, token_count: int) -> int:
        """The smallest bucket >= token_count."""
        if token_count == 0:
            return 0
        for size in self.num_batched_tokens_buckets:
            if size >= token_count:
                return size
        raise RuntimeError(f"Request exceeds largest bucket: a prefill chunk of "
                           f"{token_count} tokens, buckets {self.num_batched_tokens_buckets}")

    @staticmethod
    def _computed_before(scheduler_output: SchedulerOutput) -> dict[str, int]:
        """num_computed_tokens of each scheduled request before this step (the output's
        own values: the requests' are already advanced by _update_after_schedule)."""
        out = {new.req_id: new.num_computed_tokens
               for new in scheduler_output.scheduled_new_reqs}
        cached = scheduler_output.scheduled_cached_reqs
        if cached is not None:
            out.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        return out

    def _apply_padding_and_log_stats(self, scheduler_output: SchedulerOutput
                                     ) -> SchedulerOutput:
        padded: dict[str, int] = {}
        computed = self._computed_before(scheduler_output)
        prefill_count = decode_count = 0
        for req_id, num_tokens in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(req_id)
            if request is None:
                continue
            num_computed = computed.get(req_id, request.num_computed_tokens)
            if num_computed < request.num_prompt_tokens:
                padded[req_id] = self._calculate_padded_count(num_tokens)
                self.total_padding_tokens += padded[req_id] - num_tokens
                prefill_count += 1
            else:
                padded[req_id] = num_tokens
                decode_count += 1
        if prefill_count > 0 and decode_count > 0:
            raise RuntimeError(
                f"Neuron constraint violated: Mixed prefill ({prefill_count}) "
                f"and decode ({decode_count}) in the same batch.")
        if prefill_count:
            self.prefill_steps += 1
        scheduler_output.num_scheduled_tokens_padded = padded  # type: ignore[attr-defined]
        return scheduler_output

    # -- "State Determination" ---------------------------------------------------------------
    def _update_state(self, scheduler_output: SchedulerOutput) -> None:
        if len(self.waiting) == 0 and len(self.running) == 0:
            self._state = SchedulerState.IDLE
        elif scheduler_output.num_scheduled_tokens:
            computed = self._computed_before(scheduler_output)
            has_prefill = any(
                (request := self.requests.get(req_id)) is not None
                and num < request.num_prompt_tokens for req_id, num in computed.items())
            self._state = (SchedulerState.ACTIVE_PREFILL if has_prefill
                           else SchedulerState.ACTIVE_DECODE)


class NeuronAsyncScheduler(NeuronScheduler, AsyncScheduler):
    """``NeuronScheduler`` over vLLM's ``AsyncScheduler`` ("Overview": multiple
    inheritance, ``_call_base_schedule`` overridden to ``AsyncScheduler.schedule``)."""

    def _call_base_schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        return AsyncScheduler.schedule(self, throttle_prefills)
