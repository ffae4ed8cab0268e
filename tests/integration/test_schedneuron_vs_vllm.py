"""The Neuron scheduler model against vLLM's own ``Scheduler`` running the bundle's
reading of the Neuron plugin's scheduler, request by request.

``src/prefixbench_sim/neuron_scheduler.py`` (``NeuronScheduler`` /
``NeuronAsyncScheduler``, written from aws-neuron-sdk v2.31.1
``vllm-neuron/docs/design/vllm/neuron-scheduler.md``) is given to vLLM 0.32 by dotted
name from its file, as ``--scheduler-cls`` does, and vLLM builds it with its real
``KVCacheManager`` over one full-attention group, as its engine core does
(``helpers/drive_scheduler.py``, in the venv of :mod:`vllm_venv`). Seeded
prefix-sharing workloads (those of :mod:`test_schedsim_vs_vllm`) are sent by a client
keeping 1 to 32 requests in flight, synchronously and under ``AsyncScheduler``, with a
cache that evicts and one that never does, with the KV-concurrency cap binding (a few
requests at ``max_model_len`` fill the cache) and not; some by a timed client. Every
request's hit at its first admission and the step of that admission (so the admission
order) must agree with :mod:`prefixbench.engines.schedneuron`, and so must the steps,
the prefill steps, the padding, preemptions and the counters' totals. One hand case
deadlocks in vLLM as the design warns, and the model says so. Needs the wheelhouse
the integration tier builds; no fleet is used.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from test_schedsim_vs_vllm import Case, mismatches
from vllm_venv import vllm_python

from prefixbench.engines.cachesim import CapacityError
from prefixbench.engines.kvcapacity import usable_blocks
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedneuron import (
    NeuronAsyncSchedulerSim,
    NeuronSchedulerSim,
    max_kv_concurrent,
    prefill_buckets,
)
from prefixbench.engines.schedsim import SchedReplayResult
from prefixbench.engines.schedsim import SchedulerSim as VllmSchedulerModel

pytestmark = pytest.mark.integration

__all__ = ["vllm_python"]  # the fixture, imported for pytest

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "helpers" / "drive_scheduler.py"
REFERENCE = HERE.parents[1] / "src" / "prefixbench_sim" / "neuron_scheduler.py"


@dataclass(frozen=True)
class NeuronCase(Case):
    """A case of :mod:`test_schedsim_vs_vllm` served as on Neuron, with the model length
    the KV-concurrency cap is computed with."""

    max_model_len: int = 68
    #: Whether the cap is expected to hold admission back (checked, not assumed).
    cap_binds: bool = False

    def cap(self) -> int | None:
        return max_kv_concurrent(self.gpu_blocks(self.items()), self.max_model_len,
                                 self.block_size, self.max_num_seqs)


def _cases() -> list[NeuronCase]:
    # Blocks of 4, prompts + output within 16 blocks, max_model_len 68 (17 blocks).
    base = {"block_size": 4, "max_prompt_blocks": 16, "max_output_len": 24}
    cases: list[NeuronCase] = []
    for asynchronous in (False, True):
        pre = "async-" if asynchronous else ""
        for conc, seqs, budget in ((1, 4, 32), (2, 4, 32), (4, 4, 48), (8, 4, 32),
                                   (32, 16, 64)):
            seed = 2000 + 100 * asynchronous + conc
            common = {**base, "concurrency": conc, "max_num_seqs": seqs,
                      "max_num_batched_tokens": budget, "asynchronous": asynchronous}
            # 40 blocks: room for 2 requests at max_model_len: the cap binds, evicts.
            cases.append(NeuronCase(f"{pre}c{conc}-evicts-capped", seed=seed, requests=200,
                                    num_gpu_blocks=40, cap_binds=conc > 2, **common))
            # 17 x (max_num_seqs + 1) blocks: the cap is above max_num_seqs, evicts.
            cases.append(NeuronCase(f"{pre}c{conc}-evicts", seed=seed + 10, requests=200,
                                    num_gpu_blocks=17 * (seqs + 1), **common))
            # Never evicts, no cap to speak of.
            cases.append(NeuronCase(f"{pre}c{conc}-never-evicts", seed=seed + 20,
                                    requests=200, num_gpu_blocks=None, **common))
            # Never evicts, but max_model_len 2048 (512 blocks a request) caps it at 3
            # or fewer.
            cases.append(NeuronCase(f"{pre}c{conc}-never-evicts-capped", seed=seed + 30,
                                    requests=200, num_gpu_blocks=None, max_model_len=2048,
                                    cap_binds=conc > 3, **common))
        # Neuron's block size 32, prompts chunked over several steps and padded to
        # buckets of 128 and 160; a tiny vocabulary (accidental matches).
        cases.append(NeuronCase(f"{pre}c8-block32-chunked-evicts-capped", seed=2400,
                                requests=150, block_size=32, max_prompt_blocks=10,
                                max_output_len=40, concurrency=8, max_num_seqs=8,
                                max_num_batched_tokens=160, num_gpu_blocks=25,
                                max_model_len=352, cap_binds=True,
                                asynchronous=asynchronous))
        cases.append(NeuronCase(f"{pre}c4-evicts-tiny-vocab", seed=2500, requests=200,
                                block_size=2, max_prompt_blocks=16, max_output_len=8,
                                concurrency=4, max_num_seqs=4, max_num_batched_tokens=16,
                                num_gpu_blocks=40, max_model_len=34, vocab=3,
                                cap_binds=True, asynchronous=asynchronous))
    # Timed clients: requests reaching the engine late and out of order, and paced.
    for timing in ("jitter", "paced"):
        cases.append(NeuronCase(f"{timing}-c8-evicts-capped", seed=2600, requests=200,
                                concurrency=8, max_num_seqs=4, max_num_batched_tokens=32,
                                num_gpu_blocks=40, timing=timing, cap_binds=True, **base))
        cases.append(NeuronCase(f"{timing}-async-c32-evicts", seed=2632, requests=200,
                                concurrency=32, max_num_seqs=16, max_num_batched_tokens=64,
                                num_gpu_blocks=17 * 17, timing=timing, asynchronous=True,
                                **base))
    return cases


#: 5 usable blocks of 4, max_model_len 4096: the cap is computed as 0, so the plugin
#: falls back to max_num_seqs. A (8 tokens) runs; B (16 tokens) is let through, hides
#: A's decodes and does not fit: nothing runs again.
DEADLOCK = NeuronCase("hand-deadlock", seed=0, requests=2, block_size=4,
                      max_prompt_blocks=5, concurrency=2, max_num_seqs=4,
                      max_num_batched_tokens=64, num_gpu_blocks=6, max_model_len=4096,
                      given=((tuple(range(1, 9)), 4), (tuple(range(20, 36)), 4)))
CASES = [*_cases(), DEADLOCK, replace(DEADLOCK, name="async-hand-deadlock",
                                      asynchronous=True)]


@pytest.fixture(scope="module")
def vllm_served(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, dict[str, Any]]:
    """Every case served by vLLM's Scheduler running the reference, in one process."""
    cases: list[dict[str, Any]] = []
    for case in CASES:
        items = case.items()
        release, lag = case.timed() or (None, None)
        cases.append({"release": release, "lag": lag, "neuron": str(REFERENCE),
                      "max_model_len": case.max_model_len,
                      "block_size": case.block_size, "num_blocks": case.gpu_blocks(items),
                      "async": case.asynchronous, "max_num_seqs": case.max_num_seqs,
                      "max_num_batched_tokens": case.max_num_batched_tokens,
                      "concurrency": case.concurrency,
                      "requests": [{"tokens": list(p), "output_len": out}
                                   for p, out in items]})
    path = tmp_path_factory.mktemp("neuron") / "cases.json"
    path.write_text(json.dumps(cases))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONHASHSEED": "0",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(vllm_python), str(DRIVER), str(path)], capture_output=True,
                          text=True, timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["vllm"].startswith("0.32"), out["vllm"]
    return {case.name: got for case, got in zip(CASES, out["cases"], strict=True)}


