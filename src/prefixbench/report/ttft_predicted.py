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
import re
import statistics
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.bench.calibration import is_calibration
from prefixbench.engines.schedneuron import neuron_scheduler_sim
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.workloads import Workload
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.predict.ttftfit import Observation, TimeFit, fit_cost, observations
from prefixbench.predict.ttftreplay import TtftComparison, arrival_seconds, compare, predict_ttft
from prefixbench.predict.whatif import prefix_repetition_tokens
from prefixbench.report.load import RunData

__all__ = ["HostCalibration", "TtftRow", "for_host", "host_fits", "render_markdown",
           "ttft_rows"]

@dataclass(frozen=True)
class TtftRow:
    host: str
    workload: str
    comparison: TtftComparison
    fit: TimeFit

    def as_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"host": self.host, "workload": self.workload,
                "predicted_median_ttft_ms": c.predicted_median_ms,
                "measured_median_ttft_ms": c.measured_median_ms,
                "predicted_p99_ttft_ms": c.predicted_p99_ms,
                "measured_p99_ttft_ms": c.measured_p99_ms, "agrees": c.agrees,
                "verdict": c.verdict(), "fit": self.fit.summary(),
                "platform": self.fit.cost.platform}


@functools.lru_cache(maxsize=16)
def _requests(workload_json: str, seed: int) -> tuple[tuple[array[int], ...], int, int]:
    """A prefix_repetition bench's requests in send order (pre-requests first), their
    output length and how many pre-requests; hosts of one run share them (one seed)."""
    w = Workload.from_dict({**json.loads(workload_json), "seed": seed})
    return (tuple(prefix_repetition_tokens(w)), w.prefix_repetition_output_len,
            w.pre_requests)


def _neuron_padding(chunk: int, max_num_seqs: int) -> dict[str, Any]:
    """How a Neuron server pads, as the tutorial's server is configured: prefill chunks
    to one bucket, ``max_num_batched_tokens`` (``num_batched_tokens_buckets: [1024]``,
    aws-neuron-sdk v2.32.0 ``vllm-neuron/docs/tutorials/tutorial-gpt-oss.md``), KV
    segments of the same size (``kv_segment_size_buckets``), decode batches to
    ``max_num_seqs``."""
    return {"buckets": (chunk,), "segment": chunk, "decode_buckets": (max_num_seqs,)}


def _host_fit(baselines: Sequence[BenchmarkRecord], chunk: int, platform: str = "cpu",
              max_num_seqs: int = 1) -> TimeFit | None:
    """The fit to a host's baseline benches at concurrency 1, the calibration bench
    (:mod:`prefixbench.bench.calibration`) among them when it ran; the spread and the
    tail are the tutorial benches' (the calibration's lengths vary on purpose)."""
    obs: list[Observation] = []
    spreads: list[float] = []
    p99s: list[float] = []
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
    if not obs:
        return None
    padding = _neuron_padding(chunk, max_num_seqs) if platform == "neuron" else {}
    return fit_cost(obs, platform=platform, chunk=chunk, spread=statistics.median(spreads),
                    measured_p99_s=min(p99s), **padding, source={"benches": used})


@dataclass(frozen=True)
class HostCalibration:
    """One host's fitted step-time model and what it ran (for the what-if's lines)."""

    host: str
    fit: TimeFit
    platform: str | None
    release: str | None
    vllm: str | None


def _flag(units: Mapping[str, str], flag: str) -> int | None:
    """A server flag's value as rendered in the host's units (``--flag N``)."""
    for text in units.values():
        found = re.search(rf"{re.escape(flag)}[= ](\d+)", text)
        if found:
            return int(found.group(1))
    return None


def host_fits(data: RunData, *, max_num_batched_tokens: int,
              baseline: str = "baseline") -> list[HostCalibration]:
    """Each host's step-time model, fitted to its baseline benches at concurrency 1 and
    its calibration bench (the chunk size from its rendered server units, else
    ``max_num_batched_tokens``)."""
    out = []
    for host in data.hosts:
        fp = data.fingerprints.get(host)
        units = fp.units if fp is not None else {}
        chunk = _flag(units, "--max-num-batched-tokens") or max_num_batched_tokens
        fit = _host_fit([r for r in [*data.records, *data.calibration]
                         if r.key.host == host and r.key.configuration == baseline], chunk)
        if fit is not None:
            out.append(HostCalibration(
                host, fit, fp.platform if fp is not None else None,
                fp.neuron_release if fp is not None else None,
                fp.vllm_version if fp is not None else None))
    return out


def ttft_rows(records: Sequence[BenchmarkRecord], *, block_size: int,
              max_num_seqs: int, max_num_batched_tokens: int,
              baseline: str = "baseline", cached: str = "cached",
              platform: str = "cpu") -> list[TtftRow]:
    """One row per host and cached workload (first repetition). ``platform``: "cpu"
    (vLLM's synchronous scheduler) or "neuron" (the plugin's async scheduler, padded as
    :func:`_neuron_padding` says; never checked on Trainium). Hosts without a baseline at
    concurrency 1 have no row."""
    rows: list[TtftRow] = []
    for host in sorted({r.key.host for r in records}):
        mine = sorted((r for r in records if r.key.host == host), key=lambda r: r.started_at)
        fit = _host_fit([r for r in mine if r.key.configuration == baseline],
                        max_num_batched_tokens, platform, max_num_seqs)
        if fit is None:
            continue
        sim = (neuron_scheduler_sim(block_size, None, max_num_seqs=max_num_seqs,
                                    max_num_batched_tokens=max_num_batched_tokens)
               if platform == "neuron" else
               SchedulerSim(block_size, None, max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens))
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
            rows.append(TtftRow(host, r.key.workload,
                                compare(pred, b.median_ttft_ms, b.p99_ttft_ms), fit))
    return rows


def _setting(records: Sequence[BenchmarkRecord], key: str) -> int | None:
    """A server setting the records' expectations were made with (one value, else None)."""
    found = {int(v) for r in records if (v := (r.expected or {}).get(key))}
    return found.pop() if len(found) == 1 else None


def for_host(records: Sequence[BenchmarkRecord]) -> tuple[dict[str, Any], ...]:
    """The report's rows of one host (:meth:`TtftRow.as_dict`), its server read from the
    records (the block size in ``vllm:cache_config_info``; ``max_num_seqs`` and
    ``max_num_batched_tokens`` the expectations were replayed with, the platform they
    assumed); none when any is unknown or the host has no baseline at concurrency 1."""
    blocks = {int(b) for r in records
              if isinstance(labels := (r.metrics_delta or {}).get("cache_config"), dict)
              and (b := labels.get("block_size"))}
    seqs = _setting(records, "max_num_seqs")
    chunk = _setting(records, "max_num_batched_tokens")
    platforms = {e.get("expected_platform") or "cpu" for r in records if (e := r.expected)}
    if len(blocks) != 1 or seqs is None or chunk is None or len(platforms) != 1:
        return ()
    try:
        rows = ttft_rows(records, block_size=blocks.pop(), max_num_seqs=seqs,
                         max_num_batched_tokens=chunk, platform=platforms.pop())
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
    fits = {row.host: row.fit.summary() for row in rows}
    out += ["", *(f"- {host}: {summary}" for host, summary in fits.items())]
    return "\n".join(out) + "\n"
