"""A model of vLLM's hybrid KV-cache manager: sliding-window and full-attention layers.

gpt-oss alternates sliding-window (128 tokens) and full-attention layers. With prefix
caching on, vLLM 0.32 serves such a model with its ``HybridKVCacheCoordinator``: two KV
cache groups (group 0 the sliding-window layers, as gpt-oss's layer 0 is one; group 1
the full-attention layers), one ``SlidingWindowManager`` and one
``FullAttentionManager``, drawing blocks of equal page size from **one** ``BlockPool``.
A block holds one group's pages only, so a prompt of ``b`` blocks takes up to ``2 b``
blocks of the pool. :class:`HybridCacheSim` replays prompts through a model of that
machinery; :class:`prefixbench.engines.cachesim.PrefixCacheSim` stays the model of a
full-attention-only server. :func:`cache_sim_for` picks one.

What is modelled (read from ``vllm/v1/core/{kv_cache_coordinator,
single_type_kv_cache_manager,block_pool,kv_cache_manager}.py`` of vLLM 0.32 and checked
request by request against it, ``tests/integration/test_cachesim_vs_vllm.py``):

* **Keys.** Block ``i`` has one chained hash; each group caches it under its own key
  (hash, group), so a block cached by one group is no hit for the other.
* **The hit** (``find_longest_cache_hit``, two groups with full attention first: one
  pass). Full attention takes the longest run of leading blocks it has cached, at most
  ``(prompt_len - 1) // block_size``. The sliding-window group then searches that range
  from the right for ``need = cdiv(window - 1, block_size)`` contiguous blocks it has
  cached and hits up to the end of the rightmost such run; with none it hits only a
  leading run shorter than ``need``. The request's hit is the sliding-window hit; full
  attention keeps that many of its blocks.
* **What the sliding-window group caches.** vLLM's default
  ``prefix_cache_retention_interval`` is 0: of a request's prompt blocks the group
  caches only the ``need`` blocks ending at the last block boundary at or below
  ``prompt_len - 1`` (where a resend of the prompt can resume), and, when the
  full-attention hit was longer than the sliding-window hit (a shared prefix the group
  has not cached: ``shared_prefix_boundary``), the ``need`` blocks ending there. Full
  attention caches every full block, decode blocks included.
* **What the sliding-window group frees while the request runs.** Before each
  allocation (each prefill chunk, each decode step) blocks wholly before the window of
  the next token (``computed - window + 1`` tokens) are freed and replaced by the null
  block, last first. At admission the hit's blocks before the window are never taken.
* **Allocation and admission.** A new request is admitted only if the pool's free
  blocks (never used, freed uncached, or cached and unused) cover its whole prompt in
  both groups (``scheduler_reserve_full_isl``, on by default), counting the hit blocks
  it takes out of the free queue. Each chunk then allocates each group's missing
  blocks, sliding window first.
* **Eviction order of the shared free queue.** Freed blocks without a key go to the
  front (taken first), freed cached blocks to the back; blocks are taken from the
  front, and taking a cached block evicts its key. When a request finishes, the
  sliding-window group's blocks are freed first, then full attention's, each tail
  first, so the sliding-window group's cached blocks are evicted before full
  attention's of the same request.
* **Copies.** A block computed while an identical key is cached is cached too; a hit
  uses the oldest live copy; a key stays cached until its last copy is evicted.
* **Decode.** ``output_len - 1`` decode steps, one token each (the last generated token
  needs no KV). Decode blocks hash over generated tokens no prompt has: full attention
  caches them under unique keys (they take room and age, never hit); the
  sliding-window group never caches them.

Simplifications, stated so a reader can judge: requests run one at a time (concurrency
1), prefill in chunks of ``max_chunk_tokens`` (``None``: one chunk; the server's
``--max-num-batched-tokens`` at concurrency 1); steps are synchronous (with async
scheduling vLLM frees sliding-window blocks one step later and caps admission at two
batches in flight, which can change which block a tight pool evicts: the replay then
uses :class:`prefixbench.engines.schedhybrid.AsyncHybridSchedulerSim`); keys are 64-bit
Python hashes (vLLM: sha256); LoRA, multimodal and cache-salt keys, EAGLE/MTP and KV
connectors are not modelled; exactly two groups of equal block size (gpt-oss's layout).

``max_admission_blocks``, vLLM's cap on the sliding-window group's admission reservation
(:func:`admission_cap`), is what a server's scheduler always passes (one batch of
``max_chunk_tokens`` in flight); without a chunk size it never binds. At concurrency 1 it
decides which requests are refused, never a hit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prefixbench.engines.cachesim import (
    _UNIQUE_BASE,
    CapacityError,
    PrefixCacheSim,
    ReplayResult,
    Tokens,
    block_hashes,
    same_kind,
)

__all__ = [
    "DEFAULT_SLIDING_WINDOW",
    "HybridCacheSim",
    "admission_cap",
    "cache_sim_for",
]

#: gpt-oss's sliding window, in tokens.
DEFAULT_SLIDING_WINDOW = 128

SLIDING: Literal["sliding"] = "sliding"
FULL: Literal["full"] = "full"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def admission_cap(sliding_window: int, max_in_flight_tokens: int, block_size: int,
                  max_model_len: int | None = None) -> int:
    """The sliding-window group's share of a request's admission reservation, in
    blocks: vLLM 0.32's ``SlidingWindowSpec.max_admission_blocks_per_request``, what a
    request holds at most while its prefill recycles blocks (``max_in_flight_tokens``:
    ``max_num_batched_tokens`` times the batches in flight, one synchronous, two async)."""
    held = sliding_window - 1 + max_in_flight_tokens
    if max_model_len is not None:
        held = min(held, max_model_len)
    return _cdiv(held, block_size) + 1


@dataclass
class _Running:
    """The block tables of the request being served: per group, physical block ids in
    block order, ``None`` for the null block."""

    keys: list[int]
    prompt_len: int
    num_tokens: int
    tables: tuple[list[int | None], list[int | None]]
    #: Blocks already considered for caching, per group (vLLM's ``num_cached_block``).
    num_cached: list[int]
    #: Ends (block indices) of the runs the sliding-window group keeps cached.
    swa_ends: list[int] = field(default_factory=list)


class HybridCacheSim:
    """The cache of one vLLM server running the hybrid KV-cache manager with one
    sliding-window group and one full-attention group; keep one instance across
    workloads to see carry-over.

    ``capacity_blocks``: the pool's usable blocks, vLLM's ``num_gpu_blocks`` minus its
    null block (:func:`prefixbench.engines.kvcapacity.usable_blocks`), shared by both
    groups; ``None``: unbounded (nothing is evicted). ``sliding_window`` in tokens.
    ``group_order``: which group is vLLM's group 0 (gpt-oss: the sliding-window layers);
    it decides which group's blocks a finishing request frees first.
    ``max_chunk_tokens``: prefill chunk size (``None``: the whole prompt at once).
    ``max_admission_blocks``: the admission cap (default :func:`admission_cap` with one
    chunk in flight, as a synchronous server; none without ``max_chunk_tokens``).
    """

    def __init__(
        self,
        block_size: int,
        capacity_blocks: int | None = None,
        *,
        sliding_window: int = DEFAULT_SLIDING_WINDOW,
        group_order: tuple[str, str] = (SLIDING, FULL),
        max_chunk_tokens: int | None = None,
        max_admission_blocks: int | None = None,
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if capacity_blocks is not None and capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be positive, got {capacity_blocks}")
        if sliding_window < 2:
            raise ValueError(f"sliding_window must be at least 2 tokens, got {sliding_window}")
        if sorted(group_order) != sorted((SLIDING, FULL)):
            raise ValueError(f"group_order must name {SLIDING!r} and {FULL!r} once each, "
                             f"got {group_order!r}")
        if max_chunk_tokens is not None and max_chunk_tokens <= 0:
            raise ValueError(f"max_chunk_tokens must be positive, got {max_chunk_tokens}")
        self.block_size = block_size
        self.capacity = capacity_blocks
        self.sliding_window = sliding_window
        self.group_order = group_order
        self.max_chunk_tokens = max_chunk_tokens
        if max_admission_blocks is None and max_chunk_tokens is not None:
            max_admission_blocks = admission_cap(sliding_window, max_chunk_tokens,
                                                 block_size)
        self.max_admission_blocks = max_admission_blocks
        #: Contiguous sliding-window blocks a hit needs.
        self.need = _cdiv(sliding_window - 1, block_size)
        # Group index 0 = sliding window, 1 = full attention, in this class; the order
        # vLLM frees them in is ``_free_order``.
        self._free_order = tuple(0 if g == SLIDING else 1 for g in group_order)
        #: Unbounded mode: keys each group has cached.
        self._seen: tuple[set[int], set[int]] = (set(), set())
        #: Bounded mode, per group: key -> live physical copies, oldest first.
        self._copies: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})
        #: Bounded mode: the (group, key) of every live cached physical block.
        self._key_of: dict[int, tuple[int, int]] = {}
        #: Bounded mode: cached blocks in the free queue, front (evicted first) first.
        self._lru: OrderedDict[int, None] = OrderedDict()
        #: Bounded mode: blocks held by the running request.
        self._held = 0
        self._next_id = 0
        self._next_unique = _UNIQUE_BASE
        self._token_kind: str | None = None
        self.evicted_blocks = 0
        self.hit_tokens_total = 0
        self.query_tokens_total = 0

    # -- queries -------------------------------------------------------------------
    @property
    def cached_blocks(self) -> int:
        """Physical blocks holding a key, both groups (unbounded: keys cached)."""
        if self.capacity is None:
            return len(self._seen[0]) + len(self._seen[1])
        return len(self._key_of)

    def _keys(self, tokens: Tokens) -> list[int]:
        self._token_kind = same_kind(self._token_kind, tokens)
        return block_hashes(tokens, self.block_size)

    def _lookup(self, keys: Sequence[int], prompt_len: int, full: Container[int],
                swa: Container[int]) -> tuple[int, int]:
        """(hit blocks, full-attention hit blocks) of ``find_longest_cache_hit``."""
        max_blocks = (prompt_len - 1) // self.block_size if prompt_len else 0
        fa_hit = 0
        while fa_hit < max_blocks and keys[fa_hit] in full:
            fa_hit += 1
        run = 0
        need = self.need
        for i in range(fa_hit - 1, -1, -1):
            if keys[i] in swa:
                run += 1
                if run >= need:
                    return i + need, fa_hit
            else:
                run = 0
        return run, fa_hit

    def _swa_ends(self, prompt_len: int, hit: int, fa_hit: int) -> list[int]:
        ends = [(prompt_len - 1) // self.block_size]  # replay_boundaries: prompt_len - 1
        if fa_hit > hit:  # shared_prefix_boundary: a prefix the window group lacks
            ends.append(fa_hit)
        return ends

    def _in_mask(self, index: int, ends: Sequence[int]) -> bool:
        return any(end - self.need <= index < end for end in ends)

    # -- one request ------------------------------------------------------------------
    def run(self, tokens: Tokens, output_len: int = 0) -> int:
        """Serve one request start to finish; return its hit tokens."""
        if self.capacity is None:
            return self._run_unbounded(tokens)
        return self._run_bounded(tokens, output_len, self.capacity)

    def _run_unbounded(self, tokens: Tokens) -> int:
        n = len(tokens)
        keys = self._keys(tokens)
        swa, fa = self._seen
        hit, fa_hit = self._lookup(keys, n, fa, swa)
        fa.update(keys)
        ends = self._swa_ends(n, hit, fa_hit)
        for i in range(hit, len(keys)):
            if self._in_mask(i, ends):
                swa.add(keys[i])
        hit_tokens = hit * self.block_size
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return hit_tokens

    def _run_bounded(self, tokens: Tokens, output_len: int, capacity: int) -> int:
        bs = self.block_size
        n = len(tokens)
        keys = self._keys(tokens)
        swa_copies, fa_copies = self._copies
        hit, fa_hit = self._lookup(keys, n, fa_copies, swa_copies)
        hit_tokens = hit * bs
        skipped = max(0, hit_tokens - self.sliding_window + 1) // bs
        swa_hit = [swa_copies[keys[i]][0] if i >= skipped else None for i in range(hit)]
        fa_hit_blocks = [fa_copies[keys[i]][0] for i in range(hit)]
        # Hit blocks in the free queue are taken out of it when the request takes them.
        evictable = sum(b is not None and b in self._lru for b in swa_hit) + sum(
            b in self._lru for b in fa_hit_blocks)
        prompt_blocks = _cdiv(n, bs)
        swa_blocks = prompt_blocks if self.max_admission_blocks is None else min(
            prompt_blocks, self.max_admission_blocks)
        # The admission gate: the whole prompt in both groups.
        reserve = prompt_blocks - hit + max(swa_blocks - max(skipped, hit), 0) + evictable
        if reserve > self._free():
            raise CapacityError(
                f"request of {n} tokens needs {reserve} free KV blocks of {bs} tokens "
                f"(both KV cache groups) but {self._free()} are free "
                f"(capacity {capacity})")
        req = _Running(keys=keys, prompt_len=n, num_tokens=n,
                       tables=([], []), num_cached=[0, 0],
                       swa_ends=self._swa_ends(n, hit, fa_hit))
        # Prefill, in chunks; the first also takes the hit.
        computed = hit_tokens
        chunk = self.max_chunk_tokens or n
        first = True
        while computed < n:
            new = min(n - computed, chunk)
            if first:
                self._allocate_first(req, hit=hit, skipped=skipped, swa_hit=swa_hit,
                                     fa_hit=fa_hit_blocks, slots=computed + new)
                first = False
            else:
                self._allocate(req, computed, computed + new)
            computed += new
        for _ in range(max(output_len - 1, 0)):
            req.num_tokens += 1  # the token generated by the last step
            self._allocate(req, computed, computed + 1)
            computed += 1
        # Finish: group 0 first, each tail first.
        for g in self._free_order:
            self._free_blocks([b for b in reversed(req.tables[g]) if b is not None])
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return hit_tokens

    # -- the block pool ---------------------------------------------------------------
    def _free(self) -> int:
        """Blocks in the free queue: never used, freed uncached, or cached and unused."""
        assert self.capacity is not None
        return self.capacity - self._held

    def _take(self, count: int) -> list[int]:
        """``count`` blocks from the front of the free queue: uncached first, then the
        least recently freed cached blocks, whose keys are evicted."""
        uncached = self._free() - len(self._lru)
        evict = max(count - uncached, 0)
        self.evicted_blocks += evict
        popitem = self._lru.popitem
        for _ in range(evict):
            block = popitem(last=False)[0]
            group, key = self._key_of.pop(block)
            copies = self._copies[group][key]
            copies.remove(block)
            if not copies:
                del self._copies[group][key]
        self._held += count
        first = self._next_id
        self._next_id += count
        return list(range(first, first + count))

    def _touch(self, blocks: Iterable[int | None]) -> None:
        for block in blocks:
            if block is None:
                continue
            del self._lru[block]  # concurrency 1: every hit block is in the queue
            self._held += 1

    def _free_blocks(self, ordered: Iterable[int]) -> None:
        """Cached blocks go to the back of the queue in order; others to the front."""
        lru = self._lru
        for block in ordered:
            self._held -= 1
            if block in self._key_of:
                lru[block] = None

    def _cache(self, group: int, block: int, key: int) -> None:
        self._key_of[block] = (group, key)
        copies = self._copies[group].get(key)
        if copies is None:
            self._copies[group][key] = [block]
        else:
            copies.append(block)

    def _cache_blocks(self, req: _Running, num_tokens: int) -> None:
        full = num_tokens // self.block_size
        keys = req.keys
        swa_table, fa_table = req.tables
        for i in range(req.num_cached[1], full):
            block = fa_table[i]
            assert block is not None
            if i < len(keys):
                key = keys[i]
            else:  # a decode block: a key no prompt has
                key = self._next_unique
                self._next_unique += 1
            self._cache(1, block, key)
        req.num_cached[1] = max(req.num_cached[1], full)
        ends = req.swa_ends
        for i in range(req.num_cached[0], full):
            block = swa_table[i]
            if block is not None and i < len(keys) and self._in_mask(i, ends):
                self._cache(0, block, keys[i])
        req.num_cached[0] = max(req.num_cached[0], full)

    def _remove_skipped(self, req: _Running, computed: int) -> None:
        """Free the sliding-window blocks before the next token's window, last first."""
        table = req.tables[0]
        skipped = min(max(0, computed - self.sliding_window + 1) // self.block_size,
                      len(table))
        freed: list[int] = []
        for i in range(skipped - 1, -1, -1):
            block = table[i]
            if block is None:
                break
            freed.append(block)
            table[i] = None
        self._free_blocks(freed)

    def _allocate_first(self, req: _Running, *, hit: int, skipped: int,
                        swa_hit: list[int | None], fa_hit: list[int], slots: int) -> None:
        bs = self.block_size
        blocks = _cdiv(slots, bs)
        swa_new = max(blocks - max(skipped, hit), 0)
        fa_new = blocks - hit
        lru = self._lru
        evictable = sum(b is not None and b in lru for b in swa_hit[skipped:]) + sum(
            b in lru for b in fa_hit)
        if swa_new + fa_new + evictable > self._free():
            raise CapacityError(f"prefill of {slots} tokens does not fit the KV cache "
                                f"(capacity {self.capacity})")
        swa_table, fa_table = req.tables
        self._touch(swa_hit[skipped:])
        swa_table.extend([None] * skipped)
        swa_table.extend(swa_hit[skipped:])
        self._touch(fa_hit)
        fa_table.extend(fa_hit)
        req.num_cached[0] = len(swa_table)
        req.num_cached[1] = len(fa_table)
        swa_table.extend(self._take(blocks - len(swa_table)) if blocks > len(swa_table)
                         else [])
        fa_table.extend(self._take(fa_new))
        self._cache_blocks(req, min(slots, req.num_tokens))

    def _allocate(self, req: _Running, computed: int, slots: int) -> None:
        self._remove_skipped(req, computed)
        blocks = _cdiv(slots, self.block_size)
        swa_table, fa_table = req.tables
        swa_new = max(blocks - len(swa_table), 0)
        fa_new = max(blocks - len(fa_table), 0)
        if swa_new + fa_new > self._free():
            raise CapacityError(
                f"a request of {req.prompt_len} prompt tokens cannot grow to {slots} "
                f"tokens in the KV cache (capacity {self.capacity}): vLLM would preempt it")
        swa_table.extend(self._take(swa_new))
        fa_table.extend(self._take(fa_new))
        self._cache_blocks(req, min(slots, req.num_tokens))

    # -- replay --------------------------------------------------------------------------
    def replay(self, prompts: Iterable[Tokens], output_len: int = 0) -> ReplayResult:
        """Serve ``prompts`` one after another (concurrency 1); per-request hits."""
        hits: list[int] = []
        lens: list[int] = []
        query = 0
        evicted_before = self.evicted_blocks
        for tokens in prompts:
            hits.append(self.run(tokens, output_len))
            lens.append(len(tokens))
            query += len(tokens)
        return ReplayResult(hit_tokens=hits, query_tokens=query,
                            evicted_blocks=self.evicted_blocks - evicted_before,
                            prompt_lens=lens)


CacheKind = Literal["full", "hybrid"]


def cache_sim_for(
    kind: CacheKind,
    block_size: int,
    capacity_blocks: int | None = None,
    *,
    sliding_window: int | None = None,
    max_chunk_tokens: int | None = None,
) -> PrefixCacheSim | HybridCacheSim:
    """The cache model of a server whose KV-cache manager is ``kind``: ``"full"`` (one
    group of full-attention layers, or the hybrid manager disabled) or ``"hybrid"``
    (sliding-window + full-attention groups sharing one pool, gpt-oss's layout;
    ``sliding_window`` defaults to gpt-oss's 128)."""
    if kind == "full":
        return PrefixCacheSim(block_size, capacity_blocks)
    if kind == "hybrid":
        return HybridCacheSim(block_size, capacity_blocks,
                              sliding_window=sliding_window or DEFAULT_SLIDING_WINDOW,
                              max_chunk_tokens=max_chunk_tokens)
    raise ValueError(f"unknown KV-cache manager kind {kind!r}: use 'full' or 'hybrid'")
