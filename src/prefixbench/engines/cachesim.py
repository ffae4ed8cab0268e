"""A model of vLLM's block-hash prefix cache, to replay prompts without a server.

What is modelled (vLLM v1 ``KVCacheManager`` / ``BlockPool``, checked on vLLM 0.32):

* Only full blocks are cached. Block ``i`` of a prompt is keyed by a *chained* hash of
  its tokens and the key of block ``i - 1``, so a block matches only when the whole
  prompt up to its end matches.
* A request's hit is the longest run of leading blocks already cached, capped at
  ``(prompt_len - 1) // block_size`` blocks: vLLM recomputes the last prompt token for
  its logits, so a fully cached prompt still misses its last block.
* Capacity is a number of usable KV blocks: vLLM's ``num_gpu_blocks`` minus one, as
  block 0 is vLLM's null block, never allocated
  (:func:`prefixbench.engines.kvcapacity.usable_blocks`). Blocks a request holds (hit,
  computed, and its decode blocks when ``output_len`` is given) are never evicted while
  it runs. When it finishes its blocks are freed in reverse order
  (tail first): cached blocks go to the back of an LRU queue, uncached ones (the partial
  last block) become free at once. New blocks are taken from free uncached blocks first,
  then by evicting the LRU front.
* A block computed although an identical one is cached is cached too, and both physical
  copies are kept (vLLM does not de-duplicate). This happens to the last block of a
  prompt that is a whole number of blocks and fully cached: the hit stops one block
  short, the block is recomputed into a new physical block, which is freed to the LRU
  tail with the request. A later hit uses the oldest live copy; the key stays cached
  until its last copy is evicted.
* Decode blocks (prompt + output tokens) hash over generated tokens no other prompt
  has; they are given unique keys so they take room and age like vLLM's, but never hit.

Checked request by request against vLLM 0.32's own ``KVCacheManager``
(``tests/integration/test_cachesim_vs_vllm.py``), with and without eviction.

Where another model applies: vLLM's hybrid KV-cache manager (several KV cache groups,
e.g. full and sliding-window attention layers as gpt-oss has) draws every group's blocks
from one pool and keeps only part of the sliding-window group's blocks, so this model
predicts neither its hits nor its evictions; :class:`prefixbench.engines.hybridsim.HybridCacheSim`
models it, :func:`prefixbench.engines.hybridsim.cache_sim_for` picks one, and
:func:`prefixbench.engines.kvcapacity.kv_cache_kind` tells from ``vllm:cache_config_info``
which applies.

Simplifications, stated so a reader can judge: keys are 64-bit Python hashes (vLLM uses
sha256; a collision needs ~4e9 distinct blocks to become likely); LoRA / multimodal /
cache-salt extra keys are not modelled; :meth:`PrefixCacheSim.replay` runs requests one
at a time (the tutorial's concurrency 1), and a request's decode blocks are allocated
with its prompt's. :meth:`PrefixCacheSim.begin` / :meth:`PrefixCacheSim.finish` keep
several requests open at once for a scheduler model to build on.

Speed: hashing is done with tuple slices and ``hash`` in C; there is no per-token Python
loop. ``make bench-cachesim`` measures prompts per second.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, chain

__all__ = [
    "CapacityError",
    "PrefixCacheSim",
    "ReplayResult",
    "RequestHandle",
    "block_hashes",
    "replay",
]

#: Keys of decode blocks start here: above every value ``hash`` can return.
_UNIQUE_BASE = 1 << 64


class CapacityError(ValueError):
    """A request needs more KV blocks than the cache can ever give it."""


@lru_cache(maxsize=256)
def _slices(num_blocks: int, block_size: int) -> tuple[slice, ...]:
    return tuple(slice(i * block_size, (i + 1) * block_size) for i in range(num_blocks))


def _chain(parent: int, block: int) -> int:
    return hash((parent, block))


Tokens = Sequence[int] | array[int]


def block_hashes(tokens: Tokens, block_size: int) -> list[int]:
    """Chained keys of the full blocks of ``tokens`` (a partial last block has none).

    ``tokens`` is a sequence of ints (a tuple is used as is, anything else is copied to
    one) or an ``array.array`` of token ids. Arrays are hashed as raw memory, several
    times faster than tuples of Python ints, but the two kinds give different keys: one
    :class:`PrefixCacheSim` refuses to mix them.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if isinstance(tokens, array):
        n = len(tokens) // block_size
        if n == 0:
            return []
        buf = tokens.tobytes()
        per_block = map(hash, map(buf.__getitem__, _slices(n, block_size * tokens.itemsize)))
    else:
        seq = tokens if isinstance(tokens, tuple) else tuple(tokens)
        n = len(seq) // block_size
        if n == 0:
            return []
        per_block = map(hash, map(seq.__getitem__, _slices(n, block_size)))
    keys = list(accumulate(per_block, _chain, initial=0))
    del keys[0]  # the initial value, not a block
    return keys


