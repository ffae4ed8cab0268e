"""What-if: the token hit ratio a workload would get, without a server.

The requests a ``vllm bench serve`` run sends are rebuilt in the order the server gets
them (ready check and warmups first: copies of the first prompt), encoded as the server
encodes them, and replayed through the server's cache model with its block size and KV
capacity (:func:`server_cache_model`: ``num_gpu_blocks - 1``, as block 0 is vLLM's null
block). The cache model is :class:`prefixbench.engines.cachesim.PrefixCacheSim` for full
attention and :class:`prefixbench.engines.hybridsim.HybridCacheSim` when the server runs
vLLM's hybrid KV-cache manager (:func:`prefixbench.engines.kvcapacity.kv_cache_kind`; gpt-oss's
sliding-window + full-attention layers); when the kind cannot be told (Mamba layers, or a
sliding window without group-aware capacity labels) full attention with an unbounded cache
is replayed and the note says so. The prediction is
``hits / queries`` over all of those requests: the definition of vLLM's
``prefix_cache_hits`` / ``prefix_cache_queries`` counters, whose deltas the bench records.

* ``prefix_repetition``: the token ids are regenerated from the seed as vLLM draws them
  (:mod:`prefixbench.engines.prefix_repetition`), from a 2**32-word vocabulary, so no tokenizer
  is needed: block hits depend only on which prompts share which tokens, and random
  blocks of a large vocabulary never collide. A tokenizer, when given, only adds the
  BOS (or other tokens) the server puts in front of every prompt. For an unbounded
  cache the result equals :func:`prefixbench.measure.ratios.block_aligned_expected`.
* ``prefix_repetition`` as served: :mod:`prefixbench.predict.served` (the prompt texts vLLM
  sends, re-encoded by the server, junction losses counted).
* ``custom``: the prepared file (:mod:`prefixbench.engines.custom`) in vLLM's send order,
  encoded with the tokenizer (:mod:`prefixbench.engines.tokenizer`).

Custom prompts are read as a stream and encoded on worker threads
(:func:`prefixbench.predict.replay.replay_sent`); the result does not depend on the
number of workers.

Concurrency: by default requests are replayed one at a time (concurrency 1), and the
:attr:`Prediction.note` says so when the workload runs at a higher one. Given a
:class:`prefixbench.engines.schedconfig.Serving` above concurrency 1, they are
replayed through the model of vLLM's scheduler (:mod:`prefixbench.engines.schedsim`;
:mod:`prefixbench.engines.schedhybrid` for the hybrid cache model): the client keeps
that many requests in flight and the server admits, chunks, decodes and preempts them
step by step with its ``max_num_seqs`` and ``max_num_batched_tokens``. (vLLM caches a
block when the step computing it is scheduled, so with full attention and an unbounded
cache concurrency changes no hit; with a bounded one, requests in flight hold more
blocks and the cache evicts more.)
With a bounded capacity, each request holds its decode blocks (``output_tokens``) while
it runs, as the model assumes every request generates all of them (``ignore_eos``).

:func:`predict` never raises for missing inputs: it returns a :class:`Prediction` with
``ratio=None`` and a ``note`` saying what is missing.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel, from_model_dir
from prefixbench.engines.custom import PreparedPrompts
from prefixbench.engines.custom_index import PromptIndex, index_file
from prefixbench.engines.custom_read import CustomPromptsError
from prefixbench.engines.hybridsim import DEFAULT_SLIDING_WINDOW
from prefixbench.engines.kvcapacity import capacity_note, kv_cache_kind, usable_blocks
from prefixbench.engines.prefix_repetition import LegacyNumpyRandom, prefix_order
from prefixbench.engines.progress import Progress
from prefixbench.engines.schedconfig import SERIAL, Serving, bench_phases
from prefixbench.engines.tokenizer import Tokenizer, TokenizerError
from prefixbench.engines.tokenizer import load as load_tokenizer
from prefixbench.engines.workloads import Workload, WorkloadError
from prefixbench.measure.ratios import block_aligned_expected
from prefixbench.predict.benchreplay import bench_band, replay_bench
from prefixbench.predict.replay import (
    Kept,
    Prediction,
    replay_sent,
    serving_note,
)

if TYPE_CHECKING:
    from prefixbench.measure.metrics import CacheConfig

__all__ = [
    "Prediction",
    "predict",
    "predict_indexed",
    "predict_prefix_repetition",
    "predict_prepared",
    "prefix_repetition_tokens",
    "server_cache_model",
    "server_capacity",
    "serving_note",
]

#: Token ids are drawn from this many words: every 32-bit value, no rejection sampling.
VOCAB: Final = 1 << 32
#: Above this many prompt tokens a prefix_repetition replay would need gigabytes; an
#: unbounded cache then falls back to the (exact) formula.
MAX_REPLAY_TOKENS: Final = 250_000_000


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
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    band: bool = True,
) -> Prediction:
    """Replay a prefix_repetition workload (as ``serving`` sends it); the formula alongside
    (the formula is full attention's with an unbounded cache, which concurrency does not
    change: with the hybrid cache model or a bounded one the two can differ). Above
    concurrency 1 also the range over arrival timings, unless not ``band``."""
    w = workload
    formula = block_aligned_expected(
        w.num_prompts, w.prefix_repetition_num_prefixes, w.prefix_repetition_prefix_len,
        w.prefix_repetition_suffix_len, block_size, pre_requests=w.pre_requests,
        bos_tokens=bos_tokens)
    total = formula.requests * (w.prompt_len + bos_tokens)
    if total > MAX_REPLAY_TOKENS:
        if capacity_blocks is None and cache_model.kind == "full":
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
    outputs = [w.prefix_repetition_output_len] * len(prompts)
    pred = replay_bench(
        prompts, outputs, workload=w, block_size=block_size,
        capacity_blocks=capacity_blocks, method="cachesim replay, prefix_repetition "
        "regenerated from the seed", note=serving_note(w, serving), cache_model=cache_model,
        serving=serving, band=band).prediction
    return replace(pred, formula_ratio=formula.ratio)


#: Prompt tokens a prompts file's replay keeps for the range over arrival timings (23
#: to 33 replays more, about 0.1 s per million tokens each): above it, no range.
BAND_MAX_TOKENS: Final = 5_000_000


def _banded(pred: Prediction, kept: Kept | None, workload: Workload | None, *,
            block_size: int, capacity_blocks: int | None, cache_model: CacheModel,
            serving: Serving) -> Prediction:
    """``pred`` with the range over arrival timings of the requests ``kept`` (above
    concurrency 1; :func:`prefixbench.predict.arrivals.arrival_band`), or why none."""
    if kept is None or pred.ratio is None or not serving.scheduled:
        return pred
    if kept.overflow:
        return replace(pred, band_note=f"not computed: more than {kept.budget:,} prompt "
                                       f"tokens")
    timed = bench_band(kept.prompts, kept.outputs, workload=workload,
                       block_size=block_size, capacity_blocks=capacity_blocks,
                       cache_model=cache_model, serving=serving)
    return replace(pred, band=(timed.lo, timed.hi), band_note=timed.describe())


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
    workers: int | None = None,
    progress: Progress | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    band: bool = True,
) -> Prediction:
    """Replay prepared custom prompts in vLLM's send order, encoded like the server.
    ``workers``: threads that encode (default
    :func:`prefixbench.predict.replay.default_workers`)."""
    texts = prepared.texts
    kept = Kept(BAND_MAX_TOKENS) if band and serving.scheduled else None
    pred = replay_sent(prepared.sent(seed, shuffle=shuffle), list(map(len, texts)),
                       prepared.output_tokens, lambda job: [texts[i] for i in job],
                       tokenizer, block_size=block_size, capacity_blocks=capacity_blocks,
                       pre_requests=pre_requests, workers=workers, progress=progress,
                       note=serving_note(workload, serving), cache_model=cache_model,
                       serving=serving, keep=kept)
    return _banded(pred, kept, workload, block_size=block_size,
                   capacity_blocks=capacity_blocks, cache_model=cache_model, serving=serving)


def predict_indexed(
    index: PromptIndex,
    tokenizer: Tokenizer,
    *,
    block_size: int,
    capacity_blocks: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    pre_requests: int = 0,
    workload: Workload | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    band: bool = True,
) -> Prediction:
    """:func:`predict_prepared` for an indexed file
    (:func:`prefixbench.engines.custom_index.index_file`): the prompts are read back from the
    file as they are sent, never all held at once. Raises
    :class:`~prefixbench.engines.custom_read.CustomPromptsError` if the file changed since."""
    kept = Kept(BAND_MAX_TOKENS) if band and serving.scheduled else None
    with index.reader(tokenizer) as reader:
        pred = replay_sent(index.sent(seed, shuffle=shuffle), index.lengths,
                           index.output_tokens, reader.texts, tokenizer,
                           block_size=block_size, capacity_blocks=capacity_blocks,
                           pre_requests=pre_requests, workers=workers, progress=progress,
                           note=serving_note(workload, serving),
                           cache_model=cache_model, serving=serving, keep=kept)
    return _banded(pred, kept, workload, block_size=block_size,
                   capacity_blocks=capacity_blocks, cache_model=cache_model, serving=serving)


def server_cache_model(cache_config: CacheConfig | None,
                       ) -> tuple[int | None, CacheModel, str | None]:
    """The capacity and cache model to replay for a server, from its
    ``vllm:cache_config_info``, and a note for the report unless the server is plain full
    attention.

    * full attention (:func:`prefixbench.engines.kvcapacity.kv_cache_kind` ``"full"``):
      ``(num_gpu_blocks - 1, FULL_ATTENTION, None)`` (block 0 is vLLM's null block);
    * vLLM's hybrid KV-cache manager (``"hybrid"``): ``(num_gpu_blocks - 1``, the hybrid
      model, ``note)``. vLLM 0.32 reports ``sliding_window="None"`` for gpt-oss, so the
      window is the label's when it is a number and gpt-oss's 128 otherwise, and the
      note says which; prefill is modelled in one chunk (the labels do not carry the
      server's ``--max-num-batched-tokens``);
    * Mamba layers or an unknown kind: ``(None, FULL_ATTENTION, note)``: an unbounded
      full-attention cache, and the note says the model may not apply;
    * no ``cache_config_info``: ``(None, FULL_ATTENTION, None)``.
    """
    if cache_config is None:
        return None, FULL_ATTENTION, None
    kind = kv_cache_kind(cache_config.labels)
    note = capacity_note(cache_config.labels)
    if kind == "full":
        return usable_blocks(cache_config.num_gpu_blocks), FULL_ATTENTION, note
    if kind == "hybrid":
        label = cache_config.labels.get("sliding_window", "")
        window = int(label) if label.isdigit() and int(label) >= 2 else None
        said = (f"sliding window {window} (cache_config_info)" if window is not None
                else f"sliding window {DEFAULT_SLIDING_WINDOW} assumed (gpt-oss's; "
                     f"cache_config_info does not report it)")
        return (usable_blocks(cache_config.num_gpu_blocks),
                CacheModel("hybrid", sliding_window=window),
                f"{note}; {said}" if note else said)
    return None, FULL_ATTENTION, (f"{note}; replayed as full attention with an unbounded "
                                  f"cache" if note else None)


def server_capacity(cache_config: CacheConfig | None) -> tuple[int | None, str | None]:
    """The capacity to model for a server and the note of :func:`server_cache_model`
    (which also says which cache model applies)."""
    capacity, _, note = server_cache_model(cache_config)
    return capacity, note


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
    workers: int | None = None,
    progress: Progress | None = None,
    cache_model: CacheModel | None = None,
    serving: Serving = SERIAL,
    band: bool = True,
) -> Prediction:
    """The predicted hit ratio of one bench of ``workload`` on an empty cache.

    ``capacity_blocks`` is the usable capacity (``None``: unbounded) and ``cache_model``
    the cache model (default: the one the model's ``config.json`` beside the tokenizer
    implies, :func:`prefixbench.engines.cachemodel.from_model_dir`, else full attention).
    Give the server's ``cache_config`` instead to take both from
    ``vllm:cache_config_info`` with :func:`server_cache_model` (``num_gpu_blocks - 1``;
    the hybrid model when the server runs vLLM's hybrid KV-cache manager; the note says
    so, or why the kind is unknown).

    ``prompts_file``: a custom workload's prepared file (``<run_dir>/prompts/<name>.jsonl``);
    without it the workload's own ``dataset_path`` is prepared (chat lines need the
    tokenizer). ``tokenizer_dir``: a directory with ``tokenizer.json`` (the run's
    ``<run_dir>/tokenizer``); needed for custom workloads, optional for
    prefix_repetition (it only adds the server's BOS). The workload's seed (0 if unset,
    vLLM's default), shuffle, num_prompts, ready check and warmups are honoured.
    Missing or unreadable inputs give ``ratio=None`` and a ``note``; never raises for them.

    Custom prompts only: ``workers`` threads encode them (default
    :func:`prefixbench.predict.replay.default_workers`; the prediction is the same for any
    number), and ``progress`` (e.g. a
    :class:`prefixbench.engines.progress.ProgressBar`) is told how far reading and encoding are.

    ``serving``: the client's concurrency and the server's ``max_num_seqs`` /
    ``max_num_batched_tokens`` (default one request at a time). Above concurrency 1 the
    requests go through the scheduler model (:mod:`prefixbench.engines.schedsim`): the
    workload's ready check one at a time, its warmups, then its prompts, each phase
    finished before the next; with the full-attention or the hybrid cache model, and
    (unless not ``band``) the range over arrival timings
    (:attr:`~prefixbench.predict.replay.Prediction.band`).
    """
    serving = bench_phases(workload, serving)
    if cache_config is None or capacity_blocks is not None:
        return _predict(workload, block_size=block_size, capacity_blocks=capacity_blocks,
                        prompts_file=prompts_file, tokenizer_dir=tokenizer_dir,
                        workers=workers, progress=progress,
                        cache_model=(cache_model or (from_model_dir(tokenizer_dir)
                                                     or FULL_ATTENTION).chunked(
                                                         serving.max_num_batched_tokens)),
                        serving=serving, band=band)
    capacity, model, cap_note = server_cache_model(cache_config)
    pred = _predict(workload, block_size=block_size, capacity_blocks=capacity,
                    prompts_file=prompts_file, tokenizer_dir=tokenizer_dir,
                    workers=workers, progress=progress,
                    cache_model=cache_model or model.chunked(serving.max_num_batched_tokens),
                    serving=serving, band=band)
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
    workers: int | None = None,
    progress: Progress | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    band: bool = True,
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
                                             bos_tokens=bos, cache_model=cache_model,
                                             serving=serving, band=band)
        except (WorkloadError, ValueError) as exc:
            return _none(f"cannot replay: {exc}", block_size, capacity_blocks)
    if tokenizer is None:
        return _none("no tokenizer directory: custom prompts cannot be counted in tokens",
                     block_size, capacity_blocks)
    if workers is not None and workers < 1:
        return _none(f"workers must be >= 1, got {workers}", block_size, capacity_blocks)
    path = prompts_file if prompts_file is not None else workload.dataset_path
    seed = workload.seed if workload.seed is not None else 0
    try:
        if path is None:
            raise CustomPromptsError(f"workload {workload.name!r} has no dataset_path")
        index = index_file(Path(path), num_prompts=workload.num_prompts,
                           custom_output_len=workload.custom_output_len,
                           tokenizer=tokenizer, progress=progress)
        return predict_indexed(index, tokenizer, block_size=block_size,
                               capacity_blocks=capacity_blocks, seed=seed,
                               shuffle=not workload.disable_shuffle,
                               pre_requests=workload.pre_requests, workload=workload,
                               workers=workers, progress=progress, cache_model=cache_model,
                               serving=serving, band=band)
    except CustomPromptsError as exc:
        return _none(f"prompts unavailable: {exc}", block_size, capacity_blocks)
