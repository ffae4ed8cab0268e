"""What-if: the token hit ratio a workload would get, without a server.

The requests a ``vllm bench serve`` run sends are rebuilt in the order the server gets
them (ready check and warmups first: copies of the first prompt), encoded as the server
encodes them, and replayed through :class:`prefixbench.cachesim.PrefixCacheSim` with the
server's block size and KV capacity (:func:`server_capacity`: ``num_gpu_blocks - 1``, as
block 0 is vLLM's null block; none when vLLM's hybrid KV-cache manager makes the capacity
model inapplicable, :func:`prefixbench.cachesim.capacity_note`). The prediction is
``hits / queries`` over all of those requests: the definition of vLLM's
``prefix_cache_hits`` / ``prefix_cache_queries`` counters, whose deltas the bench records.

* ``prefix_repetition``: the token ids are regenerated from the seed as vLLM draws them
  (:mod:`prefixbench.prefix_repetition`), from a 2**32-word vocabulary, so no tokenizer
  is needed: block hits depend only on which prompts share which tokens, and random
  blocks of a large vocabulary never collide. A tokenizer, when given, only adds the
  BOS (or other tokens) the server puts in front of every prompt. For an unbounded
  cache the result equals :func:`prefixbench.ratios.block_aligned_expected`.
* ``prefix_repetition`` as served (:func:`served_expectation`): vLLM sends
  ``decode(prefix + suffix)`` as text and the server re-encodes it; with a byte-level BPE
  the last prefix token can merge with the first suffix characters, so a warm request
  loses its last prefix block. This rebuilds the exact prompt texts with the host's
  tokenizer (vLLM's decode -> encode length adjustment included), encodes them as the
  server does and replays them; it equals the formula when the tokenizer round-trips
  exactly and is below it by the junction losses otherwise.
* ``custom``: the prepared file (:mod:`prefixbench.custom`) in vLLM's send order,
  encoded with the tokenizer (:mod:`prefixbench.tokenizer`).

Limits: requests are replayed one at a time (concurrency 1). At higher concurrency a
request can be scheduled before another one sharing its prefix has filled the cache,
so the server can count fewer hits than predicted; the :attr:`Prediction.note` says so.
With a bounded capacity, each request holds its decode blocks (``output_tokens``) while
it runs, as the model assumes every request generates all of them (``ignore_eos``).

:func:`predict` never raises for missing inputs: it returns a :class:`Prediction` with
``ratio=None`` and a ``note`` saying what is missing.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from prefixbench.cachesim import CapacityError, PrefixCacheSim, capacity_note, usable_blocks
from prefixbench.custom import (
    CustomPromptsError,
    PreparedPrompts,
    prepare,
    prepare_file,
    texts_in_order,
)
from prefixbench.prefix_repetition import LegacyNumpyRandom, generate_prompts, prefix_order
from prefixbench.ratios import block_aligned_expected, block_aligned_hit_tokens
from prefixbench.tokenizer import Tokenizer, TokenizerError
from prefixbench.tokenizer import load as load_tokenizer
from prefixbench.workloads import Workload, WorkloadError

if TYPE_CHECKING:
    from prefixbench.metrics import CacheConfig

__all__ = [
    "Prediction",
    "ServedExpectation",
    "predict",
    "predict_prefix_repetition",
    "predict_prepared",
    "prefix_repetition_tokens",
    "replay_requests",
    "served_expectation",
    "server_capacity",
]

#: Token ids are drawn from this many words: every 32-bit value, no rejection sampling.
VOCAB: Final = 1 << 32
#: Above this many prompt tokens a prefix_repetition replay would need gigabytes; an
#: unbounded cache then falls back to the (exact) formula.
MAX_REPLAY_TOKENS: Final = 250_000_000


@dataclass(frozen=True)
class Prediction:
    """A predicted token hit ratio, or why there is none (``ratio`` None, ``note``)."""

    ratio: float | None
    hit_tokens: int = 0
    query_tokens: int = 0
    requests: int = 0
    evicted_blocks: int = 0
    method: str = "none"
    block_size: int | None = None
    capacity_blocks: int | None = None
    #: prefix_repetition only: the block-aligned formula (unbounded cache).
    formula_ratio: float | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _concurrency_note(workload: Workload | None) -> str | None:
    if workload is not None and workload.max_concurrency != 1:
        return (f"replayed one request at a time; at concurrency "
                f"{workload.max_concurrency or 'unbounded'} requests sharing a prefix can "
                f"overlap and the server may count fewer hits")
    return None


def replay_requests(
    prompts: Sequence[array[int]],
    output_lens: Sequence[int],
    *,
    block_size: int,
    capacity_blocks: int | None,
    method: str,
    note: str | None = None,
) -> Prediction:
    """Replay requests (token id arrays, in send order) through a fresh cache."""
    sim = PrefixCacheSim(block_size, capacity_blocks)
    hits = 0
    run = sim.run
    try:
        for tokens, out in zip(prompts, output_lens, strict=True):
            hits += run(tokens, out if capacity_blocks is not None else 0)
    except CapacityError as exc:
        return Prediction(ratio=None, method=method, block_size=block_size,
                          capacity_blocks=capacity_blocks,
                          note=f"a request does not fit the cache: {exc}")
    queries = sim.query_tokens_total
    return Prediction(ratio=hits / queries if queries else 0.0, hit_tokens=hits,
                      query_tokens=queries, requests=len(prompts),
                      evicted_blocks=sim.evicted_blocks, method=method,
                      block_size=block_size, capacity_blocks=capacity_blocks, note=note)


def prefix_repetition_tokens(workload: Workload, *, bos: Sequence[int] = ()
                             ) -> list[array[int]]:
    """The prompts of a prefix_repetition run in send order (pre-requests first), drawn
    as vLLM draws them with a 2**32-word vocabulary (one 32-bit word per token)."""
    w = workload
    seed = w.seed if w.seed is not None else 0
    gen = LegacyNumpyRandom(seed)
    ppp = w.prompts_per_prefix
    head = array("I", bos)
    built: dict[tuple[int, int], array[int]] = {}
    for p in range(w.prefix_repetition_num_prefixes):
        prefix = head + gen.words(w.prefix_repetition_prefix_len)
        for j in range(ppp):
            built[(p, j)] = prefix + gen.words(w.prefix_repetition_suffix_len)
    order = prefix_order(seed, w.num_prompts, w.prefix_repetition_num_prefixes,
                         shuffle=not w.disable_shuffle)
    prompts = [built[key] for key in order]
    return [prompts[0]] * w.pre_requests + prompts


def predict_prefix_repetition(
    workload: Workload,
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    bos_tokens: int = 0,
) -> Prediction:
    """Replay a prefix_repetition workload; the formula alongside."""
    w = workload
    formula = block_aligned_expected(
        w.num_prompts, w.prefix_repetition_num_prefixes, w.prefix_repetition_prefix_len,
        w.prefix_repetition_suffix_len, block_size, pre_requests=w.pre_requests,
        bos_tokens=bos_tokens)
    total = formula.requests * (w.prompt_len + bos_tokens)
    if total > MAX_REPLAY_TOKENS:
        if capacity_blocks is None:
            return Prediction(
                ratio=formula.ratio, hit_tokens=formula.hit_tokens,
                query_tokens=formula.query_tokens, requests=formula.requests,
                method="block-aligned formula", block_size=block_size,
                formula_ratio=formula.ratio,
                note=f"{total:,} prompt tokens: too many to replay; the formula is exact "
                     f"for an unbounded cache")
        return Prediction(ratio=None, method="none", block_size=block_size,
                          capacity_blocks=capacity_blocks, formula_ratio=formula.ratio,
                          note=f"{total:,} prompt tokens: too many to replay in memory")
    # The same ids in front of every prompt stand for the server's BOS: values do not
    # matter, only that every prompt shares them.
    bos = list(range(bos_tokens))
    prompts = prefix_repetition_tokens(w, bos=bos)
    pred = replay_requests(
        prompts, [w.prefix_repetition_output_len] * len(prompts), block_size=block_size,
        capacity_blocks=capacity_blocks, method="cachesim replay, prefix_repetition "
        "regenerated from the seed", note=_concurrency_note(w))
    return Prediction(**{**pred.to_dict(), "formula_ratio": formula.ratio})


def predict_prepared(
    prepared: PreparedPrompts,
    tokenizer: Tokenizer,
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    pre_requests: int = 0,
    workload: Workload | None = None,
) -> Prediction:
    """Replay prepared custom prompts in vLLM's send order, encoded like the server."""
    texts, outs = texts_in_order(prepared, seed, shuffle=shuffle, pre_requests=pre_requests)
    prompts = [array("I", ids) for ids in tokenizer.encode_batch(texts)]
    return replay_requests(prompts, outs, block_size=block_size,
                           capacity_blocks=capacity_blocks,
                           method="cachesim replay, custom prompts tokenized",
                           note=_concurrency_note(workload))