def _kind(tokens: Tokens) -> str:
    return f"array:{tokens.itemsize}" if isinstance(tokens, array) else "ints"


def same_kind(previous: str | None, tokens: Tokens) -> str:
    """The representation of ``tokens`` (:func:`_kind`), which must be ``previous`` when a
    cache was fed before: two representations hash to different block keys, so a mix
    would miss hits silently (``TypeError``)."""
    kind = _kind(tokens)
    if previous is not None and kind != previous:
        raise TypeError(f"this cache was fed {previous} prompts and now {kind}: their block "
                        f"keys differ, so hits would be missed; use one representation")
    return kind


@dataclass
class RequestHandle:
    """Blocks one open request holds: ids of its cached blocks in block-table order (a
    block's id is its key, or a unique id for an extra copy or a decode block), and the
    number of uncached ones."""

    keys: list[int]
    uncached: int
    hit_tokens: int
    prompt_tokens: int


@dataclass
class ReplayResult:
    """Per-request hit tokens and the totals, as vLLM's counters would report them."""

    hit_tokens: list[int]
    query_tokens: int
    evicted_blocks: int = 0
    prompt_lens: list[int] = field(default_factory=list)

    @property
    def total_hit_tokens(self) -> int:
        return sum(self.hit_tokens)

    @property
    def ratio(self) -> float:
        return self.total_hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def requests(self) -> int:
        return len(self.hit_tokens)


