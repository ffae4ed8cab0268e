"""The cached run's TTFT predicted from the baseline, beside the measured one, per host
and workload (docs/reading-the-report.md, "TTFT predicted from the baseline").

Per host: the step-time model is fitted to that host's baseline benches at concurrency
1 (:mod:`prefixbench.predict.ttftfit`); the cached configuration's benches are replayed,
in the order they ran on the one server (its prefix cache carries over from bench to
bench), through the scheduler model with the fitted step times
(:mod:`prefixbench.predict.ttftreplay`). The tail carried over is the smallest of the
baselines' (a 50-request p99 is set by its one or two slowest requests: one disturbed
baseline would inflate every prediction). Each row says whether the measured median and
p99 are within the model's stated error. A row beyond it is worth reading: a server
that does not save what its hits should, or a host whose speed changed between the
baseline and the cached run.
"""

from __future__ import annotations

import functools
import json
import statistics
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.bench.calibration import is_calibration
from prefixbench.engines.schedhybrid import scheduler_sim_for
from prefixbench.engines.schedneuron import neuron_scheduler_sim, resolve_prefill_buckets
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.workloads import Workload
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.predict.ttftfit import Observation, TimeFit, fit_cost, observations
from prefixbench.predict.ttftreplay import (
    TtftComparison,
    arrival_seconds,
    compare,
    predict_ttft,
    startup_sets_p99,
)
from prefixbench.predict.whatif import prefix_repetition_tokens
from prefixbench.report.load import RunData

__all__ = ["SCHEDULERS", "HostCalibration", "ServerOf", "TtftRow", "for_host", "host_fits",
           "neuron_padding", "other_share", "outside_seconds", "render_markdown",
           "scheduler_name", "scheduler_of", "server_of", "ttft_rows"]

#: The scheduler classes a record's ``expected_scheduler`` names
#: (:attr:`prefixbench.engines.platforms.EngineModel.scheduler`).
SCHEDULERS: Final = ("Scheduler", "AsyncScheduler", "NeuronScheduler",
                     "NeuronAsyncScheduler")

@dataclass(frozen=True)
class TtftRow:
    host: str
    workload: str
    comparison: TtftComparison
    fit: TimeFit
    #: The scheduler class replayed (:func:`scheduler_name`).
    scheduler: str = "Scheduler"

    def as_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"host": self.host, "workload": self.workload,
                "predicted_median_ttft_ms": c.predicted_median_ms,
                "measured_median_ttft_ms": c.measured_median_ms,
                "predicted_p99_ttft_ms": c.predicted_p99_ms,
                "measured_p99_ttft_ms": c.measured_p99_ms, "agrees": c.agrees,
                "baseline_other_share": c.baseline_load, "cached_other_share": c.cached_load,
                "verdict": c.verdict(), "fit": self.fit.summary(),
                "platform": self.fit.cost.platform, "scheduler": self.scheduler,
                **({"prefill_buckets": list(self.fit.cost.buckets),
                    "segment": self.fit.cost.segment,
                    "decode_buckets": list(self.fit.cost.decode_buckets)}
                   if self.fit.cost.platform == "neuron" else {})}


@functools.lru_cache(maxsize=16)
def _requests(workload_json: str, seed: int) -> tuple[tuple[array[int], ...], int, int]:
    """A prefix_repetition bench's requests in send order (pre-requests first), their
    output length and how many pre-requests; hosts of one run share them (one seed)."""
    w = Workload.from_dict({**json.loads(workload_json), "seed": seed})
    return (tuple(prefix_repetition_tokens(w)), w.prefix_repetition_output_len,
            w.pre_requests)