def server_capacity(cache_config: CacheConfig | None) -> tuple[int | None, str | None]:
    """The capacity to model for a server, from its ``vllm:cache_config_info``, and a note
    for the report when the capacity model does not apply.

    ``(num_gpu_blocks - 1, None)`` normally (block 0 is vLLM's null block, never usable);
    ``(None, note)`` (an unbounded cache) when vLLM's hybrid KV-cache manager is on
    (:func:`prefixbench.cachesim.capacity_note`); ``(None, None)`` when the server
    reported no capacity.
    """
    if cache_config is None:
        return None, None
    note = capacity_note(cache_config.labels)
    if note is not None:
        return None, note
    return usable_blocks(cache_config.num_gpu_blocks), None


def _none(note: str, block_size: int, capacity_blocks: int | None) -> Prediction:
    return Prediction(ratio=None, block_size=block_size, capacity_blocks=capacity_blocks,
                      note=note)


def predict(
    workload: Workload,
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    prompts_file: Path | None = None,
    tokenizer_dir: Path | None = None,
    cache_config: CacheConfig | None = None,
) -> Prediction:
    """The predicted hit ratio of one bench of ``workload`` on an empty cache.

    ``capacity_blocks`` is the usable capacity (``None``: unbounded). Give the server's
    ``cache_config`` instead to take it from ``vllm:cache_config_info`` with
    :func:`server_capacity` (``num_gpu_blocks - 1``; unbounded, with the reason in the
    ``note``, when the hybrid KV-cache manager makes the capacity model inapplicable).

    ``prompts_file``: a custom workload's prepared file (``<run_dir>/prompts/<name>.jsonl``);
    without it the workload's own ``dataset_path`` is prepared (chat lines need the
    tokenizer). ``tokenizer_dir``: a directory with ``tokenizer.json`` (the run's
    ``<run_dir>/tokenizer``); needed for custom workloads, optional for
    prefix_repetition (it only adds the server's BOS). The workload's seed (0 if unset,
    vLLM's default), shuffle, num_prompts, ready check and warmups are honoured.
    Missing or unreadable inputs give ``ratio=None`` and a ``note``; never raises for them.
    """
    if cache_config is None or capacity_blocks is not None:
        return _predict(workload, block_size=block_size, capacity_blocks=capacity_blocks,
                        prompts_file=prompts_file, tokenizer_dir=tokenizer_dir)
    capacity, cap_note = server_capacity(cache_config)
    pred = _predict(workload, block_size=block_size, capacity_blocks=capacity,
                    prompts_file=prompts_file, tokenizer_dir=tokenizer_dir)
    if cap_note is None:
        return pred
    note = cap_note if pred.note is None else f"{pred.note}; {cap_note}"
    return Prediction(**{**pred.to_dict(), "note": note})


