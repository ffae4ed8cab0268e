"""One bench of the tutorial on one host, turned into a record on the controller.

The benchmark action plugin gathers the raw material on the host (``/metrics`` before,
the ``vllm bench serve`` result JSON, ``/metrics`` after, or stderr and the journal on a
failure); everything decided from it is decided here: the step-9 metric deltas, the
expected hit ratio from the actual workload and the server's own block size, the
measured ratios, and the summary later tasks use.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefixbench import __version__, metrics
from prefixbench.results import (
    BenchmarkRecord,
    FailureRecord,
    ResultKey,
    parse_bench_result,
)
from prefixbench.workloads import Workload, bench_argv


def now_iso() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class BenchRequest:
    """What the action plugin was asked to run."""

    host: str
    configuration: str
    workload: Workload
    repetition: int
    base_url: str
    model: str
    tokenizer: str | None
    vllm_executable: str

    @classmethod
    def from_args(cls, host: str, args: Mapping[str, Any]) -> BenchRequest:
        workload = Workload.from_dict(args["workload"])
        if workload.seed is None:
            raise ValueError(f"workload {workload.name!r} has no seed")
        return cls(host=host, configuration=str(args["configuration"]), workload=workload,
                   repetition=int(args["repetition"]), base_url=str(args["base_url"]),
                   model=str(args["model"]), tokenizer=args.get("tokenizer") or None,
                   vllm_executable=str(args["vllm_executable"]))

    @property
    def key(self) -> ResultKey:
        return ResultKey(host=self.host, configuration=self.configuration,
                         workload=self.workload.name, repetition=self.repetition)

    @property
    def result_filename(self) -> str:
        return f"{self.configuration}_{self.workload.name}_rep{self.repetition}.json"

    def argv(self, result_dir: str, timeout: int) -> list[str]:
        """``timeout`` wraps the bench so a hung client cannot hold the run forever."""
        inner = bench_argv(
            self.workload, self.base_url, self.model, tokenizer=self.tokenizer,
            result_dir=result_dir, result_filename=self.result_filename,
            metadata={"prefixbench_host": self.host,
                      "prefixbench_configuration": self.configuration,
                      "prefixbench_workload": self.workload.name,
                      "prefixbench_repetition": str(self.repetition),
                      "prefixbench_version": __version__},
            executable=(self.vllm_executable,))
        return ["timeout", "--kill-after=30", str(timeout), *inner]


def build_record(req: BenchRequest, *, metrics_before: str, metrics_after: str,
                 bench_json: str, started_at: str, ended_at: str,
                 extra: Mapping[str, Any] | None = None) -> BenchmarkRecord:
    """A complete record from the raw material of one bench.

    Raises ``ValueError`` (including :class:`prefixbench.metrics.CounterReset` when the
    server restarted during the bench, which makes the deltas meaningless).
    """
    bench = json.loads(bench_json)
    result = parse_bench_result(bench, f"{req.key} result JSON")
    if result.failed:
        raise ValueError(f"{result.failed} of {result.failed + result.completed} requests "
                         "failed (the server went away or refused them)")
    before = metrics.extract_signals(metrics_before)
    after = metrics.extract_signals(metrics_after)
    delta = metrics.delta(before, after)
    config = after.cache_config
    block_size = config.block_size if config is not None else None
    expected: dict[str, Any] = {"tutorial_ratio": req.workload.tutorial_ratio()}
    if block_size:
        expected = req.workload.expected_ratios(block_size)
    measured = dict(delta.measured())
    measured["prefix_caching_enabled"] = (config.enable_prefix_caching
                                          if config is not None else None)
    return BenchmarkRecord(
        key=req.key, seed=int(req.workload.seed or 0), bundle_version=__version__,
        started_at=started_at, ended_at=ended_at, bench=bench,
        workload=req.workload.to_dict(), metrics_delta=delta.to_dict(),
        metrics_before=before.to_dict(), metrics_after=after.to_dict(),
        expected=expected, measured=measured, extra=dict(extra or {}))


def build_failure(req: BenchRequest, *, error: str, started_at: str, ended_at: str,
                  returncode: int | None = None, stderr: str = "",
                  journal_tail: str = "") -> FailureRecord:
    """A failure marker that keeps why, stderr and the server's journal tail."""
    return FailureRecord(key=req.key, seed=int(req.workload.seed or 0),
                         bundle_version=__version__, started_at=started_at,
                         ended_at=ended_at, error=error, returncode=returncode,
                         stderr=stderr[-20000:], journal_tail=journal_tail[-20000:])


def summary(record: BenchmarkRecord) -> dict[str, Any]:
    """The figures later tasks and the live view use."""
    result = record.bench_result
    return {
        "status": "done",
        "host": record.key.host, "configuration": record.key.configuration,
        "workload": record.key.workload, "repetition": record.key.repetition,
        "seed": record.seed,
        "median_ttft_ms": result.median_ttft_ms, "p99_ttft_ms": result.p99_ttft_ms,
        "output_throughput": result.output_throughput,
        "completed": result.completed, "failed_requests": result.failed,
        "expected_ratio": record.expected.get("block_aligned_ratio",
                                              record.expected.get("tutorial_ratio")),
        "prefix_caching_enabled": record.measured.get("prefix_caching_enabled"),
        "hit_ratio_queries": record.measured.get("hit_ratio_queries"),
        "hit_ratio_by_source": record.measured.get("hit_ratio_by_source"),
    }


def summary_line(s: Mapping[str, Any]) -> str:
    """One console line for a finished bench."""
    def pct(v: Any) -> str:
        return "n/a" if v is None else f"{float(v) * 100:.2f}%"
    head = (f"{s['host']} {s['configuration']} {s['workload']} rep{s['repetition']}: "
            f"median TTFT {s['median_ttft_ms']:.1f} ms, p99 {s['p99_ttft_ms']:.1f} ms, "
            f"{s['output_throughput']:.1f} tok/s, ")
    if s.get("prefix_caching_enabled") is False:
        return head + f"prefix caching off ({pct(s['hit_ratio_by_source'])} from cache)"
    return head + (f"hit ratio {pct(s['hit_ratio_queries'])} "
                   f"(expected {pct(s['expected_ratio'])})")
