"""Seed isolation: a distinct seed for every run on a server, and the check that it holds.

vLLM's ``prefix_repetition`` draws every prefix and suffix from one stream seeded by
``--seed`` (default 0), so two runs with the same seed share the beginning of their
prompts: run on one caching server, the tutorial's no-overlap run finds 3.88% hits left
by the high-overlap run, and its sustained run 75.08% instead of 73.125% (the recorded
fixtures; reproduced token for token by :func:`carry_over`). :func:`plan_seeds` gives
every (workload, repetition) of a server's sequence its own seed, and the *same* seed for
that (workload, repetition) on every configuration, so baseline and cached servers see
identical prompts. Different seeds give unrelated MT19937 streams: a 128-token block
repeating by chance has probability ``vocab_size ** -128``. :func:`carry_over` replays a
planned sequence through :mod:`prefixbench.engines.cachesim` with the prompts regenerated as
vLLM does (:mod:`prefixbench.engines.prefix_repetition`) and reports, per run, the hits that
only exist because of earlier runs: 0 for a valid plan. A custom workload cannot be
isolated this way (its seed only orders the user's prompts; see
:mod:`prefixbench.engines.workloads`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.prefix_repetition import generate_prompts
from prefixbench.engines.workloads import MAX_SEED, Workload, WorkloadError

__all__ = ["CarryOver", "SeedPlan", "carry_over", "plan_seeds"]


@dataclass(frozen=True)
class SeedPlan:
    """Seed of each (workload, repetition); the same on every configuration."""

    seeds: Mapping[tuple[str, int], int]

    def seed(self, workload: str, repetition: int) -> int:
        try:
            return self.seeds[(workload, repetition)]
        except KeyError:
            raise KeyError(f"no seed planned for workload {workload!r} "
                           f"repetition {repetition}") from None

    def for_configuration(self, configuration: str) -> dict[tuple[str, str, int], int]:
        """Keys with the configuration spelled out (values do not depend on it)."""
        return {(configuration, w, r): s for (w, r), s in self.seeds.items()}

    def sequence(self, workloads: Sequence[Workload], repetitions: int) -> list[Workload]:
        """The server's run order (repetition by repetition), each with its seed."""
        return [w.with_seed(self.seed(w.name, rep))
                for rep in range(1, repetitions + 1) for w in workloads]


def plan_seeds(workloads: Sequence[Workload], repetitions: int, base_seed: int) -> SeedPlan:
    """Distinct seeds for every (workload, repetition) run on one server.

    Unseeded workloads get ``base_seed + k`` for the k-th unseeded run in server order
    (repetition 1 of every workload, then repetition 2, ...). A workload with a fixed
    ``seed`` keeps it for repetition 1 and uses ``seed + rep - 1`` after. Any collision
    (two runs, one seed) raises :class:`WorkloadError`: on a caching server the second
    run would be served from the first one's cache. The plan does not depend on the
    configuration, so the same workload and repetition is paired across configurations.
    """
    if repetitions < 1:
        raise WorkloadError(f"repetitions must be >= 1, got {repetitions}")
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise WorkloadError("workload names must be unique")
    seeds: dict[tuple[str, int], int] = {}
    next_seed = base_seed
    for rep in range(1, repetitions + 1):
        for w in workloads:
            if w.seed is not None:
                seed = w.seed + rep - 1
            else:
                seed = next_seed
                next_seed += 1
            seeds[(w.name, rep)] = seed
    bad = [s for s in seeds.values() if not 0 <= s <= MAX_SEED]
    if bad:
        raise WorkloadError(f"seeds out of [0, 2**32): {bad[:3]}; lower base_seed")
    owners: dict[int, tuple[str, int]] = {}
    for key, seed in seeds.items():
        if seed in owners:
            raise WorkloadError(
                f"seed {seed} planned for both {owners[seed]} and {key}: the later run "
                f"would find the earlier one's prompts in the cache")
        owners[seed] = key
    return SeedPlan(seeds=seeds)


# -- isolation check ------------------------------------------------------------------------

@dataclass(frozen=True)
class CarryOver:
    """Hits of one run in a server sequence, against the same run on an empty cache."""

    workload: str
    seed: int
    hit_tokens: int
    hit_tokens_alone: int
    query_tokens: int

    @property
    def carried_over(self) -> int:
        """Hit tokens that exist only because of earlier runs (0 when isolated)."""
        return self.hit_tokens - self.hit_tokens_alone

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


def carry_over(
    sequence: Sequence[Workload],
    *,
    block_size: int,
    vocab_size: int,
    capacity_blocks: int | None = None,
) -> list[CarryOver]:
    """Replay a server's run sequence through the cache model, prompts regenerated as vLLM
    does (exact for tokenizers whose decode -> encode keeps the drawn ids, such as the
    simulated fleet's; the seed structure that causes carry-over is the same for any).

    Each workload must have a seed. Pre-requests (ready check, warmups) are included.
    """
    shared = PrefixCacheSim(block_size, capacity_blocks)
    out: list[CarryOver] = []
    for w in sequence:
        if w.seed is None:
            raise WorkloadError(f"workload {w.name!r} has no seed")
        if w.is_custom:
            raise WorkloadError(f"workload {w.name!r}: carry-over is modelled for "
                                f"prefix_repetition workloads only")
        prompts = [p.tokens for p in generate_prompts(
            w.seed, w.num_prompts, w.prefix_repetition_num_prefixes,
            prefix_len=w.prefix_repetition_prefix_len,
            suffix_len=w.prefix_repetition_suffix_len,
            vocab_size=vocab_size, shuffle=not w.disable_shuffle)]
        stream = [prompts[0]] * w.pre_requests + prompts
        together = shared.replay(stream)
        alone = PrefixCacheSim(block_size, capacity_blocks).replay(stream)
        out.append(CarryOver(workload=w.name, seed=w.seed,
                             hit_tokens=together.total_hit_tokens,
                             hit_tokens_alone=alone.total_hit_tokens,
                             query_tokens=together.query_tokens))
    return out