def _predict(
    workload: Workload,
    *,
    block_size: int,
    capacity_blocks: int | None,
    prompts_file: Path | None,
    tokenizer_dir: Path | None,
) -> Prediction:
    if block_size <= 0 or (capacity_blocks is not None and capacity_blocks <= 0):
        return _none(f"block_size ({block_size}) and capacity_blocks ({capacity_blocks}) "
                     f"must be positive", block_size, capacity_blocks)
    tokenizer: Tokenizer | None = None
    if tokenizer_dir is not None:
        try:
            tokenizer = load_tokenizer(Path(tokenizer_dir))
        except TokenizerError as exc:
            if workload.is_custom:
                return _none(f"no tokenizer: {exc}", block_size, capacity_blocks)
    if not workload.is_custom:
        bos = tokenizer.special_tokens_added()[0] if tokenizer is not None else 0
        try:
            return predict_prefix_repetition(workload, block_size=block_size,
                                             capacity_blocks=capacity_blocks,
                                             bos_tokens=bos)
        except (WorkloadError, ValueError) as exc:
            return _none(f"cannot replay: {exc}", block_size, capacity_blocks)
    if tokenizer is None:
        return _none("no tokenizer directory: custom prompts cannot be counted in tokens",
                     block_size, capacity_blocks)
    try:
        if prompts_file is not None:
            prepared = prepare_file(Path(prompts_file), num_prompts=workload.num_prompts,
                                    custom_output_len=workload.custom_output_len,
                                    tokenizer=tokenizer)
        else:
            prepared = prepare(workload, tokenizer=tokenizer)
    except CustomPromptsError as exc:
        return _none(f"prompts unavailable: {exc}", block_size, capacity_blocks)
    seed = workload.seed if workload.seed is not None else 0
    return predict_prepared(prepared, tokenizer, block_size=block_size,
                            capacity_blocks=capacity_blocks, seed=seed,
                            shuffle=not workload.disable_shuffle,
                            pre_requests=workload.pre_requests, workload=workload)


