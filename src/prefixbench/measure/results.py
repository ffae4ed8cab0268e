"""Benchmark results: ``vllm bench serve`` JSON, the bundle's record, and the run directory.

Layout of a run directory (one file per benchmark, written atomically)::

    results/<run_id>/<host>/<configuration>/<workload>/rep<k>.json         a result
    results/<run_id>/<host>/<configuration>/<workload>/rep<k>.failed.json  a failure

A result file is a :class:`BenchmarkRecord` (``kind: "result"``); a failure marker is a
:class:`FailureRecord` (``kind: "failure"``) that keeps the bench's stderr and the
server's journal tail. A rerun with the same run id asks :meth:`RunLayout.completed` what
is done and runs only the rest; writing a result removes a failure marker of the same
benchmark. Files are replaced with :func:`write_json_atomic`, so a reader sees either
the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prefixbench.measure.atomic import write_text_atomic

__all__ = [
    "REQUIRED_BENCH_KEYS",
    "SCHEMA_VERSION",
    "BenchResult",
    "BenchResultError",
    "BenchmarkRecord",
    "FailureRecord",
    "RequestDetail",
    "ResultKey",
    "RunLayout",
    "json_safe",
    "load_bench_result",
    "parse_bench_result",
    "write_json_atomic",
]

#: Version of the record format below; bump it on an incompatible change.
SCHEMA_VERSION: Final = 1

#: Keys every ``vllm bench serve --save-result`` JSON of a generation run has (vLLM 0.32)
#: and that the bundle reads. ``p99_ttft_ms`` is there with the default
#: ``--metric-percentiles 99``.
REQUIRED_BENCH_KEYS: Final = (
    "completed",
    "failed",
    "duration",
    "num_prompts",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
)

#: Per-request lists saved only with ``--save-detailed`` (``latencies`` and
#: ``queue_times`` are saved always). None of them holds the prompt text.
DETAIL_KEYS: Final = (
    "ttfts", "itls", "input_lens", "output_lens", "start_times", "errors", "generated_texts")


class BenchResultError(ValueError):
    """A bench result JSON is unreadable or lacks a key; the message names the file."""


@dataclass(frozen=True)
class RequestDetail:
    """Per-request lists of one bench run, in the order the requests were sent.

    ``ttfts`` and ``latencies`` are in seconds (as vLLM saves them). Entries of failed
    requests are kept (vLLM stores ttft 0.0 and the error) so indices stay aligned with
    the send order; use :attr:`succeeded` to filter.
    """

    latencies: tuple[float, ...] = ()
    queue_times: tuple[float, ...] = ()
    ttfts: tuple[float, ...] | None = None
    itls: tuple[tuple[float, ...], ...] | None = None
    input_lens: tuple[int, ...] | None = None
    output_lens: tuple[int, ...] | None = None
    start_times: tuple[float, ...] | None = None
    errors: tuple[str, ...] | None = None

    @property
    def has_detail(self) -> bool:
        """True when ``--save-detailed`` was given (per-request TTFTs are known)."""
        return self.ttfts is not None

    @property
    def succeeded(self) -> list[bool]:
        n = len(self.ttfts) if self.ttfts is not None else len(self.latencies)
        if self.errors is None:
            return [True] * n
        return [not e for e in self.errors]


@dataclass(frozen=True)
class BenchResult:
    """One ``vllm bench serve`` result: the raw JSON and typed views of what we use."""

    data: Mapping[str, Any]
    source: str = "<memory>"

    def _num(self, key: str) -> float:
        value = self.data[key]
        return math.nan if value is None else float(value)

    @property
    def completed(self) -> int:
        return int(self.data["completed"])

    @property
    def failed(self) -> int:
        return int(self.data["failed"])

    @property
    def median_ttft_ms(self) -> float:
        return self._num("median_ttft_ms")

    @property
    def p99_ttft_ms(self) -> float:
        return self._num("p99_ttft_ms")

    @property
    def output_throughput(self) -> float:
        return self._num("output_throughput")

    @property
    def total_input_tokens(self) -> int:
        return int(self.data["total_input_tokens"])

    @property
    def detail(self) -> RequestDetail:
        d = self.data

        def floats(key: str) -> tuple[float, ...] | None:
            v = d.get(key)
            return None if v is None else tuple(float(x) for x in v)

        def ints(key: str) -> tuple[int, ...] | None:
            v = d.get(key)
            return None if v is None else tuple(int(x) for x in v)

        itls = d.get("itls")
        errors = d.get("errors")
        return RequestDetail(
            latencies=floats("latencies") or (),
            queue_times=floats("queue_times") or (),
            ttfts=floats("ttfts"),
            itls=None if itls is None else tuple(tuple(float(x) for x in r) for r in itls),
            input_lens=ints("input_lens"),
            output_lens=ints("output_lens"),
            start_times=floats("start_times"),
            errors=None if errors is None else tuple(str(e or "") for e in errors),
        )

    def summary(self) -> dict[str, Any]:
        """The figures the tutorial's tables print."""
        return {
            "completed": self.completed,
            "failed": self.failed,
            "median_ttft_ms": self.median_ttft_ms,
            "p99_ttft_ms": self.p99_ttft_ms,
            "output_throughput": self.output_throughput,
            "total_input_tokens": self.total_input_tokens,
        }


