"""One bench of the tutorial on one host, turned into a record on the controller.

The benchmark action plugin gathers the raw material on the host (``/metrics`` before,
the ``vllm bench serve`` result JSON, ``/metrics`` after, or stderr and the journal on a
failure); everything decided from it is decided here: the step-9 metric deltas, the
expected hit ratio from the actual workload and the server's own block size, the
measured ratios, and the summary later tasks use.

A custom workload (your own prompts) is prepared here first (:func:`prepare_prompts`):
the user's file becomes ``<run_dir>/prompts/<workload>.jsonl`` (the exact text the server
gets), which the plugin copies to the host; the record keeps its sha256 and prompt count
(``prompts``), and its ``expected`` holds the what-if analyzer's prediction
(:mod:`prefixbench.predict.whatif`) instead of the tutorial's formula, when the run directory
holds the host's tokenizer (``<run_dir>/tokenizer/``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from prefixbench import __version__
from prefixbench.bench import calibration
from prefixbench.bench.bench_argv import bench_argv
from prefixbench.bench.experiment import find_item
from prefixbench.bench.prepared import write_prepared
from prefixbench.bench.served_record import served_expected
from prefixbench.engines import schedconfig
from prefixbench.engines.custom import PreparedPrompts, check_file, prepare
from prefixbench.engines.kvcapacity import usable_blocks
from prefixbench.engines.schedconfig import Serving, bench_serving
from prefixbench.engines.workloads import Workload, WorkloadError
from prefixbench.measure import metrics
from prefixbench.measure.bench_json import BenchResultError, parse_bench_result
from prefixbench.measure.layout import TOKENIZER_DIR
from prefixbench.measure.records import BenchmarkRecord, FailureRecord, ResultKey
from prefixbench.servers import sweep
from prefixbench.servers.served_engine import ServerScheduler, parse_cmdline, scheduler_of
from prefixbench.servers.server import CONFIGURATIONS, Configuration, serve_argv, unit_name


def _settings_argv(settings: Mapping[str, Any], configuration: str) -> tuple[str, ...]:
    """The server's argv as the settings render it; empty when they cannot (a partial
    settings mapping: the platform's default scheduler is then assumed)."""
    try:
        return tuple(serve_argv(settings, cast(Configuration, configuration)))
    except (KeyError, ValueError, TypeError):
        return ()


