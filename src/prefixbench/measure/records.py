"""The bundle's records of one bench: a result or a failure, each with its checksum.

A result (:class:`BenchmarkRecord`, ``kind: "result"``) keeps the bench JSON, the metric
deltas and the ratios; a failure marker (:class:`FailureRecord`, ``kind: "failure"``)
keeps why, the bench's stderr and the server's journal tail. Both open with the same
header (:class:`RecordHeader`): schema, kind, the benchmark's identity, seed, bundle
version and times. A written record carries the checksum of its content
(:func:`with_checksum`), so one edited afterwards is not trusted, and neither is one
without a checksum (unless the reader accepts records of older versions explicitly).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from prefixbench.measure.bench_json import BenchResult, BenchResultError, parse_bench_result

#: Version of the record format below; bump it on an incompatible change.
SCHEMA_VERSION: Final = 1

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
class RecordHeader:
    """What every record opens with: the benchmark's identity, its seed, who wrote it
    and when. :class:`BenchmarkRecord` and :class:`FailureRecord` both extend it."""

    #: ``kind`` of the record in its file (``"result"`` or ``"failure"``).
    KIND: ClassVar[str] = ""

    key: ResultKey
    seed: int
    bundle_version: str
    started_at: str
    ended_at: str

    def _header(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.KIND,
            "host": self.key.host,
            "configuration": self.key.configuration,
            "workload_name": self.key.workload,
            "repetition": self.key.repetition,
            "seed": self.seed,
            "bundle_version": self.bundle_version,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }

    @classmethod
    def _read_header(cls, data: Mapping[str, Any], source: str) -> dict[str, Any]:
        """The header's fields of a loaded record of this kind, as keyword arguments."""
        _check_schema(data, cls.KIND, source)
        return {
            "key": ResultKey(
                host=str(_req(data, "host", source)),
                configuration=str(_req(data, "configuration", source)),
                workload=str(_req(data, "workload_name", source)),
                repetition=int(_req(data, "repetition", source)),
            ),
            "seed": int(_req(data, "seed", source)),
            "bundle_version": str(_req(data, "bundle_version", source)),
            "started_at": str(_req(data, "started_at", source)),
            "ended_at": str(_req(data, "ended_at", source)),
        }


@dataclass(frozen=True)
class BenchmarkRecord(RecordHeader):
    """Everything the bundle keeps about one benchmark that ran to the end.

    ``metrics_delta`` is :meth:`prefixbench.measure.metrics.SignalsDelta.to_dict`; ``expected``
    and ``measured`` hold the ratios (``None`` where not computable); ``workload`` is the
    workload's parameters (:meth:`prefixbench.engines.workloads.Workload.to_dict`).
    """

    KIND: ClassVar[str] = "result"

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
            **self._header(),
            "workload": dict(self.workload),
            "bench": dict(self.bench),
            "metrics_delta": None if self.metrics_delta is None else dict(self.metrics_delta),
            "metrics_before": None if self.metrics_before is None else dict(self.metrics_before),
            "metrics_after": None if self.metrics_after is None else dict(self.metrics_after),
            "expected": dict(self.expected),
            "measured": dict(self.measured),
            "extra": dict(self.extra),
        }

    #: Whether the record's checksum was verified; False only for a record without one,
    #: read with ``accept_unchecksummed`` (never written, not compared).
    checksummed: bool = field(default=True, compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<memory>", *,
                  accept_unchecksummed: bool = False) -> BenchmarkRecord:
        """A record read back; ``ValueError`` when its checksum is wrong, or missing and
        ``accept_unchecksummed`` is not given (:func:`verify_checksum`)."""
        header = cls._read_header(data, source)
        checksummed = verify_checksum(data, source, accept_missing=accept_unchecksummed)
        bench = _req(data, "bench", source)
        parse_bench_result(bench, f"{source} (bench)")
        return cls(
            **header,
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
            checksummed=checksummed,
        )

    @property
    def bench_result(self) -> BenchResult:
        return parse_bench_result(self.bench, f"{self.key}")


@dataclass(frozen=True)
class FailureRecord(RecordHeader):
    """A benchmark that did not finish: why, and what the host said."""

    KIND: ClassVar[str] = "failure"

    error: str
    returncode: int | None = None
    stderr: str = ""
    journal_tail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._header(),
            "error": self.error,
            "returncode": self.returncode,
            "stderr": self.stderr,
            "journal_tail": self.journal_tail,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<memory>") -> FailureRecord:
        header = cls._read_header(data, source)
        rc = data.get("returncode")
        return cls(
            **header,
            error=str(_req(data, "error", source)),
            returncode=None if rc is None else int(rc),
            stderr=str(data.get("stderr") or ""),
            journal_tail=str(data.get("journal_tail") or ""),
            extra=dict(data.get("extra") or {}),
        )


# -- checksums ----------------------------------------------------------------------------

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


#: What :func:`verify_checksum` says of a record without a checksum (the report's reason).
NO_CHECKSUM: Final = "no checksum"


def verify_checksum(data: Mapping[str, Any], source: str, *,
                    accept_missing: bool = False) -> bool:
    """Whether ``data`` carries a checksum that matches its content (True); raise
    ``ValueError`` when it does not match (edited after it was written) or is missing (a
    record of an older version, or one edited with its checksum removed): neither is
    trusted, and a rerun measures it again. ``accept_missing`` accepts a record without
    a checksum (False is returned) for reading a run of an older version, knowingly."""
    want = data.get(CHECKSUM_KEY)
    if want is None:
        if accept_missing:
            return False
        raise ValueError(f"{source}: {NO_CHECKSUM}: the record cannot be shown unedited "
                         "(written by an older version, or its checksum was removed)")
    got = content_checksum(data)
    if got != want:
        raise ValueError(f"{source}: checksum mismatch ({want} recorded, {got} now): the "
                         "record was changed after it was written and is not trusted")
    return True


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
