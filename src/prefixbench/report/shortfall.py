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

__all__ = ["Cause", "expectation_steps", "explain"]

#: Gaps at or below this (0.001 = 0.1 point) are rounding, not a cause.
TOLERANCE: Final = 0.001


@dataclass(frozen=True)
class Cause:
    """One reason the measured ratio differs from the formula, and by how much."""

    code: str
    #: Percentage points of hit ratio (negative: hits lost).
    points: float
    text: str
    #: The figure behind it, for a one-line account (``label``).
    brief: str = ""

    @property
    def label(self) -> str:
        """The cause in a few words: its code, and the figure that shows it."""
        name = self.code.replace("_", " ")
        return f"{name} ({self.brief})" if self.brief else name

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "points": round(self.points, 4), "text": self.text}


def _small(points: float) -> Cause:
    return Cause("small", points, "steps of at most 0.1 point each, together (the "
                 "rounding of the expectations above)", "steps of 0.1 point or less")


def _add_up(out: list[Cause], total: float) -> list[Cause]:
    """``out`` with the part of ``total`` (points) its causes leave over, when it shows at
    two decimals: each step at or below the tolerance is left out on its own, and
    together they are labelled, so the causes always add up to the gap."""
    rest = total - sum(c.points for c in out)
    if abs(rest) >= 0.005:
        out.append(_small(rest))
    return out


def expectation_steps(b: BenchSummary, tolerance: float = TOLERANCE) -> tuple[Cause, ...]:
    """From the block-aligned expectation to the served one (the replay of the tokens the
    server was sent, at its capacity: what the hit-rate verdict judges against), step by
    step: junction or tokens, sliding window, eviction. Their points add up to
    ``served - block-aligned`` (empty: either is missing, or they are equal)."""
    aligned, served = b.expected_block_aligned, b.expected_served
    unbounded, full = b.expected_served_unbounded, b.expected_served_full_attention
    hybrid = full is not None and unbounded is not None
    tokens_side = full if hybrid else unbounded if unbounded is not None else served
    end = served if served is not None else unbounded if unbounded is not None else full
    if aligned is None or tokens_side is None or end is None:
        return ()
    out: list[Cause] = []
    if abs(tokens_side - aligned) > tolerance:
        lost = b.junction_lost_blocks
        if lost and tokens_side < aligned:
            out.append(Cause("junction", (tokens_side - aligned) * 100,
                             f"the tokenizer re-splits the text where prefix and suffix "
                             f"meet: {lost:.0f} prefix block(s) lost over the run",
                             f"{lost:.0f} block(s) lost where prefix and suffix re-split"))
        else:
            share = "less" if tokens_side < aligned else "more"
            out.append(Cause("tokens", (tokens_side - aligned) * 100,
                             f"the tokens the server sees share {share} than the token "
                             f"counts say (a chat template or other rewriting of the "
                             f"prompts)", "the served tokens against the token counts"))
    if hybrid and full is not None and unbounded is not None \
            and abs(full - unbounded) > tolerance:
        out.append(Cause("sliding_window", (unbounded - full) * 100,
                         "vLLM's hybrid KV-cache manager: the sliding-window layers keep "
                         "only the window before each prompt's end (and before a shared "
                         "prefix's end once a request has found that prefix), so the first "
                         "repeat of a prefix misses; full attention would hit it",
                         "vLLM's hybrid KV-cache manager's sliding-window layers"))
    if unbounded is not None and served is not None and abs(unbounded - served) > tolerance:
        out.append(Cause("eviction", (served - unbounded) * 100,
                         "the KV cache is smaller than the working set: replayed at the "
                         "server's capacity, the prompts lose cached blocks before their "
                         "reuse (see the capacity curve: prefixbench_sweep_kv_blocks)",
                         "the server's KV capacity below the working set"))
    return tuple(_add_up(out, (end - aligned) * 100))


def explain(b: BenchSummary, tolerance: float = TOLERANCE) -> tuple[Cause, ...]:
    """The causes of a cached bench's difference from the formula (empty: none above the
    tolerance, not a cached bench, or no measurement). Their points add up to measured
    (hits/queries) minus the formula (or, without a formula, minus the block-aligned
    expectation); the steps of at most ``tolerance`` each are one ``small`` cause."""
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
    out += expectation_steps(b, tolerance)
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
    start = tutorial if tutorial is not None else aligned
    if not out or start is None:
        return tuple(out)
    return tuple(_add_up(out, (measured - start) * 100))


def _shortfall(b: BenchSummary, gap: float) -> Cause:
    """The cause of a measured ratio below the replayed expectation."""
    if b.evictions_sampled or b.preemptions:
        signs = [f"{v:.0f} {name}" for v, name in ((b.evictions_sampled, "sampled evictions"),
                                                    (b.preemptions, "preemptions")) if v]
        return Cause("eviction", gap * 100, "cached blocks were evicted before their reuse ("
                     + ", ".join(signs) + ")")
    if b.max_concurrency is not None and b.max_concurrency > 1:
        return Cause("race", gap * 100,
                     f"at concurrency {b.max_concurrency} requests that share a prefix "
                     "arrived before the first of them had cached it, and computed it "
                     "too")
    return Cause("unexplained", gap * 100,
                 "below the expectation with no eviction and one request at a time: no "
                 "cause in the data (read the server's journal for this bench's window)")
