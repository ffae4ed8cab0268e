"""prefix_repetition as its server sees it: the counters a bench makes the server count.

vLLM's bench sends ``decode(prefix + suffix)`` as text and the server re-encodes it; with
a byte-level BPE the last prefix token can merge with the first suffix characters, so a
warm request loses its last prefix block. :func:`served_expectation` rebuilds the exact
prompt texts with the host's tokenizer (vLLM's decode -> encode length adjustment
included), encodes them as the server does and replays them: it equals the block-aligned
formula when the tokenizer round-trips exactly and is below it by the junction losses
otherwise, and says by how many blocks (:class:`ServedExpectation`).

The replay uses the server's cache model (``cache_model``: full attention by default, the
hybrid model of :mod:`prefixbench.engines.hybridsim` for a server running vLLM's hybrid
KV-cache manager). The junction counts always compare a full-attention replay with the
(full-attention) formula: they measure what re-encoding costs, not what the hybrid
manager's sliding-window group costs on top.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.prefix_repetition import align_to_server, generate_prompts
from prefixbench.engines.schedconfig import SERIAL, Serving, bench_phases
from prefixbench.engines.tokenizer import Tokenizer
from prefixbench.engines.tokenizer import load as load_tokenizer
from prefixbench.engines.workloads import Workload
from prefixbench.measure.ratios import block_aligned_expected, block_aligned_hit_tokens
from prefixbench.predict.arrivals import ArrivalBand
from prefixbench.predict.benchreplay import BenchReplay, replay_bench
from prefixbench.predict.replay import (
    Prediction,
    concurrency_note,
    replay_curve,
    serving_note,
)

__all__ = ["ServedExpectation", "served_curve", "served_expectation"]


@dataclass(frozen=True)
class ServedExpectation:
    """Prefix-cache counters of one prefix_repetition bench as its server counts them:
    the prompts vLLM sends, re-encoded by the server, replayed in send order.

    ``hit_tokens`` / ``query_tokens`` / ``evicted_blocks`` come from the replay with
    ``capacity_blocks`` (``None``: unbounded). The junction fields compare an unbounded
    replay with the block-aligned formula
    (:func:`prefixbench.measure.ratios.block_aligned_expected`) request by request:
    ``formula_hit_tokens - unbounded_hit_tokens == (lost_blocks - gained_blocks) * block_size``
    with full attention; with the hybrid cache model ``unbounded_hit_tokens`` is the
    hybrid model's and the junction fields stay full attention's.
    """

    hit_tokens: int
    query_tokens: int
    requests: int
    evicted_blocks: int
    formula_hit_tokens: int
    formula_query_tokens: int
    #: Hits with an unbounded cache (equal to ``hit_tokens`` when ``capacity_blocks`` is None).
    unbounded_hit_tokens: int
    #: Measured prompts (pre-requests not counted again) whose server encoding is not the
    #: client's ``prefix_ids + suffix_ids``: re-split where prefix and suffix meet.
    junction_resplits: int
    #: Requests that hit fewer tokens than the formula gives them, and the blocks they lose.
    lost_requests: int
    lost_blocks: int
    #: Blocks hit beyond the formula (a whole-prompt repeat of a prompt the server encodes
    #: to more tokens than ``prompt_len`` can hit one block more).
    gained_blocks: int
    block_size: int
    capacity_blocks: int | None
    bos_tokens: int
    #: ``tokenizer.vocab_size`` as vLLM reads it (the draws' upper bound).
    vocab_size: int
    note: str | None = None
    #: Hits of the same prompts with full attention and an unbounded cache: below it, a
    #: hybrid server's ``unbounded_hit_tokens`` is what its sliding-window group costs.
    full_attention_hit_tokens: int | None = None
    #: Above concurrency 1: the lowest and highest hits over arrival timings
    #: (:func:`prefixbench.predict.arrivals.arrival_band`), ``hit_tokens`` among them.
    band: ArrivalBand | None = None

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def formula_ratio(self) -> float:
        return (self.formula_hit_tokens / self.formula_query_tokens
                if self.formula_query_tokens else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "formula_ratio": self.formula_ratio}


def _formula_hits_per_request(
    keys: Sequence[tuple[int, int]], prompt_len: int, prefix_len: int, bos: int,
    block_size: int,
) -> list[int]:
    """What the block-aligned formula gives each request (summing to its hit_tokens): the
    first request nothing; a repeat of a prompt its whole prompt; the later requests of a
    prefix the shared prefix; a new prefix only the BOS."""
    per_warm = block_aligned_hit_tokens(bos + prefix_len, prompt_len, block_size)
    full_repeat = block_aligned_hit_tokens(prompt_len, prompt_len, block_size)
    per_cold = block_aligned_hit_tokens(bos, prompt_len, block_size)
    seen_prompts: set[tuple[int, int]] = set()
    seen_prefixes: set[int] = set()
    out: list[int] = []
    for i, key in enumerate(keys):
        if i == 0:
            out.append(0)
        elif key in seen_prompts:
            out.append(full_repeat)
        elif key[0] in seen_prefixes:
            out.append(per_warm)
        else:
            out.append(per_cold)
        seen_prompts.add(key)
        seen_prefixes.add(key[0])
    return out


@dataclass(frozen=True)
class _Sent:
    """The prompts of one prefix_repetition bench as the server encodes them."""

    tokenizer: Tokenizer
    specs: list[Any]
    #: The measured prompts, server-encoded, in send order.
    served: list[array[int]]
    #: (prefix, suffix) index of every request, pre-requests included.
    keys: list[tuple[int, int]]
    #: Every request's tokens, pre-requests included.
    prompts: list[array[int]]
    pre: int


def _sent(w: Workload, tokenizer_dir: Path | str | Tokenizer,
          pre_requests: int | None) -> _Sent:
    if w.is_custom:
        raise ValueError(f"workload {w.name}: served_expectation models prefix_repetition "
                         f"only; use predict() for custom prompts")
    pre = w.pre_requests if pre_requests is None else pre_requests
    if pre < 0:
        raise ValueError(f"pre_requests must be >= 0, got {pre}")
    tok = tokenizer_dir if isinstance(tokenizer_dir, Tokenizer) else load_tokenizer(
        Path(tokenizer_dir))
    seed = w.seed if w.seed is not None else 0
    specs = generate_prompts(seed, w.num_prompts, w.prefix_repetition_num_prefixes,
                             prefix_len=w.prefix_repetition_prefix_len,
                             suffix_len=w.prefix_repetition_suffix_len,
                             vocab_size=tok.base_vocab_size,
                             shuffle=not w.disable_shuffle, roundtrip=tok.roundtrip)
    texts = align_to_server([tok.decode(p.tokens) for p in specs],
                            [len(p.tokens) for p in specs], tok.encode_plain, tok.decode)
    served = [array("I", ids) for ids in tok.encode_batch(texts)]
    keys = [(p.prefix_index, p.suffix_index) for p in specs]
    return _Sent(tokenizer=tok, specs=list(specs), served=served,
                 keys=[keys[0]] * pre + keys, prompts=[served[0]] * pre + served, pre=pre)


def served_curve(
    workload: Workload,
    tokenizer_dir: Path | str | Tokenizer,
    block_size: int,
    capacities: Sequence[int],
    cache_model: CacheModel = FULL_ATTENTION,
    *,
    serving: Serving = SERIAL,
) -> tuple[list[Prediction], Prediction]:
    """The hit ratio of one bench of ``workload`` at each of ``capacities`` (usable
    blocks, ascending) and unbounded, with the prompts its server really sees (as
    :func:`served_expectation`, one pass for every capacity), sent as ``serving`` says.
    Returns the bounded predictions and the unbounded one, whose ``cached_blocks`` is
    the working set one at a time (``None`` through the scheduler model)."""
    if block_size <= 0 or any(c <= 0 for c in capacities):
        raise ValueError(f"block_size ({block_size}) and capacities ({list(capacities)}) "
                         f"must be positive")
    sent = _sent(workload, tokenizer_dir, None)
    serving = bench_phases(workload, serving, sent.pre)
    caps: list[int | None] = [*sorted(set(capacities)), None]
    preds = replay_curve(sent.prompts,
                         [workload.prefix_repetition_output_len] * len(sent.prompts),
                         block_size=block_size, capacities=caps, method="served",
                         note=serving_note(workload, serving), cache_model=cache_model,
                         serving=serving)
    return preds[:-1], preds[-1]


def served_expectation(
    workload: Workload,
    tokenizer_dir: Path | str | Tokenizer,
    block_size: int,
    *,
    capacity_blocks: int | None = None,
    pre_requests: int | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
) -> ServedExpectation:
    """The prefix-cache counters a prefix_repetition bench of ``workload`` makes its server
    count, from an empty cache, with the prompts the bench really sends.

    ``tokenizer_dir`` is the tokenizer the bench client and the server use (the run's
    ``<run_dir>/tokenizer`` or the model directory), or a loaded :class:`Tokenizer`.
    Prompts are regenerated as vLLM does
    (:func:`prefixbench.engines.prefix_repetition.generate_prompts` with the workload's
    seed, 0 if unset, ``vocab_size`` = the tokenizer's
    :attr:`~prefixbench.engines.tokenizer.Tokenizer.base_vocab_size` and its decode -> encode
    round trip), shuffled unless ``disable_shuffle``, sent as ``decode(prefix + suffix)``,
    encoded by the server with ``add_special_tokens=True`` (so a BOS the tokenizer adds is
    counted), preceded by ``pre_requests`` copies of the first prompt (default the
    workload's ready check + warmups), and replayed as the bench sends them
    (:func:`prefixbench.predict.benchreplay.replay_bench`: the ready check alone, the
    warmups, then the prompts), one at a time or above concurrency 1 through the
    scheduler model. ``capacity_blocks`` is
    the usable KV capacity (:func:`server_capacity`); ``None`` is unbounded;
    ``cache_model`` the server's cache model (:func:`prefixbench.predict.whatif
    .server_cache_model`). ``serving``: the bench's concurrency and the server's
    scheduler limits; above concurrency 1 the hits (bounded and unbounded) come from the
    scheduler model (:mod:`prefixbench.engines.schedsim`), the junction counts stay the
    one-at-a-time full-attention replay's.

    Raises :class:`ValueError` for a custom workload or bad sizes and
    :class:`~prefixbench.engines.tokenizer.TokenizerError` for an unusable tokenizer.
    """
    w = workload
    if block_size <= 0 or (capacity_blocks is not None and capacity_blocks <= 0):
        raise ValueError(f"block_size ({block_size}) and capacity_blocks "
                         f"({capacity_blocks}) must be positive")
    sent = _sent(w, tokenizer_dir, pre_requests)
    tok, specs, served, keys, prompts, pre = (sent.tokenizer, sent.specs, sent.served,
                                              sent.keys, sent.prompts, sent.pre)
    prefix_len, suffix_len = w.prefix_repetition_prefix_len, w.prefix_repetition_suffix_len
    num_prefixes = w.prefix_repetition_num_prefixes
    vocab = tok.base_vocab_size
    bos, eos = tok.special_tokens_added()
    resplits = sum(1 for p, ids in zip(specs, served, strict=True)
                   if ids[bos:len(ids) - eos].tolist() != list(p.tokens))
    formula = block_aligned_expected(w.num_prompts, num_prefixes, prefix_len, suffix_len,
                                     block_size, pre_requests=pre, bos_tokens=bos)
    expected = _formula_hits_per_request(keys, bos + prefix_len + suffix_len, prefix_len,
                                         bos, block_size)
    free = PrefixCacheSim(block_size)
    got = [free.run(tokens) for tokens in prompts]
    lost = [e - g for e, g in zip(expected, got, strict=True)]
    hits, queries, evicted = free.hit_tokens_total, free.query_tokens_total, 0
    unbounded_hits = hits
    outputs = [w.prefix_repetition_output_len] * len(prompts)

    def replay(capacity: int | None, band: bool) -> BenchReplay:
        return replay_bench(prompts, outputs, workload=w, block_size=block_size,
                            capacity_blocks=capacity, cache_model=cache_model,
                            serving=serving, method="served", band=band, pre_requests=pre)

    band = None
    if serving.scheduled:
        scheduled = replay(None, capacity_blocks is None)
        hits = unbounded_hits = scheduled.prediction.hit_tokens
        band = scheduled.band
    elif cache_model.kind != "full":
        own = cache_model.sim(block_size, None)
        for tokens in prompts:
            own.run(tokens)
        hits = unbounded_hits = own.hit_tokens_total
    if capacity_blocks is not None:
        replayed = replay(capacity_blocks, True)
        bounded = replayed.prediction
        if bounded.ratio is None:
            raise ValueError(bounded.note or "a request does not fit the cache")
        hits, queries, evicted = bounded.hit_tokens, bounded.query_tokens, bounded.evicted_blocks
        band = replayed.band
    notes = [n for n in (f"replayed through the {serving.describe()}"
                         if serving.scheduled else None,
                         serving_note(w, serving) if serving.scheduled
                         else concurrency_note(w),
                         f"the tokenizer adds {eos} token(s) after every prompt; the "
                         f"formula does not count them" if eos else None,
                         f"replayed with the {cache_model.describe()} KV-cache model; the "
                         f"junction counts are full attention's"
                         if cache_model.kind != "full" else None) if n]
    return ServedExpectation(
        hit_tokens=hits, query_tokens=queries, requests=len(prompts), evicted_blocks=evicted,
        formula_hit_tokens=formula.hit_tokens, formula_query_tokens=formula.query_tokens,
        unbounded_hit_tokens=unbounded_hits, junction_resplits=resplits,
        lost_requests=sum(1 for d in lost if d > 0),
        lost_blocks=sum(d for d in lost if d > 0) // block_size,
        gained_blocks=-sum(d for d in lost if d < 0) // block_size,
        block_size=block_size, capacity_blocks=capacity_blocks, bos_tokens=bos,
        vocab_size=vocab, note="; ".join(notes) or None,
        full_attention_hit_tokens=free.hit_tokens_total, band=band)