def model(case: NeuronCase, *, cap: bool = True) -> NeuronSchedulerSim:
    """The case's server as the Neuron model (without the KV-concurrency cap if not
    ``cap``)."""
    kind = NeuronAsyncSchedulerSim if case.asynchronous else NeuronSchedulerSim
    return kind(case.block_size, usable_blocks(case.gpu_blocks(case.items())),
                max_num_seqs=case.max_num_seqs,
                max_num_batched_tokens=case.max_num_batched_tokens,
                kv_concurrency=case.cap() if cap else None,
                buckets=prefill_buckets(case.max_num_batched_tokens, case.max_model_len))


def replay(sim: VllmSchedulerModel, case: NeuronCase) -> SchedReplayResult:
    items = case.items()
    release, lag = case.timed() or (None, None)
    return sim.replay([p for p, _ in items], [out for _, out in items],
                      concurrency=case.concurrency, release=release, lag=lag)


def admissions(sim: NeuronSchedulerSim, got: SchedReplayResult) -> list[int]:
    """The step of each prompt's first admission."""
    return [sim.admitted_at[i] for i in got.sent]


@pytest.mark.parametrize("case", CASES[:-2], ids=[c.name for c in CASES[:-2]])
def test_every_request_is_admitted_when_and_hits_what_vllm_says(
        case: NeuronCase, vllm_served: dict[str, dict[str, Any]]) -> None:
    want = vllm_served[case.name]
    sim = model(case)
    got = replay(sim, case)
    assert len(got.hit_tokens) == len(want["hit_tokens"]) == case.requests
    bad = mismatches(want["hit_tokens"], got.hit_tokens)
    assert not bad, (f"{len(bad)} of {case.requests} requests differ from vLLM's "
                     f"(request, vLLM, model): {bad[:10]}")
    late = mismatches(want["admitted_at"], admissions(sim, got))
    assert not late, f"admitted at other steps (request, vLLM, model): {late[:10]}"
    assert not mismatches(want["preemptions"], got.preemptions)
    assert (want["hits"], want["queries"]) == (got.total_hit_tokens, got.query_tokens)
    assert (want["preempted_hits"], want["preempted_queries"]) == (
        got.preempted_hit_tokens, got.preempted_query_tokens)
    assert want["steps"] == got.steps
    assert want["prefill_steps"] == sim.prefill_steps
    assert want["padding_tokens"] == sim.padded_tokens - sim.prefill_tokens
    assert want["hits"] > 0
    if case.num_gpu_blocks is None:
        assert got.evicted_blocks == 0
    else:
        assert got.evicted_blocks > case.requests // 10, "the small cache should evict"