def neuron_padding(chunk: int, max_num_seqs: int, *, max_model_len: int | None = None,
                   neuron_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """How the server's Neuron plugin pads, from its own configuration: prefill chunks to
    the buckets it resolves (:func:`prefixbench.engines.schedneuron
    .resolve_prefill_buckets`: ``num_batched_tokens_buckets``, else
    ``kv_segment_size_buckets``, else automatic segmented prefill's
    ``[max_num_batched_tokens]``, else the default powers of two); KV segments of the
    configured ``kv_segment_size_buckets`` size, else the largest prefill bucket (the
    segment automatic segmented prefill uses); decode batches to ``num_seqs_buckets``,
    else ``max_num_seqs``. Without ``max_model_len`` the server is taken to run segmented
    prefill: a server with prefix caching on does, or the plugin refuses to start
    (:mod:`prefixbench.config.rules_plugin`), and the baseline runs the same settings."""
    config = dict(neuron_config or {})
    mml = max_model_len if max_model_len is not None else chunk + 1
    buckets = resolve_prefill_buckets(chunk, mml, config)
    segments = config.get("kv_segment_size_buckets")
    seqs = config.get("num_seqs_buckets")
    return {"buckets": tuple(sorted(buckets)),
            "segment": int(max(segments)) if segments else max(buckets),
            "decode_buckets": (tuple(sorted(int(v) for v in seqs)) if seqs
                               else (max_num_seqs,))}


def outside_seconds(record: BenchmarkRecord) -> float | None:
    """The time a bench's requests spent outside the engine: the client's median TTFT
    less the server's own mean queue and prefill time per request (``engine_*`` of the
    record's metrics delta, :mod:`prefixbench.measure.metrics`); None when the server's
    page lacks them. The median, not the mean, of the client's TTFT: the time outside the
    engine has the long tail (a first request's connection, the client's own stalls), the
    engine's prefill of one prompt length does not."""
    counters = (record.metrics_delta or {}).get("counters") or {}
    queue, prefill = counters.get("engine_queue_seconds"), counters.get("engine_prefill_seconds")
    count = counters.get("engine_prefill_requests")
    if queue is None or prefill is None or not count:
        return None
    return max(0.0, float(record.bench_result.median_ttft_ms) / 1e3
               - (float(queue) + float(prefill)) / float(count))


def other_share(record: BenchmarkRecord) -> float | None:
    """Others' share of the machine's CPU while the bench ran (the record's
    ``host_load``, :mod:`prefixbench.measure.hostload`); None when not measured."""
    load = (record.extra or {}).get("host_load")
    share = load.get("other_share") if isinstance(load, Mapping) else None
    return float(share) if isinstance(share, int | float) else None


def _baseline_load(baselines: Sequence[BenchmarkRecord]) -> float | None:
    """The mean others' share under the benches the fit is made from (concurrency 1)."""
    shares = [s for r in baselines if int(r.workload.get("max_concurrency") or 0) == 1
              and (s := other_share(r)) is not None]
    return statistics.fmean(shares) if shares else None


def _host_fit(baselines: Sequence[BenchmarkRecord], chunk: int, platform: str = "cpu",
              max_num_seqs: int = 1, padding: Mapping[str, Any] | None = None
              ) -> TimeFit | None:
    """The fit to a host's baseline benches at concurrency 1, the calibration bench
    (:mod:`prefixbench.bench.calibration`) among them when it ran; the spread, the tail
    and the time outside the engine are the tutorial benches' (the calibration's lengths
    vary on purpose)."""
    obs: list[Observation] = []
    spreads: list[float] = []
    p99s: list[float] = []
    outside: list[float | None] = []
    used: list[str] = []
    for r in sorted(baselines, key=lambda r: is_calibration(r.key.workload)):
        b = r.bench_result
        if int(r.workload.get("max_concurrency") or 0) != 1:
            continue
        calibrating = is_calibration(r.key.workload)
        obs += observations(b, calibration=calibrating)
        used.append(f"{r.key.workload} rep{r.key.repetition}")
        if not calibrating or not spreads:
            spreads.append(float(b.data.get("std_ttft_ms") or 0.0) / b.median_ttft_ms)
            p99s.append(b.p99_ttft_ms / 1e3)
            outside.append(outside_seconds(r))
    if not obs:
        return None
    if platform != "neuron":
        padding = {}
    elif padding is None:
        padding = neuron_padding(chunk, max_num_seqs)
    known = [s for s in outside if s is not None]
    return fit_cost(obs, platform=platform, chunk=chunk, spread=statistics.median(spreads),
                    measured_p99_s=min(p99s), **padding,
                    request_s=statistics.median(known) if len(known) == len(outside) else None,
                    source={"benches": used})


@dataclass(frozen=True)
class HostCalibration:
    """One host's fitted step-time model and what it ran (for the what-if's lines)."""

    host: str
    fit: TimeFit
    platform: str | None
    release: str | None
    vllm: str | None


def host_fits(data: RunData, *, max_num_batched_tokens: int,
              baseline: str = "baseline") -> list[HostCalibration]:
    """Each host's step-time model, fitted to its baseline benches at concurrency 1 and
    its calibration bench, on the server its records describe (:func:`server_of`: the
    chunk size, ``max_num_seqs``, the platform's cost shape and, on Neuron, its
    buckets); a host whose records do not say takes ``max_num_batched_tokens`` and the
    cpu shape."""
    out = []
    for host in data.hosts:
        fp = data.fingerprints.get(host)
        mine = [r for r in [*data.records, *data.calibration] if r.key.host == host]
        server = server_of(mine)
        chunk = server.chunk if server is not None else max_num_batched_tokens
        platform = server.platform if server is not None else "cpu"
        padding = (neuron_padding(chunk, server.max_num_seqs,
                                  max_model_len=server.max_model_len,
                                  neuron_config=server.neuron_config)
                   if server is not None and platform == "neuron" else None)
        fit = _host_fit([r for r in mine if r.key.configuration == baseline], chunk,
                        platform, server.max_num_seqs if server is not None else 1,
                        padding)
        if fit is not None:
            out.append(HostCalibration(
                host, fit, fp.platform if fp is not None else None,
                fp.neuron_release if fp is not None else None,
                fp.vllm_version if fp is not None else None))
    return out


def scheduler_name(scheduler: str | None, platform: str) -> str:
    """The class :func:`scheduler_of` models: ``scheduler`` if given, else the
    platform's default; ValueError for a name it does not model."""
    name = scheduler or ("NeuronAsyncScheduler" if platform == "neuron" else "Scheduler")
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}: one of {', '.join(SCHEDULERS)}")
    return name