def now_iso() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class BenchRequest:
    """One bench of one server, resolved from the host's validated settings."""

    host: str
    configuration: str
    workload: Workload
    repetition: int
    base_url: str
    model: str
    tokenizer: str | None
    vllm_executable: str
    #: Seconds before ``timeout`` kills a hung bench client.
    timeout: int = 3600
    #: The servers require an API key: the bench reads it on the host from the units'
    #: root-only environment file (never from a task argument).
    api_key: bool = False
    #: Put before ``vllm`` in the argv: the preloaded client's launcher
    #: (:func:`prefixbench.bench.client_launch.launcher`), which runs the same argv cold
    #: when there is no client to fork it from.
    launcher: tuple[str, ...] = ()
    #: The server's ``--max-num-seqs`` and ``--max-num-batched-tokens`` (scheduler model).
    max_num_seqs: int = schedconfig.DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = schedconfig.DEFAULT_MAX_NUM_BATCHED_TOKENS
    #: The hosts' platform (``prefixbench_platform``: which engine model the expectation
    #: assumes) and the server's ``--max-model-len`` (the Neuron KV-concurrency cap's).
    platform: str = "cpu"
    max_model_len: int | None = None
    neuron_config: Mapping[str, Any] | None = None  # its buckets, on Neuron
    #: The server's argv as the settings render it: stands in for the server's own command
    #: line when the host cannot read it (:meth:`scheduler`).
    server_argv: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, host: str, settings: Mapping[str, Any], *, configuration: str,
                      workload: str, repetition: int, vllm_executable: str) -> BenchRequest:
        """The bench ``workload`` / ``repetition`` of ``configuration``'s server, as the
        host's settings (validated by preflight) define it: the workload with its planned
        seed (:func:`prefixbench.bench.experiment.find_item`), the server's address and
        model, the bench timeout. The workload crosses the Ansible boundary as its name."""
        if configuration not in CONFIGURATIONS:
            raise ValueError(f"unknown configuration {configuration!r} "
                             f"(one of {', '.join(CONFIGURATIONS)})")
        item = find_item(settings, workload, repetition, configuration)
        model = str(settings["vllm_service_model"])
        return cls(host=host, configuration=configuration, workload=item.workload,
                   repetition=item.repetition,
                   base_url=f"http://{settings['vllm_service_host']}:"
                            f"{settings['vllm_service_port']}",
                   model=str(settings.get("vllm_service_served_model_name") or model),
                   tokenizer=model if model.startswith("/") else None,
                   vllm_executable=vllm_executable,
                   timeout=int(settings["prefixbench_bench_timeout"]),
                   api_key=bool(settings.get("vllm_service_api_key")),
                   max_num_seqs=int(settings.get("vllm_service_max_num_seqs")
                                    or schedconfig.DEFAULT_MAX_NUM_SEQS),
                   max_num_batched_tokens=int(
                       settings.get("vllm_service_max_num_batched_tokens")
                       or schedconfig.DEFAULT_MAX_NUM_BATCHED_TOKENS),
                   platform=str(settings.get("prefixbench_platform") or "neuron"),
                   max_model_len=settings.get("vllm_service_max_model_len"),
                   neuron_config=settings.get("vllm_service_neuron_config") or None,
                   server_argv=_settings_argv(settings, configuration))

    def serving(self) -> Serving:
        """The bench's concurrency cap (unset: all its prompts), its ready check and
        warmups, and the server's limits (:func:`prefixbench.predict.benchreplay
        .bench_serving`)."""
        return bench_serving(self.workload, max_num_seqs=self.max_num_seqs,
                             max_num_batched_tokens=self.max_num_batched_tokens)

    def scheduler(self, server_cmdline: str = "") -> ServerScheduler:
        """The scheduler the server runs: read from its command line (``server_cmdline``,
        ``/proc/<MainPID>/cmdline``), else from the settings' argv, saying so
        (:func:`prefixbench.servers.served_engine.scheduler_of`)."""
        argv = parse_cmdline(server_cmdline)
        if argv:
            return scheduler_of(argv, self.platform, source="the server's command line")
        return scheduler_of(self.server_argv, self.platform,
                            source="the settings (the server's command line was not read)")

    @property
    def unit(self) -> str:
        """The systemd unit of this bench's server."""
        return unit_name("baseline" if self.configuration == "baseline" else "cached")

    @property
    def key(self) -> ResultKey:
        return ResultKey(host=self.host, configuration=self.configuration,
                         workload=self.workload.name, repetition=self.repetition)

    @property
    def result_filename(self) -> str:
        return f"{self.configuration}_{self.workload.name}_rep{self.repetition}.json"

    def argv(self, result_dir: str, timeout: int, *, dataset_path: str | None = None
             ) -> list[str]:
        """``timeout`` wraps the bench so a hung client cannot hold the run forever.
        ``dataset_path``: a custom workload's prepared file on the host."""
        inner = bench_argv(
            self.workload, self.base_url, self.model, tokenizer=self.tokenizer,
            result_dir=result_dir, result_filename=self.result_filename,
            metadata={"prefixbench_host": self.host,
                      "prefixbench_configuration": self.configuration,
                      "prefixbench_workload": self.workload.name,
                      "prefixbench_repetition": str(self.repetition),
                      "prefixbench_version": __version__},
            executable=(*self.launcher, self.vllm_executable), dataset_path=dataset_path)
        return ["timeout", "--kill-after=30", str(timeout), *inner]

    def with_workload(self, workload: Workload) -> BenchRequest:
        return dataclasses.replace(self, workload=workload)


