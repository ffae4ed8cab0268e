"""What a prefix_repetition workload will send, and the hit ratio the bundle's cache model
expects of it, from the settings alone: before any host is touched, without the model's
tokenizer.

The prompts are built from the workload's token lengths as vLLM's bench draws them
(:func:`prefixbench.predict.whatif.prefix_repetition_tokens`: one 32-bit word per token,
so distinct prefixes share no block, in the seed's send order, pre-requests first) and
replayed through the cache model the server will run (:class:`Sizing`):

* **block size**: ``vllm_service_block_size``, else the platform's default (128 on vLLM's
  cpu platform, 32 on vllm-neuron 0.21: :mod:`prefixbench.config.rules`);
* **cache model**: gpt-oss (named by ``vllm_service_model``, the served name or the
  model cache's repo id) on the cpu platform runs vLLM's hybrid KV-cache manager
  (sliding window 128 + full attention, prefilled in ``max_num_batched_tokens`` chunks);
  on Neuron the plugin is read as one full-attention group
  (:mod:`prefixbench.engines.cachemodel`); every other model full attention;
* **capacity**: ``vllm_service_num_gpu_blocks_override`` less the null block, else
  unbounded (the KV cache's size is known once the server starts);
* **concurrency**: the workload's ``max_concurrency`` (unset: all its prompts) through
  the scheduler model with ``max_num_seqs`` and ``max_num_batched_tokens``, one at a
  time at 1 (:class:`prefixbench.engines.schedconfig.Serving`).

Without the tokenizer a BOS token and the server's re-encoding of the prompt texts are
not counted: the record's served expectation adds them after the run. A replay costs
about 0.1 s per million prompt tokens at block 32 (2-core machine); above
:data:`PLAN_MAX_TOKENS` the plan does not replay: an unbounded full-attention cache then
takes the block-aligned formula, which is exact for it, and anything else says why there
is no figure. Estimates are kept per workload shape, so a goodput ladder's rungs cost one
at concurrency 1. Above it the plan also gives the range over arrival timings
(:mod:`prefixbench.predict.arrivals`, paced by the workload's ``request_rate``), up to
:data:`PLAN_MAX_BAND_TOKENS`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.schedconfig import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    Serving,
    bench_serving,
)
from prefixbench.engines.workloads import Workload
from prefixbench.servers.served_engine import ServerScheduler

__all__ = ["PLAN_MAX_TOKENS", "Estimate", "Sizing", "estimate", "expected_lines",
           "sends_line", "serving_of", "sizing_of"]

#: Prompt tokens (requests x prompt length) above which the plan does not replay a
#: workload: ~0.5 s at block 32 on a 2-core machine (4.1 M tokens took 0.45 s).
PLAN_MAX_TOKENS: Final = 4_000_000
#: ... and above which it gives no range over arrival timings (23 to 33 replays more; the
#: tutorial's sustained_c4, 819,200 tokens, takes about 1.5 s with it).
PLAN_MAX_BAND_TOKENS: Final = 1_000_000
#: vLLM's default block sizes when the inventory sets none (prefixbench.config.rules'
#: CPU_BLOCK_SIZE and NEURON_DEFAULT_BLOCK_SIZE; repeated so the rules need not load).
_DEFAULT_BLOCK: Final = {"cpu": (128, "vLLM's cpu default"),
                         "neuron": (32, "vllm-neuron 0.21's default")}
_GPT_OSS: Final = re.compile(r"gpt[-_]?oss", re.IGNORECASE)


@dataclass(frozen=True)
class Sizing:
    """The server the plan's estimates assume, from the settings."""

    block_size: int
    #: Where the block size comes from ("vllm_service_block_size" or the default's).
    block_source: str
    model: CacheModel
    #: Why this cache model (empty for a plain full-attention model).
    model_source: str
    capacity_blocks: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    #: Whether the settings name gpt-oss (whatever the platform's cache model).
    gpt_oss: bool = False
    #: ``prefixbench_platform``: on "neuron" requests are scheduled by the plugin's
    #: scheduler (:func:`prefixbench.engines.platforms.engine_model`), its KV-concurrency
    #: cap at ``max_model_len``; on "cpu" by vLLM's.
    platform: str = "neuron"
    max_model_len: int | None = None
    #: The scheduler the servers' command line names (the settings' rendered argv:
    #: :func:`prefixbench.servers.served_engine.scheduler_of`), as the record reads it from
    #: the running server; ``None`` when the settings cannot render one (the platform's).
    scheduler: ServerScheduler | None = None
    #: The bucket lists of ``vllm_service_neuron_config`` (hashable, by key): on Neuron,
    #: the prefill buckets the plugin resolves from them
    #: (:func:`prefixbench.engines.schedneuron.resolve_prefill_buckets`).
    bucket_config: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def neuron_config(self) -> dict[str, list[int]]:
        return {key: list(values) for key, values in self.bucket_config}

    def describe(self) -> str:
        kind = ("full attention" if self.model.kind == "full" else
                f"hybrid sliding window {self.model.sliding_window or 128} + full attention")
        cap = ("an unbounded KV cache (its size is known once the server starts)"
               if self.capacity_blocks is None else f"{self.capacity_blocks} usable KV blocks")
        return (f"{kind}{f' ({self.model_source})' if self.model_source else ''}, block "
                f"{self.block_size} ({self.block_source}), {cap}")


