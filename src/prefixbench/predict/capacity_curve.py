"""Hit ratio against KV capacity: where a workload's working set stops fitting.

:func:`predict_curve` replays one workload (the tutorial's prefix_repetition shapes or your
prompts, as :mod:`prefixbench.predict.whatif` does) through one fresh cache per capacity at once,
each prompt encoded once, plus an unbounded cache. The unbounded replay gives the
*working set*: the distinct full prompt blocks the workload caches. Below it, eviction
costs hits; :attr:`CapacityCurve.fits_from` is the smallest capacity tried whose ratio
is the unbounded one (each bounded request also holds its decode blocks while it runs,
so a cache can need a little more than the working set).

Capacities are usable blocks, as :func:`prefixbench.predict.whatif.server_capacity` counts them
(``num_gpu_blocks - 1``). The replay is one request at a time unless ``serving`` sends
the requests at a higher concurrency through the scheduler model
(:class:`prefixbench.engines.schedconfig.Serving`); the working set is the one-at-a-time
replay's (through the scheduler model the unbounded cache's blocks include generated
tokens' and copies, so :attr:`CapacityCurve.working_set_blocks` is 0 there: take it from
a one-at-a-time curve, as the capacity report does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.custom_index import index_file
from prefixbench.engines.custom_read import CustomPromptsError
from prefixbench.engines.progress import Progress
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.tokenizer import Tokenizer, TokenizerError
from prefixbench.engines.tokenizer import load as load_tokenizer
from prefixbench.engines.workloads import Workload
from prefixbench.predict.replay import (
    Prediction,
    replay_curve,
    replay_sent_curve,
    serving_note,
)
from prefixbench.predict.whatif import MAX_REPLAY_TOKENS, prefix_repetition_tokens

__all__ = ["CapacityCurve", "CurveError", "parse_capacities", "predict_curve"]


class CurveError(ValueError):
    """The curve cannot be made; the message is one line for the user."""


@dataclass(frozen=True)
class CapacityCurve:
    """One prediction per capacity (ascending), and the unbounded one."""

    points: tuple[Prediction, ...]
    unbounded: Prediction

    @property
    def working_set_blocks(self) -> int:
        return self.unbounded.cached_blocks or 0

    @property
    def fits_from(self) -> int | None:
        """The smallest capacity tried whose hit ratio is the unbounded cache's."""
        best = self.unbounded.ratio
        for point in self.points:
            if point.ratio is not None and best is not None and abs(point.ratio - best) < 1e-12:
                return point.capacity_blocks
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"points": [p.to_dict() for p in self.points],
                "unbounded": self.unbounded.to_dict(),
                "working_set_blocks": self.working_set_blocks, "fits_from": self.fits_from}


def parse_capacities(text: str) -> list[int]:
    """``"64,128,256"`` -> ``[64, 128, 256]`` (sorted, each >= 1, no repeats)."""
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise CurveError(f"capacities must be whole numbers of blocks, got {text!r}") from None
    if not values or values[0] < 1:
        raise CurveError(f"capacities must be >= 1 block, got {text!r}")
    return values


def _tokenizer(tokenizer_dir: Path | None, needed: bool) -> Tokenizer | None:
    if tokenizer_dir is None:
        if needed:
            raise CurveError("your prompts need --tokenizer DIR (token counts are the "
                             "server's tokenizer's)")
        return None
    try:
        return load_tokenizer(Path(tokenizer_dir))
    except TokenizerError as exc:
        raise CurveError(f"no tokenizer: {exc}") from None


def predict_curve(
    workload: Workload,
    *,
    block_size: int,
    capacities: Sequence[int],
    prompts_file: Path | None = None,
    tokenizer_dir: Path | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
) -> CapacityCurve:
    """The hit ratio of one bench of ``workload`` at each of ``capacities`` (usable blocks)
    and unbounded, from an empty cache, through ``cache_model`` (default full attention;
    the hybrid model for a server running vLLM's hybrid KV-cache manager), sent as
    ``serving`` says (default one at a time). Raises :class:`CurveError` for unusable
    input."""
    caps = sorted(set(capacities))
    if block_size < 1 or not caps or caps[0] < 1:
        raise CurveError("block size and capacities must be >= 1")
    tokenizer = _tokenizer(tokenizer_dir, workload.is_custom)
    note = serving_note(workload, serving)
    if not workload.is_custom:
        w = workload
        bos = tokenizer.special_tokens_added()[0] if tokenizer is not None else 0
        requests = w.num_prompts + w.pre_requests
        if requests * (w.prompt_len + bos) > MAX_REPLAY_TOKENS:
            raise CurveError(f"{requests:,} requests of {w.prompt_len + bos:,} tokens: too "
                             f"many to replay in memory")
        prompts = prefix_repetition_tokens(w, bos=list(range(bos)))
        preds = replay_curve(prompts, [w.prefix_repetition_output_len] * len(prompts),
                             block_size=block_size, capacities=[*caps, None],
                             method="cachesim replay, prefix_repetition regenerated from "
                             "the seed", note=note, cache_model=cache_model,
                             serving=serving)
    else:
        assert tokenizer is not None
        path = prompts_file if prompts_file is not None else workload.dataset_path
        if path is None:
            raise CurveError(f"workload {workload.name!r} has no dataset_path")
        try:
            index = index_file(Path(path), num_prompts=workload.num_prompts,
                               custom_output_len=workload.custom_output_len,
                               tokenizer=tokenizer, progress=progress)
            seed = workload.seed if workload.seed is not None else 0
            with index.reader(tokenizer) as reader:
                preds = replay_sent_curve(
                    index.sent(seed, shuffle=not workload.disable_shuffle), index.lengths,
                    index.output_tokens, reader.texts, tokenizer, block_size=block_size,
                    capacities=[*caps, None], pre_requests=workload.pre_requests,
                    workers=workers, progress=progress, note=note,
                    cache_model=cache_model, serving=serving)
        except CustomPromptsError as exc:
            raise CurveError(f"prompts unavailable: {exc}") from None
    return CapacityCurve(points=tuple(preds[:-1]), unbounded=preds[-1])
