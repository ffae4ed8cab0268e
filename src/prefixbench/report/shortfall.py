"""Why a cached run's measured hit ratio differs from the tutorial's formula, cause by
cause, in percentage points.

The tutorial's formula counts every shared prefix token as a hit. The server caches
whole blocks of the tokens it sees, one request after another, in a cache of finite
size; each step from the formula to the measurement loses hits for one reason, and each
reason is visible in the data the run already keeps:

1. **prefix shorter than a block** / **partial last block**: the formula against the
   block-aligned expectation (only whole prefix blocks can be reused). All of it when
   the block-aligned expectation is 0 and the formula's is not.
2. **re-split at the prefix/suffix junction** / **token differences**: the block-aligned
   expectation against the one from the tokens the server sees (the bench's own prompts
   re-encoded and replayed: a tokenizer that merges across the junction loses the last
   prefix block, ``junction_lost_blocks``; a chat template or other rewriting changes
   what is shared).
3. **eviction**: the server's KV capacity is below the working set, so the replay of the
   served prompts at that capacity (``served_ratio``) hits less than the same replay with
   an unbounded cache (``served_unbounded_ratio``); or, beyond that expectation, the
   server evicted or preempted (``vllm:`` counters), so cached blocks were gone before
   their reuse.
4. **the sliding-window layers** (a server on vLLM's hybrid KV-cache manager, gpt-oss):
   the replay of the served prompts with full attention (``served_full_attention_ratio``)
   against the same replay with the hybrid model (``served_unbounded_ratio``); the
   junction is then counted on full attention's replay.
5. **requests racing on a prefix not yet cached**: above concurrency 1, requests that
   share a prefix arrive before the first of them has finished its prefill, so they
   compute it too (the expectation replays one request at a time).
6. **more hits than expected**: prompts an earlier workload on the same server left in
   the cache (see the common issue of that name), and **unexplained**: a gap none of the
   above accounts for.

:func:`explain` labels one bench; each label is kept only above the tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from prefixbench.report.bench_model import BenchSummary, agg_median
from prefixbench.report.vocab import CACHED

__all__ = ["Cause", "explain"]

#: Gaps at or below this (0.001 = 0.1 point) are rounding, not a cause.
TOLERANCE: Final = 0.001


@dataclass(frozen=True)
class Cause:
    """One reason the measured ratio differs from the formula, and by how much."""

    code: str
    #: Percentage points of hit ratio (negative: hits lost).
    points: float
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "points": round(self.points, 4), "text": self.text}


def explain(b: BenchSummary, tolerance: float = TOLERANCE) -> tuple[Cause, ...]:
    """The causes of a cached bench's difference from the formula (empty: none above the
    tolerance, not a cached bench, or no measurement)."""
    measured = agg_median(b.hit_ratio_queries)
    if b.configuration != CACHED or b.prefix_caching_enabled is False or measured is None:
        return ()
    out: list[Cause] = []
    tutorial, aligned, served = b.expected_tutorial, b.expected_block_aligned, b.expected_served
    if tutorial is not None and aligned is not None and tutorial - aligned > tolerance:
        if aligned == 0:
            out.append(Cause("short_prefix", (aligned - tutorial) * 100,
                             f"the shared prefix is shorter than a block ({b.block_size} "
                             "tokens): no whole block to reuse"))
        else:
            out.append(Cause("partial_block", (aligned - tutorial) * 100,
                             "the prefix's partial last block is never reused (only whole "
                             f"{b.block_size}-token blocks are)"))
    unbounded = b.expected_served_unbounded
    full = b.expected_served_full_attention
    hybrid = full is not None and unbounded is not None
    tokens_side = full if hybrid else unbounded if unbounded is not None else served
    if aligned is not None and tokens_side is not None and aligned - tokens_side > tolerance:
        lost = b.junction_lost_blocks
        if lost:
            out.append(Cause("junction", (tokens_side - aligned) * 100,
                             f"the tokenizer re-splits the text where prefix and suffix "
                             f"meet: {lost:.0f} prefix block(s) lost over the run"))
        else:
            out.append(Cause("tokens", (tokens_side - aligned) * 100,
                             "the tokens the server sees share less than the token counts "
                             "say (a chat template or other rewriting of the prompts)"))
    if hybrid and full is not None and unbounded is not None and full - unbounded > tolerance:
        out.append(Cause("sliding_window", (unbounded - full) * 100,
                         "vLLM's hybrid KV-cache manager: the sliding-window layers keep "
                         "only the window before each prompt's end (and before a shared "
                         "prefix's end once a request has found that prefix), so the first "
                         "repeat of a prefix misses; full attention would hit it"))
    if unbounded is not None and served is not None and unbounded - served > tolerance:
        out.append(Cause("eviction", (served - unbounded) * 100,
                         "the KV cache is smaller than the working set: replayed at the "
                         "server's capacity, the prompts lose cached blocks before their "
                         "reuse (see the capacity curve: prefixbench_sweep_kv_blocks)"))
    base = served if served is not None else aligned
    if base is None:
        return tuple(out)
    gap = measured - base
    if gap < -tolerance:
        out.append(_shortfall(b, gap))
    elif gap > tolerance:
        out.append(Cause("extra_hits", gap * 100,
                         "more hits than the prompts share: an earlier workload's prompts "
                         "were still cached on this server"))
    return tuple(out)


def _shortfall(b: BenchSummary, gap: float) -> Cause:
    """The cause of a measured ratio below the replayed expectation."""
    if b.evictions_sampled or b.preemptions:
        signs = [f"{v:.0f} {name}" for v, name in ((b.evictions_sampled, "sampled evictions"),
                                                    (b.preemptions, "preemptions")) if v]
        predicted = agg_median(b.predicted_hit_ratio)
        beside = ("" if predicted is None else
                  f"; the what-if replay at the server's capacity predicts {predicted:.1%}")
        return Cause("eviction", gap * 100, "cached blocks were evicted before their reuse ("
                     + ", ".join(signs) + ")" + beside)
    if b.max_concurrency is not None and b.max_concurrency > 1:
        return Cause("race", gap * 100,
                     f"at concurrency {b.max_concurrency} requests that share a prefix "
                     "arrived before the first of them had cached it, and computed it "
                     "too")
    return Cause("unexplained", gap * 100,
                 "below the expectation with no eviction and one request at a time: no "
                 "cause in the data (read the server's journal for this bench's window)")