def sizing_of(settings: Mapping[str, Any]) -> Sizing:
    """The block size, cache model, capacity and scheduler limits the settings give."""
    platform = str(settings.get("prefixbench_platform") or "neuron")
    block = int(settings.get("vllm_service_block_size") or 0)
    default, source = _DEFAULT_BLOCK.get(platform, _DEFAULT_BLOCK["neuron"])
    batched = int(settings.get("vllm_service_max_num_batched_tokens")
                  or DEFAULT_MAX_NUM_BATCHED_TOKENS)
    names = " ".join(str(settings.get(k) or "") for k in (
        "vllm_service_model", "vllm_service_served_model_name", "model_cache_repo_id"))
    gpt_oss = bool(_GPT_OSS.search(names))
    model, why = FULL_ATTENTION, ""
    if gpt_oss and platform == "cpu" and settings.get(
            "vllm_service_disable_hybrid_kv_cache_manager"):
        why = "gpt-oss with --disable-hybrid-kv-cache-manager: one full-attention group"
    elif gpt_oss and platform == "cpu":
        model, why = CacheModel("hybrid").chunked(batched), "gpt-oss on vLLM's hybrid manager"
    elif gpt_oss:
        why = "gpt-oss on vllm-neuron: one full-attention group"
    override = int(settings.get("vllm_service_num_gpu_blocks_override") or 0)
    return Sizing(block_size=block or default,
                  block_source="vllm_service_block_size" if block else source,
                  model=model, model_source=why,
                  capacity_blocks=override - 1 if override >= 2 else None,
                  max_num_seqs=int(settings.get("vllm_service_max_num_seqs")
                                   or DEFAULT_MAX_NUM_SEQS),
                  max_num_batched_tokens=batched, gpt_oss=gpt_oss, platform=platform,
                  max_model_len=int(settings.get("vllm_service_max_model_len") or 0) or None,
                  scheduler=_scheduler(settings, platform),
                  bucket_config=_bucket_config(settings.get("vllm_service_neuron_config")))