@dataclass(frozen=True)
class PreparedBench:
    """A custom workload's request with its count resolved, and its prepared file."""

    request: BenchRequest
    prepared: PreparedPrompts
    path: Path

    @property
    def remote_name(self) -> str:
        """File name on the host (vLLM's custom dataset wants ``.jsonl``)."""
        return self.path.name

    def record(self) -> dict[str, Any]:
        return {**self.prepared.record(), "path": str(self.path)}


def planned_argv(req: BenchRequest, timeout: int, result_dir: str = "<remote tmp>"
                 ) -> list[str]:
    """The argv shown before anything runs (check mode, the task result): a custom
    workload's count is read from its file (:func:`prefixbench.engines.custom.check_file`)."""
    if not req.workload.is_custom:
        return req.argv(result_dir, timeout)
    count = check_file(req.workload)
    planned = req.with_workload(req.workload.with_num_prompts(count))
    return planned.argv(result_dir, timeout,
                        dataset_path=f"{result_dir}/{req.workload.name}.jsonl")


def tokenizer_dir(run_dir: Path) -> Path | None:
    """``<run_dir>/tokenizer`` when it holds a ``tokenizer.json`` (for a sweep point,
    the sweep run's copy: :func:`prefixbench.servers.sweep.tokenizer_dir`)."""
    return sweep.tokenizer_dir(run_dir)


def prepare_prompts(req: BenchRequest, run_dir: Path) -> PreparedBench:
    """Prepare a custom workload's prompts into ``<run_dir>/prompts/<workload>.jsonl``
    (atomically) and resolve its ``num_prompts``. Raises ``ValueError`` with one line
    (:class:`prefixbench.engines.custom_read.CustomPromptsError`)."""
    prepared = prepare(req.workload, tokenizer_dir=tokenizer_dir(run_dir))
    path = write_prepared(run_dir, req.workload.name, prepared)
    resolved = req.with_workload(req.workload.with_num_prompts(prepared.num_prompts))
    return PreparedBench(request=resolved, prepared=prepared, path=path)


def custom_expected(req: BenchRequest, *, block_size: int | None,
                    capacity_blocks: int | None, prompts_file: Path | None,
                    tokenizer: Path | None,
                    cache_config: metrics.CacheConfig | None = None) -> dict[str, Any]:
    """``expected`` of a custom workload: no tutorial formula; the what-if prediction
    (block-level cache model, the server's block size and capacity; the hybrid model
    when ``cache_config`` says the server runs vLLM's hybrid KV-cache manager) when
    possible."""
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads tokenizers only when needed

    out: dict[str, Any] = {"tutorial_ratio": None, "block_aligned_ratio": None,
                           "predicted_ratio": None, "block_size": block_size,
                           "max_num_seqs": req.max_num_seqs,  # for the report's what-if
                           "max_num_batched_tokens": req.max_num_batched_tokens}
    if not block_size:
        out["note"] = "the server reported no block size: no prediction"
        return out
    if tokenizer is None:
        out["note"] = (f"no tokenizer in the run directory ({TOKENIZER_DIR}/tokenizer.json): "
                       f"no prediction")
        return out
    _, model, model_note = whatif.server_cache_model(cache_config)
    model = model.chunked(req.max_num_batched_tokens)
    if model.kind == "full":
        model_note = None
    pred = whatif.predict(req.workload, block_size=block_size,
                          capacity_blocks=capacity_blocks, prompts_file=prompts_file,
                          tokenizer_dir=tokenizer, cache_model=model)
    out.update(predicted_ratio=pred.ratio, block_aligned_ratio=pred.ratio,
               hit_tokens=pred.hit_tokens, query_tokens=pred.query_tokens,
               requests=pred.requests, capacity_blocks=capacity_blocks,
               method=pred.method, evicted_blocks=pred.evicted_blocks)
    notes = [n for n in (pred.note, model_note) if n]
    if notes:
        out["note"] = "; ".join(notes)
    return out


