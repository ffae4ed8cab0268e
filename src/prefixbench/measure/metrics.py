"""vLLM's ``/metrics`` page: a small Prometheus text parser and the prefix-cache signals.

The tutorial's step 9 compares two signals, both cumulative since the server started:

* ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` (prompt tokens), and
* ``vllm:prompt_tokens_by_source{source="local_cache_hit"}`` against
  ``{source="local_compute"}`` (and ``external_kv_transfer``).

A benchmark's own figures are the difference of two snapshots taken just before and just
after it (:func:`delta`). Every signal is summed over all label sets other than the ones
that select it (``engine``, ``model_name``), so a data-parallel server with several
engines reads as one. On the wire ``prometheus_client`` appends ``_total`` to counters;
lookups here accept a name with or without it.

The parser follows the Prometheus text exposition format 0.0.4: ``# HELP`` / ``# TYPE``
lines and other comments, label values with ``\\\\``, ``\\"`` and ``\\n`` escapes, values
including ``NaN``, ``+Inf`` and ``-Inf``, and an optional integer timestamp. It does not
need ``prometheus_client`` and never imports it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CacheConfig",
    "CacheSignals",
    "CounterReset",
    "Exposition",
    "MetricsParseError",
    "Sample",
    "SignalsDelta",
    "delta",
    "extract_signals",
    "parse_exposition",
]

_NAME: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}

PROMPT_SOURCES: Final = ("local_cache_hit", "local_compute", "external_kv_transfer")


class MetricsParseError(ValueError):
    """A line of the exposition is not valid text format; names the line number."""


class CounterReset(ValueError):
    """A counter went backwards between two snapshots: the server restarted in between.

    The delta of such a pair measures nothing; the benchmark that spans it must be rerun.
    """


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name{labels} value [timestamp_ms]``."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Exposition:
    """A parsed ``/metrics`` page: every sample, and the ``# TYPE`` of each family."""

    samples: tuple[Sample, ...]
    types: Mapping[str, str] = field(default_factory=dict)

    def find(self, name: str, **labels: str) -> list[Sample]:
        """Samples named ``name`` (or ``name_total``) whose labels include ``labels``."""
        names = _name_variants(name)
        return [
            s
            for s in self.samples
            if s.name in names and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def total(self, name: str, **labels: str) -> float | None:
        """Sum of the matching samples over all other labels; ``None`` when there is none."""
        found = self.find(name, **labels)
        if not found:
            return None
        return math.fsum(s.value for s in found)


def _name_variants(name: str) -> frozenset[str]:
    if name.endswith("_total"):
        return frozenset({name, name.removesuffix("_total")})
    return frozenset({name, name + "_total"})


def _parse_labels(line: str, pos: int, lineno: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == "{"``; return labels, end."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME.match(line, pos)
        if not m:
            raise MetricsParseError(f"line {lineno}: bad label name at column {pos + 1}")
        key = m.group(0)
        pos = m.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != "=":
            raise MetricsParseError(f"line {lineno}: expected '=' after label {key!r}")
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise MetricsParseError(f"line {lineno}: label {key!r} value is not quoted")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise MetricsParseError(f"line {lineno}: unterminated value of label {key!r}")
            c = line[pos]
            if c == "\\":
                if pos + 1 >= n:
                    raise MetricsParseError(f"line {lineno}: dangling escape in label {key!r}")
                nxt = line[pos + 1]
                # Unknown escapes are kept verbatim, as prometheus' own parser does.
                chars.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
                continue
            if c == '"':
                pos += 1
                break
            chars.append(c)
            pos += 1
        if key in labels:
            raise MetricsParseError(f"line {lineno}: label {key!r} repeated")
        labels[key] = "".join(chars)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
            continue
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        raise MetricsParseError(f"line {lineno}: expected ',' or '}}' at column {pos + 1}")


def _parse_value(text: str, lineno: int) -> float:
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        raise MetricsParseError(f"line {lineno}: bad sample value {text!r}") from None


def parse_exposition(text: str) -> Exposition:
    """Parse a Prometheus text exposition (what ``GET /metrics`` returns).

    Raises :class:`MetricsParseError` naming the first bad line.
    """
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line[1:].split(None, 3)
            if len(parts) >= 3 and parts[0] == "TYPE":
                types[parts[1]] = parts[2]
            continue
        m = _NAME.match(line)
        if not m:
            raise MetricsParseError(f"line {lineno}: no metric name in {raw[:80]!r}")
        name = m.group(0)
        pos = m.end()
        labels: dict[str, str] = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos, lineno)
        rest = line[pos:].split()
        if not rest or len(rest) > 2:
            raise MetricsParseError(f"line {lineno}: expected 'value [timestamp]' after {name}")
        value = _parse_value(rest[0], lineno)
        ts: int | None = None
        if len(rest) == 2:
            try:
                ts = int(rest[1])
            except ValueError:
                raise MetricsParseError(f"line {lineno}: bad timestamp {rest[1]!r}") from None
        samples.append(Sample(name=name, labels=labels, value=value, timestamp_ms=ts))
    return Exposition(samples=tuple(samples), types=types)


@dataclass(frozen=True)
class CacheConfig:
    """What ``vllm:cache_config_info`` says about the server's KV cache.

    ``labels`` keeps every label (minus ``engine``/``model_name``) for the report; the
    typed fields are the ones the bundle decides on.
    """

    block_size: int | None
    enable_prefix_caching: bool | None
    num_gpu_blocks: int | None
    labels: Mapping[str, str]

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> CacheConfig:
        kept = {k: v for k, v in labels.items() if k not in ("engine", "model_name")}
        return cls(
            block_size=_opt_int(kept.get("block_size")),
            enable_prefix_caching=_opt_bool(kept.get("enable_prefix_caching")),
            num_gpu_blocks=_opt_int(kept.get("num_gpu_blocks")),
            labels=kept,
        )


def _opt_int(text: str | None) -> int | None:
    if text is None or text in ("None", ""):
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def _opt_bool(text: str | None) -> bool | None:
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    return None


#: Counters read from a snapshot: field name -> (metric name, label filter).
_COUNTERS: Final[dict[str, tuple[str, dict[str, str]]]] = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries", {}),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", {}),
    "prompt_tokens_local_cache_hit": (
        "vllm:prompt_tokens_by_source", {"source": "local_cache_hit"}),
    "prompt_tokens_local_compute": ("vllm:prompt_tokens_by_source", {"source": "local_compute"}),
    "prompt_tokens_external_kv_transfer": (
        "vllm:prompt_tokens_by_source", {"source": "external_kv_transfer"}),
    "prompt_tokens": ("vllm:prompt_tokens", {}),
    "prompt_tokens_cached": ("vllm:prompt_tokens_cached", {}),
    "external_prefix_cache_queries": ("vllm:external_prefix_cache_queries", {}),
    "external_prefix_cache_hits": ("vllm:external_prefix_cache_hits", {}),
    "num_preemptions": ("vllm:num_preemptions", {}),
    "request_success": ("vllm:request_success", {}),
    "generation_tokens": ("vllm:generation_tokens", {}),
    # Histogram counts of the optional KV residency metrics (--kv-cache-metrics): they
    # are *sampled* block evictions, a sign of evictions rather than their number.
    "kv_block_evictions_sampled": ("vllm:kv_block_idle_before_evict_seconds_count", {}),
    # The engine's own time per request, histogram sums and count (vLLM v1
    # ``vllm/v1/metrics/stats.py``, ``IterationStats.update_from_finished_request``:
    # queued = scheduled_ts - queued_ts, prefill = first_token_ts - scheduled_ts, engine
    # core timestamps; exported by ``vllm/v1/metrics/loggers.py``): a client TTFT less
    # these is the time outside the engine (HTTP, tokenization, the API server), which
    # the TTFT model holds apart (prefixbench.report.ttft_predicted.outside_seconds).
    "engine_queue_seconds": ("vllm:request_queue_time_seconds_sum", {}),
    "engine_prefill_seconds": ("vllm:request_prefill_time_seconds_sum", {}),
    "engine_prefill_requests": ("vllm:request_prefill_time_seconds_count", {}),
}