def parse_bench_result(data: Any, source: str = "<memory>") -> BenchResult:
    """Validate an already-loaded bench JSON; :class:`BenchResultError` names the key."""
    if not isinstance(data, Mapping):
        raise BenchResultError(f"{source}: a bench result must be a JSON object, "
                               f"got {type(data).__name__}")
    for key in REQUIRED_BENCH_KEYS:
        if key not in data:
            raise BenchResultError(
                f"{source}: missing key {key!r} (is this a `vllm bench serve "
                f"--save-result` file of a generation run?)")
    for key in ("completed", "failed", "total_input_tokens", "total_output_tokens"):
        if not isinstance(data[key], int) or isinstance(data[key], bool):
            raise BenchResultError(f"{source}: key {key!r} must be an integer, "
                                   f"got {data[key]!r}")
    for key in REQUIRED_BENCH_KEYS:
        value = data[key]
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise BenchResultError(f"{source}: key {key!r} must be a number, got {value!r}")
    lengths = {k: len(data[k]) for k in (*DETAIL_KEYS, "latencies") if isinstance(
        data.get(k), list)}
    if len(set(lengths.values())) > 1:
        raise BenchResultError(f"{source}: per-request lists differ in length: {lengths}")
    return BenchResult(data=dict(data), source=source)


