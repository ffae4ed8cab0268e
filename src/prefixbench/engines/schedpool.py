"""The block pool of :mod:`prefixbench.engines.schedsim`: vLLM's full-attention prefix
cache, block by block, for requests that take blocks a step at a time.

What is modelled, read from vLLM 0.32's ``vllm/v1/core/block_pool.py`` (``BlockPool``:
``get_cached_block``, ``cache_full_blocks``, ``get_new_blocks``, ``touch``,
``free_blocks``) and ``single_type_kv_cache_manager.py`` (``FullAttentionManager``,
``SingleTypeKVCacheManager.free``), the same rules as
:class:`prefixbench.engines.cachesim.PrefixCacheSim`:

* One free queue. Blocks freed without a key (a partial block) go to its front, cached
  blocks freed by their last holder to its back, and new blocks are taken from the
  front: so uncached free blocks are used first, then the least recently freed cached
  ones, whose keys are evicted. As only full blocks have keys, the queue is a count of
  uncached blocks followed by an LRU of cached ones.
* A request's blocks are freed in reverse order (tail first).
* A block whose key is already cached is cached too (vLLM does not de-duplicate); a hit
  uses the oldest live copy; a key stays cached until its last copy is evicted.
* Blocks are cached up to the tokens a step is *scheduled* to compute (vLLM caches them
  inside ``allocate_slots``).

Physical block numbers do not matter to hits, so every block taken gets a fresh id.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from prefixbench.engines.cachesim import _UNIQUE_BASE

__all__ = ["BlockPool", "BlockTable"]

#: Free blocks of an unbounded cache: more than any replay can take.
UNBOUNDED: Final = 1 << 62


class BlockTable:
    """The blocks of one request: the keys of its full blocks known so far (prompt,
    then generated tokens' unique keys) and its physical blocks, the first
    ``num_cached`` of which are cached."""

    __slots__ = ("keys", "num_cached", "table")

    def __init__(self, keys: list[int]) -> None:
        self.keys = keys
        self.table: list[int] = []
        self.num_cached = 0


class BlockPool:
    """``capacity_blocks`` usable blocks (``None``: unbounded) of ``block_size`` tokens."""

    def __init__(self, block_size: int, capacity_blocks: int | None) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if capacity_blocks is not None and capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be positive, got {capacity_blocks}")
        self.block_size = block_size
        self.capacity = capacity_blocks
        #: Free blocks never used or freed without a key (the front of vLLM's queue).
        self._free_new = UNBOUNDED if capacity_blocks is None else capacity_blocks
        #: Cached blocks nobody holds, least recently freed first (the queue's back).
        self._lru: OrderedDict[int, None] = OrderedDict()
        #: Cached blocks held by requests: holder count.
        self._ref: dict[int, int] = {}
        #: Key -> ids of its live cached copies, oldest first (a hit uses the first).
        self._copies: dict[int, list[int]] = {}
        #: Id -> key of every live cached block.
        self._key_of: dict[int, int] = {}
        self._next_id = 1
        self._next_unique = _UNIQUE_BASE
        self.evicted_blocks = 0

    @property
    def cached_blocks(self) -> int:
        """Physical blocks holding a key (in use or evictable)."""
        return len(self._key_of)

    def _free_total(self) -> int:
        """Blocks in the free queue (vLLM's ``get_num_free_blocks``)."""
        return self._free_new + len(self._lru)

    def _take(self, count: int) -> list[int]:
        """``count`` blocks from the front of the free queue: uncached first, then the
        least recently freed cached ones, whose keys are evicted."""
        fresh = min(count, self._free_new)
        self._free_new -= fresh
        evict = count - fresh
        if evict:
            self.evicted_blocks += evict
            popitem = self._lru.popitem
            copies, key_of = self._copies, self._key_of
            for _ in range(evict):
                block = popitem(last=False)[0]
                key = key_of.pop(block)
                live = copies[key]
                if len(live) == 1:
                    del copies[key]
                else:
                    live.remove(block)
        first = self._next_id
        self._next_id += count
        return list(range(first, first + count))

    def _keys_to(self, req: BlockTable, full_blocks: int) -> list[int]:
        """The request's keys, extended with unique keys for blocks of generated
        tokens up to ``full_blocks``."""
        keys = req.keys
        missing = full_blocks - len(keys)
        if missing > 0:
            first = self._next_unique
            self._next_unique += missing
            keys.extend(range(first, first + missing))
        return keys

    def _hit(self, keys: list[int], max_blocks: int) -> list[int]:
        """The blocks of the longest run of leading keys cached, at most ``max_blocks``
        (the oldest copy of each)."""
        copies = self._copies
        hit = 0
        while hit < max_blocks and keys[hit] in copies:
            hit += 1
        return [copies[key][0] for key in keys[:hit]]

    def _touch(self, blocks: list[int]) -> None:
        """Hold hit blocks: those nobody held leave the free queue."""
        lru, ref = self._lru, self._ref
        for block in blocks:
            if block in lru:
                del lru[block]
                ref[block] = 1
            else:
                ref[block] += 1

    def _cache(self, req: BlockTable, num_tokens: int) -> None:
        """Cache the request's full blocks up to ``num_tokens`` (vLLM's
        ``cache_full_blocks``; a copy of a key already cached is cached too)."""
        full = num_tokens // self.block_size
        start = req.num_cached
        if full <= start:
            return
        keys = self._keys_to(req, full)
        table, copies, key_of, ref = req.table, self._copies, self._key_of, self._ref
        for i in range(start, full):
            block = table[i]
            key = keys[i]
            live = copies.get(key)
            if live is None:
                copies[key] = [block]
            else:
                live.append(block)
            key_of[block] = key
            ref[block] = 1
        req.num_cached = full

    def _free(self, req: BlockTable) -> None:
        """Free the request's blocks tail first: uncached ones to the front of the free
        queue, cached ones whose last holder it was to the back."""
        table = req.table
        self._free_new += len(table) - req.num_cached
        ref, lru = self._ref, self._lru
        for i in range(req.num_cached - 1, -1, -1):
            block = table[i]
            count = ref[block] - 1
            if count:
                ref[block] = count
            else:
                del ref[block]
                lru[block] = None
        req.table = []
        req.num_cached = 0