@dataclass(frozen=True)
class CacheSignals:
    """The step-9 signals of one snapshot, summed over engines and models.

    A counter absent from the page is ``None`` (older or newer vLLM, or a metric that
    needs a flag), never 0: a report must not read "0 preemptions" from a missing metric.
    """

    prefix_cache_queries: float | None = None
    prefix_cache_hits: float | None = None
    prompt_tokens_local_cache_hit: float | None = None
    prompt_tokens_local_compute: float | None = None
    prompt_tokens_external_kv_transfer: float | None = None
    prompt_tokens: float | None = None
    prompt_tokens_cached: float | None = None
    external_prefix_cache_queries: float | None = None
    external_prefix_cache_hits: float | None = None
    num_preemptions: float | None = None
    request_success: float | None = None
    generation_tokens: float | None = None
    kv_block_evictions_sampled: float | None = None
    engine_queue_seconds: float | None = None
    engine_prefill_seconds: float | None = None
    engine_prefill_requests: float | None = None
    #: ``vllm:kv_cache_usage_perc`` (a fraction 0..1, despite the name): the highest over
    #: engines. A gauge, so it has no delta.
    kv_cache_usage: float | None = None
    #: ``process_start_time_seconds``: changes when the server restarted.
    process_start_time_seconds: float | None = None
    cache_config: CacheConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTERS}
        out["kv_cache_usage"] = self.kv_cache_usage
        out["process_start_time_seconds"] = self.process_start_time_seconds
        out["cache_config"] = (
            None if self.cache_config is None else dict(self.cache_config.labels))
        return out