def scheduler_of(scheduler: str | None, platform: str, *, block_size: int,
                 max_num_seqs: int, max_num_batched_tokens: int,
                 buckets: Sequence[int] | None = None) -> SchedulerSim:
    """A fresh scheduler model of the class the server runs, by the name its records'
    expectations give (``expected_scheduler``: ``Scheduler``, ``AsyncScheduler``,
    ``NeuronScheduler``, ``NeuronAsyncScheduler``, read from its command line by
    :mod:`prefixbench.servers.served_engine`); without one, the platform's default (vLLM's
    ``Scheduler`` on cpu, the plugin's ``NeuronAsyncScheduler`` on Neuron). The class
    decides which requests share a step (the plugin's never mixes a prefill with decodes,
    and prefills one request a step), so the time a request waits behind others; the
    platform decides what a step costs (:class:`prefixbench.engines.steptime.StepCost`).
    The simulated fleet runs the plugin's ``NeuronScheduler`` on vLLM's CPU build: cpu
    costs, the Neuron plugin's batching."""
    name = scheduler_name(scheduler, platform)
    asynchronous = "Async" in name
    if name.startswith("Neuron"):
        return neuron_scheduler_sim(block_size, None, max_num_seqs=max_num_seqs,
                                    max_num_batched_tokens=max_num_batched_tokens,
                                    async_scheduling=asynchronous,
                                    buckets=list(buckets) if buckets else None)
    return scheduler_sim_for("full", block_size, None, max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens,
                             async_scheduling=asynchronous)


