"""The scheduler the vLLM Neuron plugin runs: :class:`NeuronSchedulerSim` (and
:class:`NeuronAsyncSchedulerSim`), over the full-attention cache model.

On a Neuron host the plugin replaces vLLM's scheduler with ``NeuronScheduler`` (or
``NeuronAsyncScheduler``, the async-scheduling default), a holdback queue in front of
vLLM's own ``Scheduler.schedule()``, and builds a ``FullAttentionSpec`` for every layer
(one full-attention KV cache group, block size 32 by default). The rules, each from
aws-neuron/aws-neuron-sdk at tag v2.31.1, ``vllm-neuron/docs/design/vllm/`` (unchanged in
behaviour at v2.32.0):

* **Holdback, one admission at a time** (``neuron-scheduler.md``, "Holdback Queue
  Pattern", steps 1-2, and "Admission Control"): every waiting request is held back,
  then the head alone is let through if ``can_schedule`` allows it: fewer than
  ``max_num_seqs`` running (``at_capacity``), no running request still in prefill
  (``has_prefill_in_running``: ``num_computed_tokens < num_prompt_tokens``), and
  ``max_prefills_per_batch`` = 1 ("Current Limitation: Only 1 Prefill Per Batch").
* **The KV-concurrency cap** ("Deadlock Prevention: KV Cache Admission Control"): also
  refused while ``len(running) >= max_kv_concurrent``, the number of requests that fit
  the KV cache at ``max_model_len`` each (vLLM's
  ``get_max_concurrency_for_kv_cache_config``: ``num_gpu_blocks`` over
  ``cdiv(max_model_len, block_size)`` for one full-attention group, the null block
  included; ``max_num_seqs`` when that is 0), because "Preemption is not supported on
  Neuron": :func:`max_kv_concurrent`.
* **Prefill and decode never share a step** ("Prefill/Decode Separation", step 3): with a
  request in chunked prefill, only the prefilling request(s) are shown to vLLM's
  scheduler; with a request let through, every running request is hidden (a waiting
  prefill hides every running decode); otherwise the running decodes are scheduled.
  Hidden requests are put back *after* the ones vLLM scheduled (step 5: ``running =
  running + running_holdback``), so the newest admission runs first in later steps.
* **Chunks** ("Scheduler Configuration", ``max_num_batched_tokens``; ``prefix-caching.md``,
  "Prefill Segmentation"): vLLM's own chunking at ``max_num_batched_tokens``; a chunk is
  padded to the smallest ``num_batched_tokens_buckets`` size that holds it ("Padding
  Algorithm"; default powers of two from 128 to ``min(max_num_batched_tokens,
  max_model_len)``, "Bucket Configuration"). Padding is kept apart from the scheduled
  tokens ("Padding Storage and Usage": ``num_scheduled_tokens`` stays the actual count),
  so it costs time, not hits: it is counted (:attr:`NeuronSchedulerSim.padded_tokens`),
  never cached.
* **Everything else is vLLM's** ``Scheduler`` / ``AsyncScheduler`` over one
  full-attention group (``vllm-integration-kv-cache.md``, "Layer-specific cache
  specification": ``get_kv_cache_spec`` builds ``FullAttentionSpec`` for every layer):
  the hit at admission, the full-sequence admission gate, caching at scheduling, the
  free queue, async placeholders: :mod:`prefixbench.engines.schedsim` and
  :mod:`prefixbench.engines.schedasync`, reused as they are.

Checked request by request against vLLM 0.32's own ``Scheduler`` / ``AsyncScheduler``
running the bundle's executable reading of the same design
(``src/prefixbench_sim/neuron_scheduler.py``, in ``tests/integration/
test_schedneuron_vs_vllm.py``): hits at first admission, admission order, steps and
padding.

Simplifications, stated so a reader can judge: those of
:mod:`prefixbench.engines.schedsim` (FCFS, no speculative decoding, LoRA, multimodal
inputs or KV connectors, ``ignore_eos``, ``max_model_len`` not enforced); the state
machine of "Scheduling Decision Flow" only reports, so it is not modelled; decode batch
padding (``num_seqs_buckets``) is the model runner's and changes nothing scheduled.
Where the cap does not protect (requests longer than the ``max_model_len`` it was
computed with), the design can deadlock: a step that schedules nothing with no batch in
flight raises :class:`~prefixbench.engines.cachesim.CapacityError`, as does a prefill
that cannot get its next chunk's blocks (the plugin would preempt it and then wait
forever). Preemption among decodes is vLLM's (the cap makes it rare, not impossible: the
null block is counted in the cap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NoReturn

from prefixbench.engines.cachesim import CapacityError
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedconfig import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
)
from prefixbench.engines.schedsim import SchedulerSim, _Request

__all__ = [
    "NEURON_BLOCK_SIZE",
    "NeuronAsyncSchedulerSim",
    "NeuronSchedulerSim",
    "max_kv_concurrent",
    "neuron_scheduler_sim",
    "prefill_buckets",
    "resolve_prefill_buckets",
]

#: The plugin's default KV block size (``reference-configuration.md``, v2.31.1:
#: ``block_size`` default 32).
NEURON_BLOCK_SIZE: Final = 32
#: ``NeuronScheduler.max_prefills_per_batch``, hardcoded ("Current Limitation").
MAX_PREFILLS_PER_BATCH: Final = 1
#: The smallest default prefill bucket ("Bucket Configuration").
_FIRST_BUCKET: Final = 128


def max_kv_concurrent(num_gpu_blocks: int | None, max_model_len: int, block_size: int,
                      max_num_seqs: int) -> int | None:
    """``NeuronScheduler._max_kv_concurrent`` for one full-attention group:
    ``int(num_gpu_blocks / cdiv(max_model_len, block_size))`` (vLLM's
    ``get_max_concurrency_for_kv_cache_config``; ``num_gpu_blocks`` counts the null
    block), ``max_num_seqs`` when that is 0; ``None`` (no cap) for an unbounded cache."""
    if max_model_len < 1 or block_size < 1 or max_num_seqs < 1:
        raise ValueError(f"max_model_len ({max_model_len}), block_size ({block_size}) and "
                         f"max_num_seqs ({max_num_seqs}) must be >= 1")
    if num_gpu_blocks is None:
        return None
    per_request = -(-max_model_len // block_size)
    cap = num_gpu_blocks // per_request
    return cap if cap > 0 else max_num_seqs


def prefill_buckets(max_num_batched_tokens: int, max_model_len: int | None = None,
                    buckets: list[int] | None = None) -> list[int]:
    """The compiled prefill sizes a chunk is padded to: ``buckets`` as given (ascending,
    the last equal to ``min(max_num_batched_tokens, max_model_len)``), or the default,
    powers of two from 128 up to that size, the size itself last (the doc's
    ``get_default_num_batched_tokens_buckets`` plus its constraint that the largest
    bucket is the effective maximum)."""
    top = max_num_batched_tokens if max_model_len is None else min(max_num_batched_tokens,
                                                                   max_model_len)
    if top < 1:
        raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
    if buckets is not None:
        if not buckets or sorted(set(buckets)) != list(buckets) or buckets[-1] != top:
            raise ValueError(f"num_batched_tokens_buckets {buckets} must be ascending and end "
                             f"at min(max_num_batched_tokens, max_model_len) = {top}")
        return list(buckets)
    out = []
    size = _FIRST_BUCKET
    while size < top:
        out.append(size)
        size *= 2
    return [*out, top]


def resolve_prefill_buckets(max_num_batched_tokens: int, max_model_len: int | None,
                            neuron_config: Mapping[str, Any] | None = None) -> tuple[int, ...]:
    """The buckets a server's prefill chunks are padded to, as the plugin resolves them
    (vllm-project/vllm-neuron 0.24.0.1.1.0, ``vllm_neuron/vllm/core/scheduler.py``,
    ``NeuronScheduler.__init__``, and ``vllm_neuron/utils/bucket_utils.py``,
    ``resolve_segmented_prefill_config``; read in public forks of that tag): the
    configured ``num_batched_tokens_buckets``; else the configured
    ``kv_segment_size_buckets`` (the model runner sets the prefill buckets to them); else,
    when ``min(max_num_batched_tokens, max_model_len)`` is below ``max_model_len``,
    segmented prefill turns on by itself with that one bucket; else the default powers of
    two (:func:`prefill_buckets`)."""
    top = (max_num_batched_tokens if max_model_len is None
           else min(max_num_batched_tokens, max_model_len))
    config = neuron_config or {}
    for key in ("num_batched_tokens_buckets", "kv_segment_size_buckets"):
        given = config.get(key)
        if isinstance(given, list) and given:
            return tuple(int(v) for v in given)
    if max_model_len is not None and top < max_model_len:
        return (top,)
    return tuple(prefill_buckets(top))


def _padded(count: int, buckets: list[int]) -> int:
    for size in buckets:
        if size >= count:
            return size
    return count  # never: a chunk is at most the largest bucket


class NeuronSchedulerSim(SchedulerSim):
    """One vLLM server on Neuron (``NeuronScheduler`` + one full-attention group) and its
    client; :class:`~prefixbench.engines.schedsim.SchedulerSim`'s interface.

    ``kv_concurrency``: ``_max_kv_concurrent`` (:func:`max_kv_concurrent`; ``None``: no
    cap, as an unbounded cache has none). ``buckets``: the prefill buckets
    (:func:`prefill_buckets`, the default from ``max_num_batched_tokens`` if ``None``).
    """

    def __init__(
        self,
        block_size: int = NEURON_BLOCK_SIZE,
        capacity_blocks: int | None = None,
        *,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        kv_concurrency: int | None = None,
        buckets: list[int] | None = None,
    ) -> None:
        super().__init__(block_size, capacity_blocks, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens)
        if kv_concurrency is not None and kv_concurrency < 1:
            raise ValueError(f"kv_concurrency must be >= 1, got {kv_concurrency}")
        self.kv_concurrency = kv_concurrency
        #: Running requests above which nothing is admitted (``at_capacity`` and the
        #: KV-concurrency cap).
        self._cap = max_num_seqs if kv_concurrency is None else min(max_num_seqs,
                                                                    kv_concurrency)
        if buckets is not None and (not buckets or sorted(set(buckets)) != list(buckets)):
            raise ValueError(f"buckets must be ascending, got {buckets}")
        self.buckets = list(buckets) if buckets else prefill_buckets(max_num_batched_tokens)
        #: Steps that ran a prefill chunk, tokens they computed, and the tokens they ran
        #: padded to buckets (what the device computes; the padding caches nothing).
        self.prefill_steps = 0
        self.prefill_tokens = 0
        self.padded_tokens = 0
        #: Request index -> the step of its first admission.
        self.admitted_at: dict[int, int] = {}

    # -- the holdback queue --------------------------------------------------------------
    def _admission_possible(self) -> bool:
        # The head would be let through: no running request is still in prefill (a
        # bulk skip only covers steps in which every running request decodes).
        return bool(self._waiting) and len(self._running) < self._cap

    def _schedule(self) -> list[_Request]:
        running = self._running
        hidden: list[_Request] = []
        admit = False
        if any(r.computed < r.prompt_len for r in running):
            # Ongoing chunked prefill: no admission, the decodes wait.
            hidden = [r for r in running if r.computed >= r.prompt_len]
            self._running = [r for r in running if r.computed < r.prompt_len]
        elif self._admission_possible():
            # A new prefill: every running request is hidden.
            hidden, self._running, admit = running, [], True
        scheduled: list[_Request] = []
        budget, preempted = self._schedule_running(self.max_num_batched_tokens, scheduled)
        if admit and not preempted:
            self._admit_head(budget, scheduled)
        if hidden:
            self._running = self._running + hidden
        if not scheduled and not self._batch:
            self._deadlock()
        prefills = [r for r in scheduled if r.computed < r.prompt_len]
        if prefills:
            self.prefill_steps += 1
            for req in prefills:
                self.prefill_tokens += req.scheduled
                self.padded_tokens += _padded(req.scheduled, self.buckets)
        return scheduled

    def _admit_head(self, budget: int, scheduled: list[_Request]) -> None:
        """vLLM's waiting loop over the one request let through (the hidden decodes
        leave the whole budget to it)."""
        req = self._waiting[0]
        hit_tokens = self._admit(req, budget)
        if hit_tokens is None:
            return  # the full-sequence gate refused it: nothing runs this step
        if req.preemptions:
            self.preempted_hit_tokens += hit_tokens
            self.preempted_query_tokens += req.num_tokens
        else:
            req.hit = hit_tokens
            self.admitted_at[req.index] = self.steps
            self.hit_tokens_total += hit_tokens
            self.query_tokens_total += req.num_tokens
        self._waiting.popleft()
        self._running.append(req)
        scheduled.append(req)

    def _deadlock(self) -> NoReturn:
        head = self._waiting[0] if self._waiting else None
        what = (f"request {head.index} ({head.num_tokens} tokens) was let through but its "
                f"blocks do not fit" if head is not None else "nothing can be scheduled")
        raise CapacityError(
            f"the Neuron scheduler deadlocks: {what}, and it hides every running decode "
            f"(neuron-scheduler.md, 'Deadlock Prevention'); the KV-concurrency cap "
            f"({self.kv_concurrency}) does not protect this cache ({self.capacity} blocks "
            f"of {self.block_size} tokens): requests are longer than the max_model_len it "
            f"was computed with")

    def _no_room(self, req: _Request, end: int) -> NoReturn:
        raise CapacityError(
            f"a request of {req.prompt_len} prompt tokens cannot grow to {end} tokens "
            f"(capacity {self.capacity} blocks of {self.block_size} tokens): the Neuron "
            f"scheduler would preempt it and then wait forever, its decodes hidden")


class NeuronAsyncSchedulerSim(NeuronSchedulerSim, AsyncSchedulerSim):
    """``NeuronAsyncScheduler``: the holdback queue over vLLM's ``AsyncScheduler``
    (:mod:`prefixbench.engines.schedasync`), Neuron's default with on-device sampling
    (``reference-configuration.md``: async scheduling on unless
    ``--no-async-scheduling``)."""


def neuron_scheduler_sim(
    block_size: int = NEURON_BLOCK_SIZE,
    capacity_blocks: int | None = None,
    *,
    max_model_len: int | None = None,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    async_scheduling: bool = True,
    buckets: list[int] | None = None,
) -> NeuronSchedulerSim:
    """The Neuron scheduler model of a server with ``capacity_blocks`` usable blocks
    (``num_gpu_blocks - 1``; ``None``: unbounded) and ``max_model_len`` (the cap's
    per-request size; ``None``: no cap), async by default as on Neuron."""
    cap = None
    if capacity_blocks is not None and max_model_len is not None:
        cap = max_kv_concurrent(capacity_blocks + 1, max_model_len, block_size,
                                max_num_seqs)
    kind = NeuronAsyncSchedulerSim if async_scheduling else NeuronSchedulerSim
    return kind(block_size, capacity_blocks, max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens, kv_concurrency=cap,
                buckets=buckets if buckets is not None else prefill_buckets(
                    max_num_batched_tokens, max_model_len))