def _bucket_config(config: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The prefill bucket lists of a neuron_config, hashable."""
    if not isinstance(config, Mapping):
        return ()
    return tuple((key, tuple(int(v) for v in config[key]))
                 for key in ("num_batched_tokens_buckets", "kv_segment_size_buckets")
                 if isinstance(config.get(key), list) and config[key])


def _scheduler(settings: Mapping[str, Any], platform: str) -> ServerScheduler | None:
    """The scheduler the cached server's rendered argv names; ``None`` when the settings
    do not render one (a partial mapping)."""
    from prefixbench.servers.served_engine import scheduler_of  # noqa: PLC0415
    from prefixbench.servers.server import serve_argv  # noqa: PLC0415

    try:
        argv = serve_argv(settings, "cached")
    except (KeyError, ValueError, TypeError):
        return None
    return scheduler_of(argv, platform, source="the settings' vllm serve command")


def serving_of(w: Workload, sizing: Sizing) -> Serving:
    """How the bench sends the workload (as :meth:`prefixbench.bench.benchrun.BenchRequest
    .serving`): its concurrency cap, unset all its prompts, its ready check and warmups
    (:func:`prefixbench.predict.benchreplay.bench_serving`), the server's limits, and the
    scheduler its platform runs (:func:`prefixbench.engines.platforms.engine_model`)."""
    from prefixbench.engines.platforms import engine_model  # noqa: PLC0415 - keeps the plan light

    serving = bench_serving(w, max_num_seqs=sizing.max_num_seqs,
                            max_num_batched_tokens=sizing.max_num_batched_tokens)
    if sizing.scheduler is not None:
        from prefixbench.bench.served_record import served_engine  # noqa: PLC0415

        return served_engine(sizing.platform, sizing.scheduler, sizing.model, serving,
                             sizing.max_model_len,
                             neuron_config=sizing.neuron_config).serving
    return engine_model(sizing.platform, cache_model=sizing.model, serving=serving,
                        max_model_len=sizing.max_model_len,
                        neuron_config=sizing.neuron_config).serving


@dataclass(frozen=True)
class Estimate:
    """The model's expected hit ratio of one workload, or why there is none."""

    ratio: float | None
    #: How it was made ("replay", "formula"), or why not.
    how: str
    prompt_tokens: int
    #: Above concurrency 1, the lowest and highest over arrival timings, and which.
    band: tuple[float, float] | None = None
    band_note: str | None = None


def estimate(w: Workload, sizing: Sizing, model: CacheModel | None = None) -> Estimate:
    """The expected hit ratio of prefix_repetition workload ``w`` on the server ``sizing``
    describes (``model`` instead of its cache model: the plan's comparisons)."""
    # One at a time, arrivals change nothing: the goodput ladder's rungs share one shape.
    scheduled = serving_of(w, sizing).scheduled
    shape = dataclasses.replace(w, name="plan", criterion="",
                                request_rate=w.request_rate if scheduled else math.inf,
                                burstiness=w.burstiness if scheduled else 1.0)
    return _estimate(shape, dataclasses.replace(sizing, model=model or sizing.model))


@functools.lru_cache(maxsize=256)
def _estimate(w: Workload, sizing: Sizing) -> Estimate:
    from prefixbench.predict.whatif import predict_prefix_repetition  # noqa: PLC0415

    tokens = (w.requests_sent + w.pre_requests) * w.prompt_len
    if tokens > PLAN_MAX_TOKENS:
        if sizing.capacity_blocks is None and sizing.model.kind == "full":
            return Estimate(w.expected(sizing.block_size).ratio, "formula", tokens)
        return Estimate(None, f"not replayed: {tokens:,} prompt tokens, above the plan's "
                              f"{PLAN_MAX_TOKENS:,}", tokens)
    pred = predict_prefix_repetition(w, block_size=sizing.block_size,
                                     capacity_blocks=sizing.capacity_blocks,
                                     cache_model=sizing.model, serving=serving_of(w, sizing),
                                     band=tokens <= PLAN_MAX_BAND_TOKENS)
    if pred.ratio is None:
        return Estimate(None, pred.note or "no prediction", tokens)
    return Estimate(pred.ratio, "replay", tokens, pred.band, pred.band_note)


def sends_line(w: Workload) -> str:
    """What the bench sends: requests, prompt and output tokens."""
    sent = w.requests_sent
    pre = (f", after {w.pre_requests} copies of the first prompt (ready check, warmups)"
           if w.pre_requests else "")
    dropped = (f" ({w.num_prompts - sent} of num_prompts dropped: not a multiple of the "
               f"prefixes)" if sent < w.num_prompts else "")
    return (f"  sends {sent} requests{dropped} x {w.prompt_len:,} prompt tokens = "
            f"{sent * w.prompt_len:,} prompt tokens, {sent * w.prefix_repetition_output_len:,}"
            f" output tokens{pre}")


def expected_lines(w: Workload, sizing: Sizing, est: Estimate) -> list[str]:
    """The model's expected hit ratio, and what it assumes."""
    serving = serving_of(w, sizing)
    how = ("one request at a time" if not serving.scheduled else
           f"concurrency {serving.concurrency} through the {serving.describe_scheduler()} "
           f"model (max_num_seqs {serving.max_num_seqs}, max_num_batched_tokens "
           f"{serving.max_num_batched_tokens})")
    assumes = f"    assumes {sizing.describe()}, {how}"
    if est.ratio is None:
        return [f"  expected hit ratio: none from the cache model ({est.how}; prefixbench "
                f"whatif --workload {w.name} gives it)", assumes]
    method = ("the block-aligned formula, exact for this cache" if est.how == "formula"
              else "the bundle's cache model on the prompts' token lengths")
    lines = [f"  expected hit ratio {est.ratio * 100:.1f}% ({method}; no tokenizer yet, so "
             f"a BOS and the server's re-encoding are not counted)", assumes]
    if est.band is not None and est.band[1] - est.band[0] < 1e-12:
        count = (est.band_note or "").partition(" over ")[2].partition(" (")[0]
        lines.append(f"    the same whenever the requests reach the engine (over {count})")
    elif est.band is not None:
        lines.append(f"    when requests reach the engine moves it: {est.band_note}")
    elif serving.scheduled and est.how == "replay":
        lines.append(f"    no range over arrival timings ({est.prompt_tokens:,} prompt tokens, "
                     f"above the plan's {PLAN_MAX_BAND_TOKENS:,}; prefixbench whatif "
                     f"--workload {w.name} --concurrency {serving.concurrency} gives it)")
    return lines