def ttft_rows(records: Sequence[BenchmarkRecord], *, block_size: int,
              max_num_seqs: int, max_num_batched_tokens: int,
              baseline: str = "baseline", cached: str = "cached",
              platform: str = "cpu", max_model_len: int | None = None,
              neuron_config: Mapping[str, Any] | None = None,
              scheduler: str | None = None, load_max_diff: float = 0.15) -> list[TtftRow]:
    """One row per host and cached workload (first repetition). ``platform``: "cpu"
    (a step costs what it computes) or "neuron" (chunks padded as :func:`neuron_padding`
    resolves the server's ``max_model_len`` and ``neuron_config``; never checked on
    Trainium); ``scheduler``: the class the server runs (:func:`scheduler_of`);
    ``load_max_diff``: how far apart the others' share of the CPU under the baselines and
    under a bench may be before a disagreement is said to be possibly the machine's
    (``Thresholds.other_load_max_diff``). Hosts without a baseline at concurrency 1 have
    no row."""
    rows: list[TtftRow] = []
    padding = (neuron_padding(max_num_batched_tokens, max_num_seqs,
                              max_model_len=max_model_len, neuron_config=neuron_config)
               if platform == "neuron" else {})
    for host in sorted({r.key.host for r in records}):
        mine = sorted((r for r in records if r.key.host == host), key=lambda r: r.started_at)
        baselines = [r for r in mine if r.key.configuration == baseline]
        fit = _host_fit(baselines, max_num_batched_tokens, platform, max_num_seqs, padding)
        if fit is None:
            continue
        base_load = _baseline_load(baselines)
        sim = scheduler_of(scheduler, platform, block_size=block_size,
                           max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=max_num_batched_tokens,
                           buckets=padding.get("buckets"))
        fresh = True  # nothing sent to this server yet
        for r in mine:
            if r.key.configuration != cached or r.key.repetition != 1:
                continue
            w = Workload.from_dict(dict(r.workload))
            if w.dataset_name != "prefix_repetition":
                continue
            prompts, out_len, pre = _requests(json.dumps(dict(r.workload), sort_keys=True),
                                              r.seed)
            n = len(prompts) - pre
            pred = predict_ttft(
                fit, sim, prompts, [out_len] * len(prompts),
                arrivals=arrival_seconds(n, request_rate=w.request_rate,
                                         burstiness=w.burstiness, seed=r.seed),
                concurrency=max(1, w.max_concurrency or n), pre_requests=pre)
            b = r.bench_result
            startup = startup_sets_p99(n, first_after_start=_first_after_start(r, fresh, pre))
            fresh = False
            rows.append(TtftRow(host, r.key.workload,
                                compare(pred, b.median_ttft_ms, b.p99_ttft_ms,
                                        startup_p99=startup,
                                        loads=(base_load, other_share(r)),
                                        load_max_diff=load_max_diff), fit,
                                scheduler_name(scheduler, platform)))
    return rows


def _first_after_start(record: BenchmarkRecord, fresh: bool, pre_requests: int) -> bool:
    """Whether the bench's first measured request is the server's first: nothing sent
    before it (the server's ``vllm:request_success`` 0 before the bench when the record
    has the snapshot, else the first bench of the configuration in time order) and no
    ready check or warmup request."""
    if pre_requests:
        return False
    served = (record.metrics_before or {}).get("request_success")
    return fresh if served is None else float(served) == 0.0


def _setting(records: Sequence[BenchmarkRecord], key: str) -> int | None:
    """A server setting the records' expectations were made with (one value, else None)."""
    found = {int(v) for r in records if (v := (r.expected or {}).get(key))}
    return found.pop() if len(found) == 1 else None


