"""A model of vLLM's block-hash prefix cache, to replay prompts without a server.

What is modelled (vLLM v1 ``KVCacheManager`` / ``BlockPool``, checked on vLLM 0.32):

* Only full blocks are cached. Block ``i`` of a prompt is keyed by a *chained* hash of
  its tokens and the key of block ``i - 1``, so a block matches only when the whole
  prompt up to its end matches.
* A request's hit is the longest run of leading blocks already cached, capped at
  ``(prompt_len - 1) // block_size`` blocks: vLLM recomputes the last prompt token for
  its logits, so a fully cached prompt still misses its last block.
* Capacity is a number of KV blocks. Blocks a request holds (hit, computed, and its
  decode blocks when ``output_len`` is given) are never evicted while it runs. When it
  finishes its blocks are freed in reverse order (tail first): cached blocks go to the
  back of an LRU queue, uncached ones (the partial last block) become free at once.
  New blocks are taken from free uncached blocks first, then by evicting the LRU front.
* Decode blocks (prompt + output tokens) hash over generated tokens no other prompt
  has; they are given unique keys so they take room and age like vLLM's, but never hit.

Simplifications, stated so a reader can judge: keys are 64-bit Python hashes (vLLM uses
sha256; a collision needs ~4e9 distinct blocks to become likely); LoRA / multimodal /
cache-salt extra keys are not modelled; a block recomputed although an identical one is
cached (the last block of a fully cached prompt) is counted as an uncached block;
:meth:`PrefixCacheSim.replay` runs requests one at a time (the tutorial's concurrency 1).
:meth:`PrefixCacheSim.begin` / :meth:`PrefixCacheSim.finish` keep several requests open
at once for a scheduler model to build on.

Speed: hashing is done with tuple slices and ``hash`` in C; there is no per-token Python
loop. ``scripts/bench-cachesim`` measures prompts per second.
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


@dataclass
class RequestHandle:
    """Blocks one open request holds: cached keys in chain order, and uncached ones."""

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
    faster path. ``num_gpu_blocks`` from ``vllm:cache_config_info`` is the real capacity.
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
        #: Bounded mode: cached blocks nobody holds, least recently used first.
        self._lru: OrderedDict[int, None] = OrderedDict()
        #: Bounded mode: cached blocks held by open requests, with their holder count.
        self._ref: dict[int, int] = {}
        self._held_uncached = 0
        self._next_unique = _UNIQUE_BASE
        self._token_kind: str | None = None
        self.evicted_blocks = 0
        self.hit_tokens_total = 0
        self.query_tokens_total = 0

    # -- queries -------------------------------------------------------------------
    @property
    def cached_blocks(self) -> int:
        """Blocks holding a reusable key (in use or evictable)."""
        if self.capacity is None:
            return len(self._seen)
        return len(self._lru) + len(self._ref)

    def _keys(self, tokens: Tokens) -> list[int]:
        kind = _kind(tokens)
        if self._token_kind is None:
            self._token_kind = kind
        elif kind != self._token_kind:
            raise TypeError(
                f"this cache was fed {self._token_kind} prompts and now {kind}: their "
                f"block keys differ, so hits would be missed; use one representation")
        return block_hashes(tokens, self.block_size)

    def _hit_blocks(self, keys: Sequence[int], max_blocks: int) -> int:
        hit = 0
        if self.capacity is None:
            seen = self._seen
            while hit < max_blocks and keys[hit] in seen:
                hit += 1
        else:
            lru, ref = self._lru, self._ref
            while hit < max_blocks and (keys[hit] in lru or keys[hit] in ref):
                hit += 1
        return hit

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
        lru = self._lru
        hit = 0
        for key in keys:
            if hit >= max_blocks or key not in lru:
                break
            hit += 1
        for key in keys[:hit]:
            del lru[key]
        kv_tokens = n + output_len - 1 if output_len > 0 else n
        total_blocks = -(-kv_tokens // bs)
        if total_blocks > capacity:
            for key in reversed(keys[:hit]):
                lru[key] = None
            raise CapacityError(
                f"request needs {total_blocks} KV blocks of {bs} tokens but at most "
                f"{capacity} can be given (capacity {capacity})")
        evict = (total_blocks - hit) - (capacity - len(lru) - hit)
        if evict > 0:
            self.evicted_blocks += evict
            popitem = lru.popitem
            for _ in range(evict):
                popitem(last=False)
        decode_full = max(kv_tokens // bs - len(keys), 0)
        first = self._next_unique
        self._next_unique += decode_full
        # Free tail first: decode blocks, then prompt blocks from last to first. A key
        # already present (a recomputed duplicate) keeps its place, as in vLLM.
        lru.update(dict.fromkeys(chain(reversed(range(first, first + decode_full)),
                                       reversed(keys))))
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
        for key in keys[:hit]:
            if key in lru:
                del lru[key]
                ref[key] = 1
            else:
                ref[key] += 1
        free = self.capacity - len(lru) - len(ref) - self._held_uncached
        if new > free + len(lru):
            for key in keys[:hit]:  # undo the hold before refusing
                self._release(key)
            raise CapacityError(
                f"request needs {total_blocks} KV blocks of {bs} tokens but at most "
                f"{free + len(lru) + hit} can be given (capacity {self.capacity})")
        evict = new - free
        if evict > 0:
            self.evicted_blocks += evict
            for _ in range(evict):
                lru.popitem(last=False)
        held: list[int] = keys[:hit]
        uncached = 0
        for key in keys[hit:full]:
            if key in ref or key in lru:
                uncached += 1  # duplicate of a cached block: vLLM keeps both
            else:
                ref[key] = 1
                held.append(key)
        decode_full = kv_tokens // bs - full
        for _ in range(max(decode_full, 0)):
            key = self._next_unique
            self._next_unique += 1
            ref[key] = 1
            held.append(key)
        uncached += total_blocks - full - max(decode_full, 0)
        self._held_uncached += uncached
        hit_tokens = hit * bs
        self.hit_tokens_total += hit_tokens
        self.query_tokens_total += n
        return RequestHandle(keys=held, uncached=uncached, hit_tokens=hit_tokens,
                             prompt_tokens=n)

    def _release(self, key: int) -> None:
        count = self._ref[key] - 1
        if count:
            self._ref[key] = count
        else:
            del self._ref[key]
            self._lru[key] = None

    def finish(self, handle: RequestHandle) -> None:
        """Release a request's blocks, tail first (vLLM frees in reverse order)."""
        for key in reversed(handle.keys):
            self._release(key)
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
