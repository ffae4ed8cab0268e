"""The scheduler model with vLLM's hybrid KV-cache manager (gpt-oss's sliding-window +
full-attention layers): :class:`HybridSchedulerSim`.

:class:`prefixbench.engines.schedsim.SchedulerSim` steps vLLM's scheduler over a
full-attention cache; this subclass swaps in the cache of
:class:`prefixbench.engines.hybridsim.HybridCacheSim` (one pool, two KV cache groups:
group 0 the sliding-window layers, group 1 full attention; see that module for the
rules) for many requests at once. What changes with several requests, read from vLLM
0.32's ``vllm/v1/core/kv_cache_coordinator.py`` (``HybridKVCacheCoordinator``),
``single_type_kv_cache_manager.py`` (``SlidingWindowManager``,
``get_num_blocks_to_allocate``) and ``kv_cache_interface.py``
(``SlidingWindowSpec.max_admission_blocks_per_request``):

* Blocks are shared: a hit block another request holds is held by both (a holder
  count), and only unheld cached blocks are in the free queue.
* **Admission** (``scheduler_reserve_full_isl``) counts the whole sequence in both groups,
  the sliding-window group's share capped at
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1``
  blocks (what a request holds at most while its prefill recycles blocks; the
  synchronous scheduler has one batch in flight). The first chunk is then checked
  uncapped.
* **Before every allocation** of a running request (each prefill chunk, each decode
  step) its sliding-window blocks wholly before the window of its next token are
  freed, even when the allocation then fails (and the request or another is
  preempted).
* A request's ``shared_prefix_boundary`` (where the full-attention hit ran past the
  sliding-window hit) is looked up again at each admission, so a preempted request
  retains the tail it finds then.
* A finishing or preempted request frees its sliding-window blocks, then its
  full-attention ones, each tail first.

Checked request by request against vLLM's own ``Scheduler`` with gpt-oss's two groups
(``tests/integration/test_schedsim_vs_vllm.py``); at concurrency 1 it equals
:class:`~prefixbench.engines.hybridsim.HybridCacheSim` given the same chunk size and
admission cap (``tests/unit/test_schedhybrid.py``).

Simplifications: those of :mod:`prefixbench.engines.schedsim` and
:mod:`prefixbench.engines.hybridsim` (exactly two groups of equal block size, sliding
window first; retention interval 0; no EAGLE/MTP).
"""

from __future__ import annotations

from collections.abc import Iterable

from prefixbench.engines.hybridsim import DEFAULT_SLIDING_WINDOW, admission_cap
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedconfig import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    SchedModelError,
)
from prefixbench.engines.schedpool import BlockTable
from prefixbench.engines.schedsim import SchedulerSim, _Request