def test_the_cap_binds_where_the_cases_say(vllm_served: dict[str, dict[str, Any]]) -> None:
    """Without the KV-concurrency cap the model admits at other steps exactly in the
    cases said to bind it (so both kinds are checked above); one admission at a time
    and a hidden decode make every case above concurrency 1 take more steps than
    vLLM's own scheduler."""
    for case in CASES[:-2]:
        uncapped = model(case, cap=False)
        try:
            free = replay(uncapped, case)
        except CapacityError:  # without the cap the design may deadlock
            assert case.cap_binds, case.name
            continue
        differs = admissions(uncapped, free) != vllm_served[case.name]["admitted_at"]
        assert differs == case.cap_binds, case.name
        if case.concurrency > 1:
            kind = AsyncSchedulerSim if case.asynchronous else VllmSchedulerModel
            plain = replay(kind(case.block_size,
                                usable_blocks(case.gpu_blocks(case.items())),
                                max_num_seqs=case.max_num_seqs,
                                max_num_batched_tokens=case.max_num_batched_tokens), case)
            assert plain.steps < vllm_served[case.name]["steps"], case.name


@pytest.mark.parametrize("case", CASES[-2:], ids=[c.name for c in CASES[-2:]])
def test_a_cap_that_does_not_protect_deadlocks_in_both(
        case: NeuronCase, vllm_served: dict[str, dict[str, Any]]) -> None:
    assert case.cap() == case.max_num_seqs  # 6 // 1024 = 0: the plugin's fallback
    sim = model(case)
    with pytest.raises(CapacityError, match="deadlocks"):
        replay(sim, case)
    # At the same step: synchronously the second (B let through, nothing fits), one
    # later asynchronously (A's first output still in flight).
    assert vllm_served[case.name] == {"deadlock": sim.steps}
    assert sim.steps == (3 if case.asynchronous else 2)