class PrefixCacheSim:
    """The cache of one vLLM server; keep one instance across workloads to see carry-over.

    ``capacity_blocks=None`` means unbounded (nothing is ever evicted), which uses a
    faster path. A bounded capacity is the number of *usable* blocks: vLLM's
    ``num_gpu_blocks`` (``vllm:cache_config_info``) minus its null block, see
    :func:`prefixbench.engines.kvcapacity.usable_blocks`.

    Bounded mode tracks physical blocks. A block holding a prompt block's key has that
    key as its id; a second physical copy of a key (see the module docstring) and a
    decode block get an id of their own above every key.
    """

    def __init__(self, block_size: int, capacity_blocks: int | None = None) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if capacity_blocks is not None and capacity_blocks <= 0:
            raise ValueError(f"capacity_blocks must be positive, got {capacity_blocks}")
        self.block_size = block_size
        self.capacity = capacity_blocks
        #: Unbounded mode: every key ever cached.
        self._seen: set[int] = set()
        #: Bounded mode: cached blocks nobody holds (ids), least recently used first.
        self._lru: OrderedDict[int, None] = OrderedDict()
        #: Bounded mode: cached blocks (ids) held by open requests, with their holder count.
        self._ref: dict[int, int] = {}
        #: Bounded mode, keys cached in more than one physical block since their first copy
        #: was made: the ids of their live copies, oldest first (vLLM hits the oldest).
        #: A key absent here has at most one copy, whose id is the key itself.
        self._dups: dict[int, list[int]] = {}
        #: Bounded mode: the key of each live extra copy (id above every key).
        self._dup_key: dict[int, int] = {}
        self._held_uncached = 0
        self._next_unique = _UNIQUE_BASE
        self._token_kind: str | None = None
        self.evicted_blocks = 0
        self.hit_tokens_total = 0
        self.query_tokens_total = 0

    # -- queries -------------------------------------------------------------------
    @property
    def cached_blocks(self) -> int:
        """Physical blocks holding a key (in use or evictable), decode blocks included."""
        if self.capacity is None:
            return len(self._seen)
        return len(self._lru) + len(self._ref)

    def _keys(self, tokens: Tokens) -> list[int]:
        self._token_kind = same_kind(self._token_kind, tokens)
        return block_hashes(tokens, self.block_size)

    def _hit_blocks(self, keys: Sequence[int], max_blocks: int) -> int:
        hit = 0
        if self.capacity is None:
            seen = self._seen
            while hit < max_blocks and keys[hit] in seen:
                hit += 1
        else:
            lru, ref, dups = self._lru, self._ref, self._dups
            while hit < max_blocks and (keys[hit] in lru or keys[hit] in ref
                                        or keys[hit] in dups):
                hit += 1
        return hit

    def _block_of(self, key: int) -> int:
        """The id of the physical block a hit on cached ``key`` uses (the oldest copy)."""
        copies = self._dups.get(key)
        return copies[0] if copies else key

    def _new_block(self, key: int) -> int:
        """Id of a newly computed block with ``key``: the key itself, or a fresh id when
        the key is still cached (vLLM caches the new copy too and keeps both)."""
        copies = self._dups.get(key)
        if copies is None and key not in self._lru and key not in self._ref:
            return key
        block = self._next_unique
        self._next_unique += 1
        self._dup_key[block] = key
        if copies is None:
            self._dups[key] = [key, block]
        else:
            copies.append(block)
        return block

    def _evict(self, count: int) -> None:
        """Evict ``count`` blocks from the LRU front."""
        if count <= 0:
            return
        self.evicted_blocks += count
        popitem = self._lru.popitem
        if not self._dups:
            for _ in range(count):
                popitem(last=False)
            return
        dups, dup_key = self._dups, self._dup_key
        for _ in range(count):
            block = popitem(last=False)[0]
            key = dup_key.pop(block, block)
            copies = dups.get(key)
            if copies is not None:
                copies.remove(block)
                if not copies:
                    del dups[key]

    # -- one request at a time -------------------------------------------------------
    def run(self, tokens: Tokens, output_len: int = 0) -> int:
        """Serve one request start to finish; return its hit tokens."""
        if self.capacity is None:
            return self._run_unbounded(tokens)
        if not self._ref and not self._held_uncached:
            return self._run_serial(tokens, output_len, self.capacity)
        handle = self.begin(tokens, output_len)
        self.finish(handle)
        return handle.hit_tokens

    def _run_unbounded(self, tokens: Tokens) -> int:
        n = len(tokens)
        keys = self._keys(tokens)
        max_blocks = (n - 1) // self.block_size if n else 0
        hit = self._hit_blocks(keys, max_blocks)
        self._seen.update(keys)
        hit_tokens = hit * self.block_size
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return hit_tokens

    def _run_serial(self, tokens: Tokens, output_len: int, capacity: int) -> int:
        """:meth:`begin` + :meth:`finish` when no other request is open, in fewer steps."""
        bs = self.block_size
        n = len(tokens)
        keys = self._keys(tokens)
        max_blocks = (n - 1) // bs if n else 0
        lru, dups = self._lru, self._dups
        hit = 0
        for key in keys:
            if hit >= max_blocks or (key not in lru and key not in dups):
                break
            hit += 1
        blocks = [self._block_of(key) for key in keys[:hit]] if dups else keys[:hit]
        for block in blocks:
            del lru[block]
        kv_tokens = n + output_len - 1 if output_len > 0 else n
        total_blocks = -(-kv_tokens // bs)
        if total_blocks > capacity:
            for block in reversed(blocks):
                lru[block] = None
            raise CapacityError(
                f"request needs {total_blocks} KV blocks of {bs} tokens but at most "
                f"{capacity} can be given (capacity {capacity})")
        free = capacity - len(lru) - hit
        prompt_blocks = -(-n // bs)
        # Prefill takes its blocks (evicting as needed), then caches its full blocks;
        # decode takes the rest.
        prompt_evict = max(prompt_blocks - hit - free, 0)
        self._evict(prompt_evict)
        blocks.extend(map(self._new_block, keys[hit:]))
        self._evict(max(total_blocks - hit - free, 0) - prompt_evict)
        decode_full = max(kv_tokens // bs - len(keys), 0)
        first = self._next_unique
        self._next_unique += decode_full
        # Free tail first: decode blocks, then prompt blocks from last to first.
        lru.update(dict.fromkeys(chain(reversed(range(first, first + decode_full)),
                                       reversed(blocks))))
        hit_tokens = hit * bs
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return hit_tokens

    # -- open requests (bounded capacity) -----------------------------------------------
    def begin(self, tokens: Tokens, output_len: int = 0) -> RequestHandle:
        """Admit a request: look up its hit, hold those blocks, allocate the rest
        (evicting LRU blocks as needed) and cache its full prompt blocks."""
        if self.capacity is None:
            raise ValueError("begin/finish model a bounded cache; give capacity_blocks")
        bs = self.block_size
        n = len(tokens)
        keys = self._keys(tokens)
        full = len(keys)
        max_blocks = (n - 1) // bs if n else 0
        hit = self._hit_blocks(keys, max_blocks)
        kv_tokens = n + output_len - 1 if output_len > 0 else n
        total_blocks = -(-kv_tokens // bs)
        new = total_blocks - hit
        lru, ref = self._lru, self._ref
        # Hold the hit blocks first: they cannot be evicted for this request's own needs.
        held = [self._block_of(key) for key in keys[:hit]]
        for block in held:
            if block in lru:
                del lru[block]
                ref[block] = 1
            else:
                ref[block] += 1
        free = self.capacity - len(lru) - len(ref) - self._held_uncached
        if new > free + len(lru):
            for block in held:  # undo the hold before refusing
                self._release(block)
            raise CapacityError(
                f"request needs {total_blocks} KV blocks of {bs} tokens but at most "
                f"{free + len(lru) + hit} can be given (capacity {self.capacity})")
        prompt_evict = max(-(-n // bs) - hit - free, 0)
        self._evict(prompt_evict)
        for key in keys[hit:full]:
            block = self._new_block(key)
            ref[block] = 1
            held.append(block)
        self._evict(max(new - free, 0) - prompt_evict)
        decode_full = max(kv_tokens // bs - full, 0)
        for _ in range(decode_full):
            block = self._next_unique
            self._next_unique += 1
            ref[block] = 1
            held.append(block)
        uncached = total_blocks - full - decode_full
        self._held_uncached += uncached
        hit_tokens = hit * bs
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return RequestHandle(keys=held, uncached=uncached, hit_tokens=hit_tokens,
                             prompt_tokens=n)

    def _release(self, block: int) -> None:
        count = self._ref[block] - 1
        if count:
            self._ref[block] = count
        else:
            del self._ref[block]
            self._lru[block] = None

    def finish(self, handle: RequestHandle) -> None:
        """Release a request's blocks, tail first (vLLM frees in reverse order)."""
        for block in reversed(handle.keys):
            self._release(block)
        self._held_uncached -= handle.uncached
        handle.keys = []
        handle.uncached = 0

    # -- replay --------------------------------------------------------------------------
    def replay(self, prompts: Iterable[Tokens], output_len: int = 0) -> ReplayResult:
        """Serve ``prompts`` one after another (concurrency 1); per-request hits."""
        hits: list[int] = []
        lens: list[int] = []
        query = 0
        evicted_before = self.evicted_blocks
        run = self.run
        for tokens in prompts:
            hits.append(run(tokens, output_len))
            n = len(tokens)
            lens.append(n)
            query += n
        return ReplayResult(hit_tokens=hits, query_tokens=query,
                            evicted_blocks=self.evicted_blocks - evicted_before,
                            prompt_lens=lens)


def replay(
    prompts: Iterable[Tokens],
    block_size: int,
    capacity_blocks: int | None = None,
    output_len: int = 0,
) -> ReplayResult:
    """Replay ``prompts`` through a fresh cache at concurrency 1."""
    return PrefixCacheSim(block_size, capacity_blocks).replay(prompts, output_len)