def build_record(req: BenchRequest, *, metrics_before: str, metrics_after: str,
                 bench_json: str, started_at: str, ended_at: str,
                 extra: Mapping[str, Any] | None = None,
                 prepared: PreparedBench | None = None,
                 run_dir: Path | None = None, server_cmdline: str = "") -> BenchmarkRecord:
    """A complete record from the raw material of one bench.

    A custom workload passes ``prepared`` (from :func:`prepare_prompts`) and the
    ``run_dir`` (for its tokenizer): the record keeps the prompts' sha256 and count, and
    ``expected`` is :func:`custom_expected`. ``server_cmdline`` is the server's argv as
    ``/proc/<MainPID>/cmdline`` keeps it: the expectation models the scheduler it names
    (:meth:`BenchRequest.scheduler`).

    Raises ``ValueError`` (including :class:`prefixbench.measure.metrics.CounterReset` when the
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
    if req.workload.is_custom:
        expected = custom_expected(
            req, block_size=block_size,
            capacity_blocks=usable_blocks(config.num_gpu_blocks) if config is not None
            else None,
            prompts_file=prepared.path if prepared is not None else None,
            tokenizer=tokenizer_dir(run_dir) if run_dir is not None else None,
            cache_config=config)
    elif req.workload.is_random:
        expected = calibration.expected(block_size, req.max_num_seqs, req.max_num_batched_tokens)
    elif block_size:
        expected = req.workload.expected_ratios(block_size)
        if config is not None and config.enable_prefix_caching:
            expected.update(served_expected(req.workload, run_dir, block_size, config,
                                            serving=req.serving(), platform=req.platform,
                                            max_model_len=req.max_model_len,
                                            scheduler=req.scheduler(server_cmdline),
                                            neuron_config=req.neuron_config))
    else:
        expected = {"tutorial_ratio": req.workload.tutorial_ratio()}
    measured = dict(delta.measured())
    measured["prefix_caching_enabled"] = (config.enable_prefix_caching
                                          if config is not None else None)
    return BenchmarkRecord(
        key=req.key, seed=int(req.workload.seed or 0), bundle_version=__version__,
        started_at=started_at, ended_at=ended_at, bench=bench,
        workload=req.workload.to_dict(), metrics_delta=delta.to_dict(),
        metrics_before=before.to_dict(), metrics_after=after.to_dict(),
        expected=expected, measured=measured, extra=dict(extra or {}),
        prompts=prepared.record() if prepared is not None else None)


def build_failure(req: BenchRequest, *, error: str, started_at: str, ended_at: str,
                  returncode: int | None = None, stderr: str = "",
                  journal_tail: str = "", extra: Mapping[str, Any] | None = None
                  ) -> FailureRecord:
    """A failure marker that keeps why, stderr and the server's journal tail (and, for
    a record that failed its sanity checks, the record itself in ``extra``)."""
    return FailureRecord(key=req.key, seed=int(req.workload.seed or 0),
                         bundle_version=__version__, started_at=started_at,
                         ended_at=ended_at, error=error, returncode=returncode,
                         stderr=stderr[-20000:], journal_tail=journal_tail[-20000:],
                         extra=dict(extra or {}))


def summary(record: BenchmarkRecord) -> dict[str, Any]:
    """The figures later tasks and the live view use."""
    result = record.bench_result
    return {
        "status": "done", "host": record.key.host, "configuration": record.key.configuration,
        "workload": record.key.workload, "repetition": record.key.repetition, "seed": record.seed,
        "median_ttft_ms": result.median_ttft_ms, "p99_ttft_ms": result.p99_ttft_ms,
        "output_throughput": result.output_throughput,
        "completed": result.completed, "failed_requests": result.failed,
        "expected_ratio": _first(record.expected, "block_aligned_ratio", "tutorial_ratio"),
        "prefix_caching_enabled": record.measured.get("prefix_caching_enabled"),
        "hit_ratio_queries": record.measured.get("hit_ratio_queries"),
        "hit_ratio_by_source": record.measured.get("hit_ratio_by_source"),
    }


def _first(data: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None


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


# -- sanity of a record ------------------------------------------------------------------

#: ``systemctl show`` properties that tell whether a unit's process was replaced.
SERVICE_PROPERTIES: Final = ("NRestarts", "InvocationID", "MainPID")

#: Stands for the bench's temp dir on the host in the argv sent to the host module
#: (library/prefixbench_bench_host.py creates the dir and replaces it).
RESULT_DIR_PLACEHOLDER: Final = "@@RESULT_DIR@@"


def service_restart(before: Mapping[str, str], after: Mapping[str, str]) -> str | None:
    """Why the server is not the one that served the whole bench, or None.

    systemd counts automatic restarts (``NRestarts``) and gives every start a new
    ``InvocationID``; either changing between the snapshots means the process that
    answered the metrics before is not the one after. (vLLM's
    ``process_start_time_seconds`` is not exported in multiprocess mode, which the units
    use, so it cannot tell.)
    """
    changed = [f"{k} {before.get(k) or '?'} -> {after.get(k) or '?'}"
               for k in ("NRestarts", "InvocationID", "MainPID")
               if before.get(k) and after.get(k) and before.get(k) != after.get(k)]
    if not changed:
        return None
    return "the server restarted during the bench (systemd " + ", ".join(changed) + ")"


def record_problems(record: BenchmarkRecord) -> list[str]:
    """Why a record cannot be trusted, one phrase each (empty: it is sound).

    - every request sent completed: ``completed`` equals the requests the workload sends;
    - the server counted them: the ``vllm:request_success`` delta equals the completed
      requests plus the ready-check and warmup copies sent before them;
    - with prefix caching on, every prompt token was looked up: the
      ``vllm:prompt_tokens`` delta equals the ``prefix_cache_queries`` delta.
    """
    problems: list[str] = []
    try:
        result = record.bench_result
        workload = Workload.from_dict(record.workload)
    except (BenchResultError, WorkloadError, TypeError, ValueError) as exc:
        return [f"unreadable: {exc}"]
    sent = workload.requests_sent
    if sent and result.completed != sent:
        problems.append(f"{result.completed} of {sent} requests completed")
    counters = dict((record.metrics_delta or {}).get("counters") or {})
    success = counters.get("request_success")
    if success is not None and sent:
        want = result.completed + workload.pre_requests
        if abs(float(success) - want) > 0.5:
            problems.append(f"the server counted {float(success):.0f} finished requests "
                            f"(vllm:request_success), the bench {want}")
    prompt, queries = counters.get("prompt_tokens"), counters.get("prefix_cache_queries")
    caching = (record.measured or {}).get("prefix_caching_enabled")
    if caching and prompt is not None and queries is not None and abs(
            float(prompt) - float(queries)) > 0.5:
        problems.append(f"{float(prompt):.0f} prompt tokens but {float(queries):.0f} "
                        "prefix-cache queries: another client used the server")
    return problems


# -- the controller's results disk ---------------------------------------------------------

#: Free space a bench needs on the controller before it runs: a record with its
#: per-request lists is well under 1 MiB for the tutorial's sizes and a few MiB for a
#: large custom workload; a bench is not started when its result could not be kept.
MIN_FREE_BYTES: Final = 16 * 2**20


def results_space_problem(run_dir: Path, min_free: int = MIN_FREE_BYTES) -> str | None:
    """Why a bench must not start: the results disk cannot take its record. None: fine."""
    import shutil  # noqa: PLC0415

    where = next((p for p in (run_dir, *run_dir.parents) if p.exists()), run_dir)
    try:
        free = shutil.disk_usage(where).free
    except OSError as exc:
        return unwritable_message(run_dir, exc, run_dir)
    if free < min_free:
        return (f"results disk full: {free // 2**20} MiB free under {run_dir}, a bench needs "
                f"{min_free // 2**20} MiB for its record; free space there and rerun with "
                f"the same run id ({run_dir.name}): records already written are intact")
    return None


def unwritable_message(path: Path, exc: OSError, run_dir: Path) -> str:
    """One line for a record the controller could not write, and what to do."""
    return (f"results disk: cannot write {path}: {exc.strerror or exc}; free space under "
            f"{run_dir.parent} and rerun with the same run id ({run_dir.name}): records "
            "already written are intact")