# -- prefix_repetition as the server sees it ------------------------------------------------


@dataclass(frozen=True)
class ServedExpectation:
    """Prefix-cache counters of one prefix_repetition bench as its server counts them:
    the prompts vLLM sends, re-encoded by the server, replayed in send order.

    ``hit_tokens`` / ``query_tokens`` / ``evicted_blocks`` come from the replay with
    ``capacity_blocks`` (``None``: unbounded). The junction fields compare an unbounded
    replay with the block-aligned formula (:func:`prefixbench.ratios.block_aligned_expected`)
    request by request: ``formula_hit_tokens - unbounded_hit_tokens ==
    (lost_blocks - gained_blocks) * block_size``.
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


def served_expectation(
    workload: Workload,
    tokenizer_dir: Path | str | Tokenizer,
    block_size: int,
    *,
    capacity_blocks: int | None = None,
    pre_requests: int | None = None,
) -> ServedExpectation:
    """The prefix-cache counters a prefix_repetition bench of ``workload`` makes its server
    count, from an empty cache, with the prompts the bench really sends.

    ``tokenizer_dir`` is the tokenizer the bench client and the server use (the run's
    ``<run_dir>/tokenizer`` or the model directory), or a loaded :class:`Tokenizer`.
    Prompts are regenerated as vLLM does (:func:`prefixbench.prefix_repetition.generate_prompts`
    with the workload's seed, 0 if unset, ``vocab_size`` = the tokenizer's
    :attr:`~prefixbench.tokenizer.Tokenizer.base_vocab_size` and its decode -> encode
    round trip), shuffled unless ``disable_shuffle``, sent as ``decode(prefix + suffix)``,
    encoded by the server with ``add_special_tokens=True`` (so a BOS the tokenizer adds is
    counted), preceded by ``pre_requests`` copies of the first prompt (default the
    workload's ready check + warmups), and replayed one at a time. ``capacity_blocks`` is
    the usable KV capacity (:func:`server_capacity`); ``None`` is unbounded.

    Raises :class:`ValueError` for a custom workload or bad sizes and
    :class:`~prefixbench.tokenizer.TokenizerError` for an unusable tokenizer.
    """
    w = workload
    if w.is_custom:
        raise ValueError(f"workload {w.name}: served_expectation models prefix_repetition "
                         f"only; use predict() for custom prompts")
    if block_size <= 0 or (capacity_blocks is not None and capacity_blocks <= 0):
        raise ValueError(f"block_size ({block_size}) and capacity_blocks "
                         f"({capacity_blocks}) must be positive")
    pre = w.pre_requests if pre_requests is None else pre_requests
    if pre < 0:
        raise ValueError(f"pre_requests must be >= 0, got {pre}")
    tok = tokenizer_dir if isinstance(tokenizer_dir, Tokenizer) else load_tokenizer(
        Path(tokenizer_dir))
    seed = w.seed if w.seed is not None else 0
    prefix_len, suffix_len = w.prefix_repetition_prefix_len, w.prefix_repetition_suffix_len
    num_prefixes = w.prefix_repetition_num_prefixes
    vocab = tok.base_vocab_size
    specs = generate_prompts(seed, w.num_prompts, num_prefixes, prefix_len=prefix_len,
                             suffix_len=suffix_len, vocab_size=vocab,
                             shuffle=not w.disable_shuffle, roundtrip=tok.roundtrip)
    served = [array("I", ids) for ids in tok.encode_batch([tok.decode(p.tokens)
                                                           for p in specs])]
    bos, eos = tok.special_tokens_added()
    resplits = sum(1 for p, ids in zip(specs, served, strict=True)
                   if ids[bos:len(ids) - eos].tolist() != list(p.tokens))
    keys = [(p.prefix_index, p.suffix_index) for p in specs]
    keys = [keys[0]] * pre + keys
    prompts = [served[0]] * pre + served
    formula = block_aligned_expected(w.num_prompts, num_prefixes, prefix_len, suffix_len,
                                     block_size, pre_requests=pre, bos_tokens=bos)
    expected = _formula_hits_per_request(keys, bos + prefix_len + suffix_len, prefix_len,
                                         bos, block_size)
    free = PrefixCacheSim(block_size)
    got = [free.run(tokens) for tokens in prompts]
    lost = [e - g for e, g in zip(expected, got, strict=True)]
    hits, queries, evicted = free.hit_tokens_total, free.query_tokens_total, 0
    if capacity_blocks is not None:
        bounded = replay_requests(prompts, [w.prefix_repetition_output_len] * len(prompts),
                                  block_size=block_size, capacity_blocks=capacity_blocks,
                                  method="served")
        if bounded.ratio is None:
            raise ValueError(bounded.note or "a request does not fit the cache")
        hits, queries, evicted = bounded.hit_tokens, bounded.query_tokens, bounded.evicted_blocks
    notes = [n for n in (_concurrency_note(w),
                         f"the tokenizer adds {eos} token(s) after every prompt; the "
                         f"formula does not count them" if eos else None) if n]
    return ServedExpectation(
        hit_tokens=hits, query_tokens=queries, requests=len(prompts), evicted_blocks=evicted,
        formula_hit_tokens=formula.hit_tokens, formula_query_tokens=formula.query_tokens,
        unbounded_hit_tokens=free.hit_tokens_total, junction_resplits=resplits,
        lost_requests=sum(1 for d in lost if d > 0),
        lost_blocks=sum(d for d in lost if d > 0) // block_size,
        gained_blocks=-sum(d for d in lost if d < 0) // block_size,
        block_size=block_size, capacity_blocks=capacity_blocks, bos_tokens=bos,
        vocab_size=vocab, note="; ".join(notes) or None)