def _neuron_config(records: Sequence[BenchmarkRecord]) -> dict[str, Any] | None:
    """The server's ``neuron_config`` the expectations carry (one value, else None)."""
    found = {json.dumps(c, sort_keys=True) for r in records
             if isinstance(c := (r.expected or {}).get("neuron_config"), dict)}
    return json.loads(found.pop()) if len(found) == 1 else None


@dataclass(frozen=True)
class ServerOf:
    """A host's server as its records' expectations describe it."""

    block_size: int
    max_num_seqs: int
    chunk: int
    platform: str
    scheduler: str | None
    max_model_len: int | None
    neuron_config: dict[str, Any] | None


def server_of(records: Sequence[BenchmarkRecord]) -> ServerOf | None:
    """The server the records ran on: the block size in ``vllm:cache_config_info``;
    ``max_num_seqs``, ``max_num_batched_tokens``, the platform and the scheduler class
    the expectations were replayed with; on Neuron the server's ``max_model_len`` and
    ``neuron_config`` when they carry them. None when any of the first four is unknown
    or differs between records."""
    blocks = {int(b) for r in records
              if isinstance(labels := (r.metrics_delta or {}).get("cache_config"), dict)
              and (b := labels.get("block_size"))}
    seqs = _setting(records, "max_num_seqs")
    chunk = _setting(records, "max_num_batched_tokens")
    # Only the records whose expectation was replayed say (the baseline's and the
    # calibration bench's carry none); records made before the platform was recorded: cpu.
    platforms = {e["expected_platform"] for r in records
                 if (e := r.expected) and e.get("expected_platform")}
    schedulers = {e["expected_scheduler"] for r in records
                  if (e := r.expected) and e.get("expected_scheduler")}
    if len(blocks) != 1 or seqs is None or chunk is None or len(platforms) > 1:
        return None
    return ServerOf(blocks.pop(), seqs, chunk, platforms.pop() if platforms else "cpu",
                    schedulers.pop() if len(schedulers) == 1 else None,
                    _setting(records, "max_model_len"), _neuron_config(records))


def for_host(records: Sequence[BenchmarkRecord], *, load_max_diff: float = 0.15
             ) -> tuple[dict[str, Any], ...]:
    """The report's rows of one host (:meth:`TtftRow.as_dict`), on the server its
    records describe (:func:`server_of`); none when that is unknown or the host has no
    baseline at concurrency 1."""
    server = server_of(records)
    if server is None:
        return ()
    try:
        rows = ttft_rows(records, block_size=server.block_size,
                         max_num_seqs=server.max_num_seqs,
                         max_num_batched_tokens=server.chunk, platform=server.platform,
                         max_model_len=server.max_model_len,
                         neuron_config=server.neuron_config, scheduler=server.scheduler,
                         load_max_diff=load_max_diff)
    except ValueError:
        return ()
    return tuple(row.as_dict() for row in rows)


def render_markdown(rows: Sequence[TtftRow]) -> str:
    """The report's table: predicted beside measured, and the verdict."""
    if not rows:
        return ""
    out = ["| host | workload | median TTFT predicted / measured (ms) | p99 TTFT "
           "predicted / measured (ms) | |", "|---|---|---|---|---|"]
    for row in rows:
        c = row.comparison
        out.append(f"| {row.host} | {row.workload} | {c.predicted_median_ms:.1f} / "
                   f"{c.measured_median_ms:.1f} ({c.median_error:+.1%}) | "
                   f"{c.predicted_p99_ms:.1f} / {c.measured_p99_ms:.1f} "
                   f"({c.p99_error:+.1%}) | {c.verdict()} |")
    fits = {row.host: f"{row.fit.summary()}; replayed through {row.scheduler}"
            for row in rows}
    out += ["", *(f"- {host}: {summary}" for host, summary in fits.items())]
    return "\n".join(out) + "\n"