__all__ = ["AsyncHybridSchedulerSim", "HybridSchedulerSim", "scheduler_sim_for"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _HybridRequest(_Request):
    """A request with a sliding-window block table too (``None``: the null block)."""

    __slots__ = ("swa_cached", "swa_ends", "swa_skipped", "swa_table")

    def __init__(self, index: int, keys: list[int], prompt_len: int, out_len: int) -> None:
        super().__init__(index, keys, prompt_len, out_len)
        self.swa_table: list[int | None] = []
        #: Blocks already considered for caching in the sliding-window group.
        self.swa_cached = 0
        #: Leading blocks replaced by the null block.
        self.swa_skipped = 0
        #: Ends (block indices) of the runs the sliding-window group caches.
        self.swa_ends: list[int] = []


class HybridSchedulerSim(SchedulerSim):
    """One vLLM server running the hybrid KV-cache manager (a sliding-window group of
    ``sliding_window`` tokens and a full-attention group sharing one pool) and its
    client; otherwise as :class:`~prefixbench.engines.schedsim.SchedulerSim`."""

    def __init__(
        self,
        block_size: int,
        capacity_blocks: int | None = None,
        *,
        sliding_window: int = DEFAULT_SLIDING_WINDOW,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_model_len: int | None = None,
    ) -> None:
        super().__init__(block_size, capacity_blocks, max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens)
        if sliding_window < 2:
            raise ValueError(f"sliding_window must be at least 2 tokens, got {sliding_window}")
        self.sliding_window = sliding_window
        #: Contiguous sliding-window blocks a hit needs.
        self.need = _cdiv(sliding_window - 1, block_size)
        #: The sliding-window group's admission cap, in blocks.
        self.admission_cap = admission_cap(
            sliding_window, max_num_batched_tokens * self.in_flight_batches, block_size,
            max_model_len)
        #: The sliding-window group's cache (the full-attention group's is the base's).
        self._swa_copies: dict[int, list[int]] = {}
        self._swa_key_of: dict[int, int] = {}

    @property
    def cached_blocks(self) -> int:
        return len(self._key_of) + len(self._swa_key_of)

    def _new_request(self, index: int, keys: list[int], prompt_len: int, out_len: int
                     ) -> _Request:
        return _HybridRequest(index, keys, prompt_len, out_len)

    # -- the pool ---------------------------------------------------------------------
    def _take(self, count: int) -> list[int]:
        fresh = min(count, self._free_new)
        self._free_new -= fresh
        evict = count - fresh
        if evict:
            self.evicted_blocks += evict
            popitem = self._lru.popitem
            for _ in range(evict):
                block = popitem(last=False)[0]
                if block in self._key_of:
                    key, copies = self._key_of.pop(block), self._copies
                else:
                    key, copies = self._swa_key_of.pop(block), self._swa_copies
                live = copies[key]
                if len(live) == 1:
                    del copies[key]
                else:
                    live.remove(block)
        first = self._next_id
        self._next_id += count
        return list(range(first, first + count))

    def _release(self, blocks: Iterable[int]) -> None:
        """Free blocks in order: cached ones whose last holder this was to the back of
        the free queue, uncached ones to the front."""
        ref, lru, fa, swa = self._ref, self._lru, self._key_of, self._swa_key_of
        for block in blocks:
            if block in fa or block in swa:
                count = ref[block] - 1
                if count:
                    ref[block] = count
                else:
                    del ref[block]
                    lru[block] = None
            else:
                self._free_new += 1

    def _free(self, req: BlockTable) -> None:
        assert isinstance(req, _HybridRequest)
        self._release([b for b in reversed(req.swa_table) if b is not None])
        self._release(reversed(req.table))
        req.swa_table = []
        req.table = []
        req.swa_cached = req.num_cached = req.swa_skipped = 0

    def _cache(self, req: BlockTable, num_tokens: int) -> None:
        super()._cache(req, num_tokens)  # full attention: every full block
        assert isinstance(req, _HybridRequest)
        full = num_tokens // self.block_size
        start = req.swa_cached
        if full <= start:
            return
        keys = self._keys_to(req, full)
        need, ends, table = self.need, req.swa_ends, req.swa_table
        copies, key_of, ref = self._swa_copies, self._swa_key_of, self._ref
        for i in range(start, full):
            block = table[i]
            if block is None or not any(end - need <= i < end for end in ends):
                continue
            key = keys[i]
            live = copies.get(key)
            if live is None:
                copies[key] = [block]
            else:
                live.append(block)
            key_of[block] = key
            ref[block] = 1
        req.swa_cached = full

    def _remove_skipped(self, req: _HybridRequest, computed: int) -> None:
        """Free the sliding-window blocks before the next token's window, last first."""
        table = req.swa_table
        skipped = min(max(0, computed - self.sliding_window + 1) // self.block_size,
                      len(table))
        freed: list[int] = []
        for i in range(skipped - 1, -1, -1):
            block = table[i]
            if block is None:
                break
            freed.append(block)
            table[i] = None
        req.swa_skipped = max(req.swa_skipped, skipped)
        self._release(freed)

    # -- the scheduler's calls ------------------------------------------------------------
    def _lookup(self, req: _HybridRequest) -> tuple[int, int]:
        """(hit blocks, full-attention hit blocks): ``find_longest_cache_hit``."""
        num_tokens = req.num_tokens
        keys = self._keys_to(req, num_tokens // self.block_size)
        max_blocks = (num_tokens - 1) // self.block_size
        fa, swa = self._copies, self._swa_copies
        fa_hit = 0
        while fa_hit < max_blocks and keys[fa_hit] in fa:
            fa_hit += 1
        run = 0
        for i in range(fa_hit - 1, -1, -1):
            if keys[i] in swa:
                run += 1
                if run >= self.need:
                    return i + self.need, fa_hit
            else:
                run = 0
        return run, fa_hit

    def _admit(self, req: _Request, budget: int) -> int | None:
        assert isinstance(req, _HybridRequest)
        bs = self.block_size
        num_tokens = req.num_tokens
        hit, fa_hit = self._lookup(req)
        hit_tokens = hit * bs
        skipped = max(0, hit_tokens - self.sliding_window + 1) // bs
        keys = req.keys
        swa_hit = [self._swa_copies[keys[i]][0] for i in range(skipped, hit)]
        fa_hit_blocks = [self._copies[keys[i]][0] for i in range(hit)]
        lru = self._lru
        evictable = sum(b in lru for b in swa_hit) + sum(b in lru for b in fa_hit_blocks)
        blocks = _cdiv(num_tokens, bs)
        reserve = (blocks - hit + max(min(blocks, self.admission_cap) - max(skipped, hit), 0)
                   + evictable)
        free = self._free_total()
        if reserve > free:
            return None
        n = min(num_tokens - hit_tokens, budget)
        blocks = _cdiv(hit_tokens + n, bs)
        if max(blocks - max(skipped, hit), 0) + blocks - hit + evictable > free:
            return None
        req.swa_ends = [(req.prompt_len - 1) // bs]  # where a resend can resume
        if fa_hit > hit:  # a shared prefix the sliding-window group lacks
            req.swa_ends.append(fa_hit)
        self._touch(swa_hit)
        self._touch(fa_hit_blocks)
        swa_table: list[int | None] = [None] * skipped
        swa_table.extend(swa_hit)
        req.swa_table, req.swa_cached, req.swa_skipped = swa_table, hit, skipped
        req.table, req.num_cached = fa_hit_blocks, hit
        if blocks > hit:
            swa_table.extend(self._take(blocks - hit))
            fa_hit_blocks.extend(self._take(blocks - hit))
        self._cache(req, min(hit_tokens + n, num_tokens))
        req.computed = hit_tokens
        req.scheduled = n
        return hit_tokens

    def _grow(self, req: _Request, end: int) -> bool:
        assert isinstance(req, _HybridRequest)
        self._remove_skipped(req, req.computed - req.fl)  # the tokens processed
        blocks = _cdiv(end, self.block_size)
        swa_new = max(blocks - len(req.swa_table), 0)
        fa_new = max(blocks - len(req.table), 0)
        if swa_new + fa_new > self._free_total():
            return False
        if swa_new:
            req.swa_table.extend(self._take(swa_new))
        if fa_new:
            req.table.extend(self._take(fa_new))
        self._cache(req, min(end, req.num_tokens))
        return True

    def _window_steps(self, steps: int) -> int:
        """Not past a step whose allocation would free a sliding-window block (frees
        change the free queue's order)."""
        if steps <= 1:
            return steps
        bs, window = self.block_size, self.sliding_window
        for req in self._running:
            assert isinstance(req, _HybridRequest)
            # The first computed count at which one more block leaves the window.
            frees_at = window - 1 + (req.swa_skipped + 1) * bs
            steps = min(steps, max(frees_at - req.computed, 0) + 1)
        return steps


class AsyncHybridSchedulerSim(AsyncSchedulerSim, HybridSchedulerSim):
    """The hybrid manager under vLLM's ``AsyncScheduler``
    (:mod:`prefixbench.engines.schedasync`)."""


def scheduler_sim_for(
    kind: str,
    block_size: int,
    capacity_blocks: int | None = None,
    *,
    sliding_window: int | None = None,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    async_scheduling: bool = False,
) -> SchedulerSim:
    """The scheduler model of a server whose KV-cache manager is ``kind``
    (``"full"`` or ``"hybrid"``, :class:`prefixbench.engines.cachemodel.CacheModel`),
    with vLLM's ``AsyncScheduler`` if ``async_scheduling``."""
    if kind == "full":
        full = AsyncSchedulerSim if async_scheduling else SchedulerSim
        return full(block_size, capacity_blocks, max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_num_batched_tokens)
    if kind == "hybrid":
        hybrid = AsyncHybridSchedulerSim if async_scheduling else HybridSchedulerSim
        return hybrid(block_size, capacity_blocks,
                      sliding_window=sliding_window or DEFAULT_SLIDING_WINDOW,
                      max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens)
    raise SchedModelError(f"unknown KV-cache manager kind {kind!r}: use 'full' or 'hybrid'")