def load_bench_result(path: str | os.PathLike[str]) -> BenchResult:
    """Read and validate a bench result file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchResultError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchResultError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    return parse_bench_result(data, str(p))


# -- records ------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class ResultKey:
    """Identity of one benchmark in a run."""

    host: str
    configuration: str
    workload: str
    repetition: int


def _req(data: Mapping[str, Any], key: str, source: str) -> Any:
    if key not in data:
        raise BenchResultError(f"{source}: record lacks {key!r}")
    return data[key]


def _check_schema(data: Mapping[str, Any], kind: str, source: str) -> None:
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BenchResultError(
            f"{source}: schema_version {version!r} is not {SCHEMA_VERSION} (written by "
            f"another bundle version)")
    if data.get("kind") != kind:
        raise BenchResultError(f"{source}: kind {data.get('kind')!r} is not {kind!r}")


@dataclass(frozen=True)
class BenchmarkRecord:
    """Everything the bundle keeps about one benchmark that ran to the end.

    ``metrics_delta`` is :meth:`prefixbench.measure.metrics.SignalsDelta.to_dict`; ``expected``
    and ``measured`` hold the ratios (``None`` where not computable); ``workload`` is the
    workload's parameters (:meth:`prefixbench.bench.workloads.Workload.to_dict`).
    """

    key: ResultKey
    seed: int
    bundle_version: str
    started_at: str
    ended_at: str
    bench: Mapping[str, Any]
    workload: Mapping[str, Any] = field(default_factory=dict)
    metrics_delta: Mapping[str, Any] | None = None
    #: ``CacheSignals.to_dict()`` of the snapshots around the bench, for the record.
    metrics_before: Mapping[str, Any] | None = None
    metrics_after: Mapping[str, Any] | None = None
    expected: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: Custom workloads only: the prepared prompts file (``source``, ``path``,
    #: ``sha256``, ``lines``, ``num_prompts``, ``chat_lines``). Absent from older records.
    prompts: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self._to_dict()
        if self.prompts is not None:
            out["prompts"] = dict(self.prompts)
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "result",
            "host": self.key.host,
            "configuration": self.key.configuration,
            "workload_name": self.key.workload,
            "repetition": self.key.repetition,
            "seed": self.seed,
            "bundle_version": self.bundle_version,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "workload": dict(self.workload),
            "bench": dict(self.bench),
            "metrics_delta": None if self.metrics_delta is None else dict(self.metrics_delta),
            "metrics_before": None if self.metrics_before is None else dict(self.metrics_before),
            "metrics_after": None if self.metrics_after is None else dict(self.metrics_after),
            "expected": dict(self.expected),
            "measured": dict(self.measured),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<memory>") -> BenchmarkRecord:
        _check_schema(data, "result", source)
        verify_checksum(data, source)
        bench = _req(data, "bench", source)
        parse_bench_result(bench, f"{source} (bench)")
        return cls(
            key=ResultKey(
                host=str(_req(data, "host", source)),
                configuration=str(_req(data, "configuration", source)),
                workload=str(_req(data, "workload_name", source)),
                repetition=int(_req(data, "repetition", source)),
            ),
            seed=int(_req(data, "seed", source)),
            bundle_version=str(_req(data, "bundle_version", source)),
            started_at=str(_req(data, "started_at", source)),
            ended_at=str(_req(data, "ended_at", source)),
            bench=dict(bench),
            workload=dict(data.get("workload") or {}),
            metrics_delta=data.get("metrics_delta"),
            metrics_before=data.get("metrics_before"),
            metrics_after=data.get("metrics_after"),
            expected=dict(data.get("expected") or {}),
            measured=dict(data.get("measured") or {}),
            extra=dict(data.get("extra") or {}),
            prompts=dict(data["prompts"]) if isinstance(data.get("prompts"), Mapping)
            else None,
        )

    @property
    def bench_result(self) -> BenchResult:
        return parse_bench_result(self.bench, f"{self.key}")


@dataclass(frozen=True)
class FailureRecord:
    """A benchmark that did not finish: why, and what the host said."""

    key: ResultKey
    seed: int
    bundle_version: str
    started_at: str
    ended_at: str
    error: str
    returncode: int | None = None
    stderr: str = ""
    journal_tail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "failure",
            "host": self.key.host,
            "configuration": self.key.configuration,
            "workload_name": self.key.workload,
            "repetition": self.key.repetition,
            "seed": self.seed,
            "bundle_version": self.bundle_version,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "error": self.error,
            "returncode": self.returncode,
            "stderr": self.stderr,
            "journal_tail": self.journal_tail,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<memory>") -> FailureRecord:
        _check_schema(data, "failure", source)
        rc = data.get("returncode")
        return cls(
            key=ResultKey(
                host=str(_req(data, "host", source)),
                configuration=str(_req(data, "configuration", source)),
                workload=str(_req(data, "workload_name", source)),
                repetition=int(_req(data, "repetition", source)),
            ),
            seed=int(_req(data, "seed", source)),
            bundle_version=str(_req(data, "bundle_version", source)),
            started_at=str(_req(data, "started_at", source)),
            ended_at=str(_req(data, "ended_at", source)),
            error=str(_req(data, "error", source)),
            returncode=None if rc is None else int(rc),
            stderr=str(data.get("stderr") or ""),
            journal_tail=str(data.get("journal_tail") or ""),
            extra=dict(data.get("extra") or {}),
        )


# -- atomic files ---------------------------------------------------------------------------

#: Key of the checksum a result file carries over the rest of its content.
CHECKSUM_KEY: Final = "checksum"


def content_checksum(data: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of a record's content (everything but the checksum), as canonical
    JSON: sorted keys, no spaces, so that formatting does not matter, values do."""
    body = {k: v for k, v in data.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def with_checksum(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (already strict JSON) with its :func:`content_checksum`."""
    out = {k: v for k, v in data.items() if k != CHECKSUM_KEY}
    out[CHECKSUM_KEY] = content_checksum(out)
    return out


def verify_checksum(data: Mapping[str, Any], source: str) -> None:
    """Raise ``ValueError`` when a record's checksum does not match its content: it was
    edited after it was written, and is not trusted (a rerun measures it again). Records
    written before checksums existed carry none and are accepted."""
    want = data.get(CHECKSUM_KEY)
    if want is None:
        return
    got = content_checksum(data)
    if got != want:
        raise ValueError(f"{source}: checksum mismatch ({want} recorded, {got} now): the "
                         "record was changed after it was written and is not trusted")


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN / infinity replaced by ``None`` (strict JSON has neither).

    vLLM's own result files may hold ``NaN``; a record keeps the measurement rather than
    failing to write it.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, mode: int = 0o644) -> Path:
    """Write ``obj`` as JSON to ``path`` so that readers never see a partial file.

    Indented, key-sorted JSON through :func:`prefixbench.measure.atomic.write_text_atomic` (temp
    file in the same directory, fsync, rename, fsync of the directory). Non-finite floats
    are refused (they are not JSON). Missing parent directories are created.
    """
    target = Path(path)
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_text_atomic(target, text, mode)
    return target


# -- run directory --------------------------------------------------------------------------

_COMPONENT: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
_REP_FILE: Final = re.compile(r"^rep([0-9]+)(\.failed)?\.json$")


def _component(kind: str, value: str) -> str:
    if not _COMPONENT.match(value) or ".." in value:
        raise ValueError(
            f"{kind} {value!r} cannot be a path component (letters, digits, '._@+-', "
            f"not starting with '.' or '-', no '..', at most 128 characters)")
    return value


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run: ``<root>/<run_id>/<host>/<configuration>/<workload>/rep<k>``."""

    root: Path
    run_id: str

    def __post_init__(self) -> None:
        _component("run_id", self.run_id)

    @property
    def run_dir(self) -> Path:
        return Path(self.root) / self.run_id

    def bench_dir(self, host: str, configuration: str, workload: str) -> Path:
        return (self.run_dir / _component("host", host)
                / _component("configuration", configuration) / _component("workload", workload))

    def result_path(self, key: ResultKey) -> Path:
        if key.repetition < 1:
            raise ValueError(f"repetitions count from 1, got {key.repetition}")
        return self.bench_dir(key.host, key.configuration, key.workload) / (
            f"rep{key.repetition}.json")

    def failed_path(self, key: ResultKey) -> Path:
        return self.result_path(key).with_name(f"rep{key.repetition}.failed.json")

    def write_result(self, record: BenchmarkRecord) -> Path:
        """Write a result (with the checksum of its content) and drop an older failure
        marker of the same benchmark."""
        path = write_json_atomic(self.result_path(record.key),
                                 with_checksum(json_safe(record.to_dict())))
        with contextlib.suppress(FileNotFoundError):
            self.failed_path(record.key).unlink()
        return path

    def write_failure(self, record: FailureRecord) -> Path:
        """Write a failure marker; never touches an existing result of that benchmark."""
        if self.is_completed(record.key):  # a tampered or unreadable one is not finished
            raise FileExistsError(
                f"{self.result_path(record.key)} exists: a finished result is never "
                f"replaced by a failure")
        return write_json_atomic(self.failed_path(record.key), json_safe(record.to_dict()))

    def _scan(self) -> Iterable[tuple[ResultKey, bool, Path]]:
        run = self.run_dir
        if not run.is_dir():
            return
        for path in sorted(run.glob("*/*/*/rep*.json")):
            m = _REP_FILE.match(path.name)
            if not m:
                continue
            workload_dir = path.parent
            key = ResultKey(host=workload_dir.parent.parent.name,
                            configuration=workload_dir.parent.name,
                            workload=workload_dir.name, repetition=int(m.group(1)))
            yield key, m.group(2) is not None, path

    def _records(self) -> Iterable[BenchmarkRecord]:
        for _key, failed, path in self._scan():
            if failed:
                continue
            try:
                yield BenchmarkRecord.from_dict(
                    json.loads(path.read_text(encoding="utf-8")), str(path))
            except (OSError, ValueError):
                continue  # unreadable or foreign: not done, a rerun rewrites it

    def is_completed(self, key: ResultKey) -> bool:
        """Whether ``key`` has a readable result file of this schema: :meth:`completed`
        for one benchmark, reading that one file only (not the whole run)."""
        path = self.result_path(key)
        try:
            BenchmarkRecord.from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, ValueError):
            return False
        return True

    def completed(self) -> set[ResultKey]:
        """Benchmarks with a readable result file of this schema (what a rerun skips)."""
        return {rec.key for rec in self._records()}

    def failures(self) -> dict[ResultKey, Path]:
        """Failure markers of benchmarks that have no result."""
        done = self.completed()
        return {key: path for key, failed, path in self._scan() if failed and key not in done}

    def missing(self, planned: Sequence[ResultKey]) -> list[ResultKey]:
        """The planned benchmarks still to run, in plan order."""
        done = self.completed()
        return [k for k in planned if k not in done]

    def load_results(self) -> list[BenchmarkRecord]:
        """Every readable result of the run, in path order (unreadable ones are missing)."""
        return list(self._records())

    def stale_temp_files(self) -> list[Path]:
        """Temporary files left by writes interrupted by a crash (safe to delete)."""
        run = self.run_dir
        return sorted(run.rglob(".*.tmp")) if run.is_dir() else []
