"""What-if: the token hit ratio a workload would get, without a server.

The requests a ``vllm bench serve`` run sends are rebuilt in the order the server gets
them (ready check and warmups first: copies of the first prompt), encoded as the server
encodes them, and replayed through :class:`prefixbench.predict.cachesim.PrefixCacheSim` with the
server's block size and KV capacity (:func:`server_capacity`: ``num_gpu_blocks - 1``, as
block 0 is vLLM's null block; none when vLLM's hybrid KV-cache manager makes the capacity
model inapplicable, :func:`prefixbench.predict.kvcapacity.capacity_note`). The prediction is
``hits / queries`` over all of those requests: the definition of vLLM's
``prefix_cache_hits`` / ``prefix_cache_queries`` counters, whose deltas the bench records.

* ``prefix_repetition``: the token ids are regenerated from the seed as vLLM draws them
  (:mod:`prefixbench.bench.prefix_repetition`), from a 2**32-word vocabulary, so no tokenizer
  is needed: block hits depend only on which prompts share which tokens, and random
  blocks of a large vocabulary never collide. A tokenizer, when given, only adds the
  BOS (or other tokens) the server puts in front of every prompt. For an unbounded
  cache the result equals :func:`prefixbench.measure.ratios.block_aligned_expected`.
* ``prefix_repetition`` as served: :mod:`prefixbench.predict.served` (the prompt texts vLLM
  sends, re-encoded by the server, junction losses counted).
* ``custom``: the prepared file (:mod:`prefixbench.bench.custom`) in vLLM's send order,
  encoded with the tokenizer (:mod:`prefixbench.predict.tokenizer`).

Custom prompts are read as a stream and encoded on worker threads
(:func:`prefixbench.predict.replay.replay_sent`); the result does not depend on the
number of workers.

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
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prefixbench.bench.custom import PreparedPrompts
from prefixbench.bench.custom_index import PromptIndex, index_file
from prefixbench.bench.custom_read import CustomPromptsError
from prefixbench.bench.prefix_repetition import LegacyNumpyRandom, prefix_order
from prefixbench.bench.workloads import Workload, WorkloadError
from prefixbench.measure.ratios import block_aligned_expected
from prefixbench.predict.kvcapacity import capacity_note, usable_blocks
from prefixbench.predict.progress import Progress
from prefixbench.predict.replay import Prediction, concurrency_note, replay_requests, replay_sent
from prefixbench.predict.tokenizer import Tokenizer, TokenizerError
from prefixbench.predict.tokenizer import load as load_tokenizer

if TYPE_CHECKING:
    from prefixbench.measure.metrics import CacheConfig

__all__ = [
    "Prediction",
    "predict",
    "predict_indexed",
    "predict_prefix_repetition",
    "predict_prepared",
    "prefix_repetition_tokens",
    "server_capacity",
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
        "regenerated from the seed", note=concurrency_note(w))
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
    workers: int | None = None,
    progress: Progress | None = None,
) -> Prediction:
    """Replay prepared custom prompts in vLLM's send order, encoded like the server.
    ``workers``: threads that encode (default
    :func:`prefixbench.predict.replay.default_workers`)."""
    texts = prepared.texts
    return replay_sent(prepared.sent(seed, shuffle=shuffle), list(map(len, texts)),
                        prepared.output_tokens, lambda job: [texts[i] for i in job],
                        tokenizer, block_size=block_size, capacity_blocks=capacity_blocks,
                        pre_requests=pre_requests, workers=workers, progress=progress,
                        note=concurrency_note(workload))


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
) -> Prediction:
    """:func:`predict_prepared` for an indexed file
    (:func:`prefixbench.bench.custom_index.index_file`): the prompts are read back from the
    file as they are sent, never all held at once. Raises
    :class:`~prefixbench.bench.custom_read.CustomPromptsError` if the file changed since."""
    with index.reader(tokenizer) as reader:
        return replay_sent(index.sent(seed, shuffle=shuffle), index.lengths,
                            index.output_tokens, reader.texts, tokenizer,
                            block_size=block_size, capacity_blocks=capacity_blocks,
                            pre_requests=pre_requests, workers=workers, progress=progress,
                            note=concurrency_note(workload))


def server_capacity(cache_config: CacheConfig | None) -> tuple[int | None, str | None]:
    """The capacity to model for a server, from its ``vllm:cache_config_info``, and a note
    for the report when the capacity model does not apply.

    ``(num_gpu_blocks - 1, None)`` normally (block 0 is vLLM's null block, never usable);
    ``(None, note)`` (an unbounded cache) when vLLM's hybrid KV-cache manager is on
    (:func:`prefixbench.predict.kvcapacity.capacity_note`; the note names the hybrid cache
    model, :mod:`prefixbench.predict.hybridsim`, which this replay does not use yet);
    ``(None, None)`` when the server reported no capacity.
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
    workers: int | None = None,
    progress: Progress | None = None,
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

    Custom prompts only: ``workers`` threads encode them (default
    :func:`prefixbench.predict.replay.default_workers`; the prediction is the same for any
    number), and ``progress`` (e.g. a
    :class:`prefixbench.predict.progress.ProgressBar`) is told how far reading and encoding are.
    """
    if cache_config is None or capacity_blocks is not None:
        return _predict(workload, block_size=block_size, capacity_blocks=capacity_blocks,
                        prompts_file=prompts_file, tokenizer_dir=tokenizer_dir,
                        workers=workers, progress=progress)
    capacity, cap_note = server_capacity(cache_config)
    pred = _predict(workload, block_size=block_size, capacity_blocks=capacity,
                    prompts_file=prompts_file, tokenizer_dir=tokenizer_dir,
                    workers=workers, progress=progress)
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
                               workers=workers, progress=progress)
    except CustomPromptsError as exc:
        return _none(f"prompts unavailable: {exc}", block_size, capacity_blocks)