def extract_signals(page: str | Exposition) -> CacheSignals:
    """Read the prefix-cache signals from a ``/metrics`` page (text or parsed)."""
    expo = parse_exposition(page) if isinstance(page, str) else page
    values: dict[str, Any] = {}
    for fname, (metric, labels) in _COUNTERS.items():
        values[fname] = expo.total(metric, **labels)
    usage = expo.find("vllm:kv_cache_usage_perc") or expo.find("vllm:gpu_cache_usage_perc")
    values["kv_cache_usage"] = max((s.value for s in usage), default=None)
    start = expo.find("process_start_time_seconds")
    values["process_start_time_seconds"] = min((s.value for s in start), default=None)
    info = expo.find("vllm:cache_config_info")
    values["cache_config"] = CacheConfig.from_labels(info[0].labels) if info else None
    return CacheSignals(**values)


@dataclass(frozen=True)
class SignalsDelta:
    """``after - before`` of every counter present in both snapshots, and both ratios."""

    counters: Mapping[str, float]
    cache_config: CacheConfig | None
    kv_cache_usage_after: float | None

    def get(self, name: str) -> float | None:
        return self.counters.get(name)

    @property
    def hits(self) -> float | None:
        return self.counters.get("prefix_cache_hits")

    @property
    def queries(self) -> float | None:
        return self.counters.get("prefix_cache_queries")

    @property
    def hit_ratio_queries(self) -> float | None:
        """``prefix_cache_hits / prefix_cache_queries``; ``None`` when nothing was queried.

        With ``--no-enable-prefix-caching`` both stay 0, so this is ``None`` there: use
        :attr:`hit_ratio_by_source`, which reads 0.0 on such a server.
        """
        q, h = self.queries, self.hits
        if q is None or h is None or q <= 0:
            return None
        return h / q

    @property
    def hit_ratio_by_source(self) -> float | None:
        """``local_cache_hit / (local_cache_hit + local_compute)`` (the tutorial's form)."""
        hit = self.counters.get("prompt_tokens_local_cache_hit")
        comp = self.counters.get("prompt_tokens_local_compute")
        if hit is None or comp is None or hit + comp <= 0:
            return None
        return hit / (hit + comp)

    def measured(self) -> dict[str, float | None]:
        """Both step-9 ratios and the token counts behind them (for a record)."""
        return {
            "hit_ratio_queries": self.hit_ratio_queries,
            "hit_ratio_by_source": self.hit_ratio_by_source,
            "hit_tokens": self.hits,
            "query_tokens": self.queries,
            "local_cache_hit_tokens": self.counters.get("prompt_tokens_local_cache_hit"),
            "local_compute_tokens": self.counters.get("prompt_tokens_local_compute"),
            "preemptions": self.counters.get("num_preemptions"),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": dict(self.counters),
            "hit_ratio_queries": self.hit_ratio_queries,
            "hit_ratio_by_source": self.hit_ratio_by_source,
            "kv_cache_usage_after": self.kv_cache_usage_after,
            "cache_config": None if self.cache_config is None else dict(self.cache_config.labels),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SignalsDelta:
        cfg = data.get("cache_config")
        return cls(
            counters={str(k): float(v) for k, v in dict(data.get("counters", {})).items()},
            cache_config=None if cfg is None else CacheConfig.from_labels(cfg),
            kv_cache_usage_after=data.get("kv_cache_usage_after"),
        )


def delta(before: CacheSignals, after: CacheSignals) -> SignalsDelta:
    """``after - before`` for every counter both snapshots have.

    Raises :class:`CounterReset` when the server restarted in between: a counter went
    down, or ``process_start_time_seconds`` changed. Counters only one snapshot has are
    left out (a metric cannot appear mid-run unless the server changed).
    """
    b_start, a_start = before.process_start_time_seconds, after.process_start_time_seconds
    if b_start is not None and a_start is not None and b_start != a_start:
        raise CounterReset(
            f"server restarted between the snapshots (process_start_time_seconds "
            f"{b_start!r} -> {a_start!r}); the delta is meaningless, rerun the benchmark")
    counters: dict[str, float] = {}
    for name in _COUNTERS:
        b, a = getattr(before, name), getattr(after, name)
        if b is None or a is None:
            continue
        if a < b:
            raise CounterReset(
                f"counter {name} went backwards ({b!r} -> {a!r}): the server restarted "
                f"between the snapshots; the delta is meaningless, rerun the benchmark")
        counters[name] = a - b
    return SignalsDelta(
        counters=counters,
        cache_config=after.cache_config or before.cache_config,
        kv_cache_usage_after=after.kv_cache_usage,
    )
