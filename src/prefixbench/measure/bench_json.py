"""``vllm bench serve --save-result`` JSON: the keys the bundle reads, validated.

:func:`parse_bench_result` checks an already-loaded result (every key the tutorial's
tables use, integer counts, per-request lists of one length); :class:`BenchResult` is
the typed view of it, :class:`RequestDetail` its per-request lists (``--save-detailed``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

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
