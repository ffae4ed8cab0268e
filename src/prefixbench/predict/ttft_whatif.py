"""``prefixbench whatif --calibration RUN_DIR``: your requests' median and p99 TTFT with
and without prefix caching, on a server timed by a host's fitted step-time model
(:mod:`prefixbench.predict.ttftfit`, fitted by
:func:`prefixbench.report.ttft_predicted.host_fits` to that host's baseline benches).

The requests are those the what-if replays (a workload's, or your prompts file's, in
vLLM's send order, the ready check and warmups first and not measured); both servers
are the scheduler model of the what-if's serving settings (:mod:`prefixbench.engines.
platforms`), one with its prefix cache, one without (``--no-enable-prefix-caching``:
no lookup hits).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prefixbench.engines.cachemodel import CacheModel
from prefixbench.engines.custom_index import index_file
from prefixbench.engines.platforms import scheduler_model
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.steptime import timed
from prefixbench.engines.tokenizer import load as load_tokenizer
from prefixbench.engines.workloads import Workload
from prefixbench.predict.replay import Kept, replay_sent
from prefixbench.predict.ttftfit import TimeFit
from prefixbench.predict.ttftreplay import TtftPrediction, arrival_seconds, predict_ttft
from prefixbench.predict.whatif import prefix_repetition_tokens

__all__ = ["CalibratedTtft", "calibrated_ttft", "workload_requests"]

#: Prompt tokens the timed replay keeps of a prompts file (as the range over timings).
MAX_TOKENS = 50_000_000


def workload_requests(workload: Workload, tokenizer_dir: Path | None
                      ) -> tuple[list[array[int]], list[int]]:
    """The requests of ``workload`` in send order, pre-requests first, and their output
    lengths. Raises ValueError when they cannot be read or counted."""
    w = workload
    if w.dataset_name == "prefix_repetition":
        prompts = prefix_repetition_tokens(w)
        return prompts, [w.prefix_repetition_output_len] * len(prompts)
    if tokenizer_dir is None or w.dataset_path is None:
        raise ValueError("a prompts file needs --tokenizer DIR to be timed")
    tokenizer = load_tokenizer(tokenizer_dir)
    index = index_file(Path(w.dataset_path), num_prompts=w.num_prompts,
                       custom_output_len=w.custom_output_len, tokenizer=tokenizer)
    kept = Kept(MAX_TOKENS)
    with index.reader(tokenizer) as reader:
        replay_sent(index.sent(w.seed or 0, shuffle=not w.disable_shuffle), index.lengths,
                    index.output_tokens, reader.texts, tokenizer, block_size=16,
                    capacity_blocks=None, pre_requests=w.pre_requests, workers=None,
                    progress=None, note=None, serving=SERIAL, keep=kept)
    if kept.overflow:
        raise ValueError(f"more than {MAX_TOKENS:,} prompt tokens: too many to time")
    return kept.prompts, kept.outputs


@dataclass(frozen=True)
class CalibratedTtft:
    """TTFT with and without prefix caching, on one calibrated host's model."""

    cached: TtftPrediction
    uncached: TtftPrediction

    @property
    def median_saving(self) -> float:
        return 1.0 - self.cached.median_s / self.uncached.median_s


def calibrated_ttft(fit: TimeFit, workload: Workload, prompts: Sequence[array[int]],
                    outputs: Sequence[int], *, block_size: int,
                    capacity_blocks: int | None, cache_model: CacheModel,
                    serving: Serving) -> CalibratedTtft:
    """Replay the requests on the modelled server with and without prefix caching."""
    pre = workload.pre_requests
    n = len(prompts) - pre
    arrivals = arrival_seconds(n, request_rate=workload.request_rate,
                               burstiness=workload.burstiness, seed=workload.seed or 0)
    conc = serving.concurrency if serving.scheduled else 1
    if math.isinf(workload.request_rate) and workload.max_concurrency is None:
        conc = max(conc, n)
    out = []
    for caching in (True, False):
        sim = timed(scheduler_model(block_size, capacity_blocks, cache_model, serving),
                    fit.cost, prefix_caching=caching)
        out.append(predict_ttft(fit, sim, prompts, outputs, arrivals=arrivals,
                                concurrency=conc, pre_requests=pre))
    return CalibratedTtft(out[0], out[1])
