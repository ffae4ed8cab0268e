"""Read a run directory and decide: tables, verdicts, common issues, fleet spread.

Input is the run directory contract of the benchmark phase (``run.json``,
``<host>/fingerprint.json``, ``<host>/<configuration>/<workload>/rep<k>[.failed].json``).
Nothing here writes files; :mod:`prefixbench.report.write` does.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from prefixbench import criteria, instances
from prefixbench.fingerprint import (
    Fingerprint,
    FingerprintError,
    drift,
    group_by_identity,
)
from prefixbench.metrics import SignalsDelta
from prefixbench.report import verdicts
from prefixbench.report.economics import host_time
from prefixbench.report.model import (
    BASELINE,
    CACHED,
    HIGH_OVERLAP,
    NO_OVERLAP,
    Agg,
    BenchSummary,
    ColdWarm,
    FailureInfo,
    FleetMetric,
    FleetOutlier,
    FleetSummary,
    HitDeparture,
    HostSummary,
    Issue,
    Step7,
    Step7Row,
    Step9Row,
    Summary,
    Thresholds,
    agg,
)
from prefixbench.results import BenchmarkRecord, BenchResultError, FailureRecord
from prefixbench.stats import (
    coefficient_of_variation,
    mad,
    percentile,
    prefix_repetition_cold_flags,
    robust_z_scores,
)
from prefixbench.stats import median as _median
from prefixbench.sweep import tokenizer_dir
from prefixbench.whatif import Prediction, predict
from prefixbench.workloads import Workload, WorkloadError

__all__ = ["ReportInputError", "RunData", "build_summary", "fleet_values", "load_run",
           "record_prediction"]

_REP_FILE: Final = re.compile(r"^rep([0-9]+)(\.failed)?\.json$")
#: Words in a failure's error, stderr or journal that mean the server ran out of memory.
_OOM: Final = re.compile(
    r"out of memory|\bOOM\b|oom-kill|MemoryError|cannot allocate memory|failed to allocate|"
    r"insufficient memory|not enough memory|NRT_RESOURCE|KV cache (?:does not|doesn't) fit",
    re.IGNORECASE)
_START: Final = re.compile(
    r"fail(?:ed)? to start|did not become healthy|not healthy|health check|"
    r"start(?:ing)? the server|Application startup|exited|start request repeated",
    re.IGNORECASE)

FIX_ZERO_HITS: Final = (
    "The prefix_repetition dataset guarantees byte-identical prefixes, so this is a "
    "configuration or feature-enablement issue, not a data issue: confirm prefix caching "
    "is not disabled (--no-enable-prefix-caching must not be set on the cached server). "
    "With your own data, a single whitespace difference prevents hits at the block boundary.")
FIX_EVICTIONS: Final = (
    "The cache is full and evicts entries before they can be reused: reduce max_num_seqs "
    "or max_model_len to free memory for the prefix cache.")
FIX_OOM: Final = (
    "The KV cache does not fit in HBM: decrease VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION "
    "(the fraction of the memory budget allocated to the KV cache; default 0.30) so the "
    "cache is sized smaller at startup.")
FIX_NO_GAIN: Final = (
    "Hits without a TTFT gain mean the cached segments are not skipped: the prefix must "
    "span whole prefill segments (prefix_len a multiple of max_num_batched_tokens), and "
    "kv_segment_size_buckets must equal num_batched_tokens_buckets (supported: 512, 1024, "
    "2048, 4096) on both servers. Compare the two rendered units.")
FIX_CARRY_OVER: Final = (
    "Hits on the no-overlap workload come from prompts of an earlier workload on the same "
    "server (vLLM's prefix_repetition draws from one stream per --seed): give every "
    "workload and repetition its own seed (prefixbench plans them) or restart the server.")


class ReportInputError(ValueError):
    """The run directory cannot be reported on; the message says why, in one line."""


@dataclass
class RunData:
    """What a run directory holds, parsed."""

    run_dir: Path
    run: dict[str, Any]
    records: list[BenchmarkRecord] = field(default_factory=list)
    failures: list[tuple[FailureRecord, Path]] = field(default_factory=list)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or self.run_dir.name)

    @property
    def hosts(self) -> list[str]:
        named = [str(h) for h in self.run.get("hosts") or []]
        seen = {r.key.host for r in self.records} | {f.key.host for f, _ in self.failures}
        return named + sorted(seen - set(named))

    def workloads(self) -> dict[str, Workload]:
        out: dict[str, Workload] = {}
        for item in self.run.get("workloads") or []:
            try:
                w = Workload.from_dict(item)
            except (WorkloadError, TypeError, AttributeError):
                continue
            out[w.name] = w
        return out


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_run(run_dir: str | Path) -> RunData:
    """Parse a run directory; unreadable files become warnings, not errors."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportInputError(f"{root}: not a directory (expected results/<run_id>)")
    run: dict[str, Any] = {}
    warnings: list[str] = []
    run_json = root / "run.json"
    if run_json.exists():
        try:
            loaded = _read_json(run_json)
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{run_json}: unreadable ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ReportInputError(f"{run_json}: not a JSON object")
        run = loaded
        if run.get("schema_version", 1) != 1:
            raise ReportInputError(
                f"{run_json}: schema_version {run.get('schema_version')!r} is not 1")
    else:
        warnings.append("run.json is missing: hosts and workloads are taken from the files")
    data = RunData(run_dir=root, run=run, warnings=warnings)
    for path in sorted(root.glob("*/*/*/rep*.json")):
        m = _REP_FILE.match(path.name)
        if not m:
            continue
        try:
            raw = _read_json(path)
            if m.group(2):
                data.failures.append((FailureRecord.from_dict(raw, str(path)), path))
            else:
                data.records.append(BenchmarkRecord.from_dict(raw, str(path)))
        except (OSError, json.JSONDecodeError, BenchResultError, ValueError) as exc:
            warnings.append(f"{path.relative_to(root)}: skipped, unreadable ({exc})")
    done = {r.key for r in data.records}
    data.failures = [(f, p) for f, p in data.failures if f.key not in done]
    for host_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        fp_path = host_dir / "fingerprint.json"
        if not fp_path.exists():
            continue
        try:
            fp = Fingerprint.from_dict(_read_json(fp_path), str(fp_path))
        except (OSError, json.JSONDecodeError, FingerprintError) as exc:
            warnings.append(f"{fp_path.relative_to(root)}: skipped ({exc})")
            continue
        data.fingerprints[fp.host] = fp
    if not data.records and not data.failures and not run:
        raise ReportInputError(
            f"{root}: no run.json and no result files: is this a run directory "
            f"(results/<run_id>)?")
    return data


# -- one record ---------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _workload(record: BenchmarkRecord, known: Mapping[str, Workload]) -> Workload | None:
    if record.workload:
        try:
            return Workload.from_dict(record.workload)
        except (WorkloadError, TypeError):
            pass
    return known.get(record.key.workload)


def _delta(record: BenchmarkRecord) -> SignalsDelta | None:
    if not record.metrics_delta:
        return None
    try:
        return SignalsDelta.from_dict(record.metrics_delta)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class _RecordView:
    record: BenchmarkRecord
    workload: Workload | None
    hit_ratio_queries: float | None
    hit_ratio_by_source: float | None
    hit_tokens: float | None
    query_tokens: float | None
    expected_block_aligned: float | None
    expected_tutorial: float | None
    block_size: int | None
    prefix_caching_enabled: bool | None
    preemptions: float | None
    evictions_sampled: float | None
    kv_cache_usage: float | None
    per_request_ms: tuple[float, ...]
    per_request_cold: tuple[bool, ...] | None
    per_request_source: str | None
    note: str | None
    predicted: Prediction | None = None
    #: Per-request TTFT (ms) in send order, None for a failed request ("ttfts" only).
    ttft_aligned: tuple[float | None, ...] = ()
    expected_served: float | None = None
    junction_lost_blocks: float | None = None


def record_prediction(record: BenchmarkRecord, workload: Workload | None, run_dir: Path,
                      ) -> Prediction | None:
    """The what-if analyzer's hit ratio for the requests of one record: its workload and
    seed, the block size and KV capacity its server reported, the run's tokenizer copy and
    (custom workloads) the prepared prompts. ``None`` for a server without prefix caching
    (nothing to predict); a :class:`Prediction` with a note when inputs are missing."""
    d = _delta(record)
    cfg = d.cache_config if d is not None else None
    if cfg is not None and cfg.enable_prefix_caching is False:
        return None
    if workload is None:
        return Prediction(ratio=None, note="workload parameters unknown")
    block = _num(record.expected.get("block_size")) or (cfg.block_size if cfg else None)
    if not block:
        return Prediction(ratio=None, note="block size unknown (no cache_config_info)")
    seeded = workload if workload.seed is not None or record.seed is None \
        else workload.with_seed(record.seed)
    prompts = run_dir / "prompts" / f"{workload.name}.jsonl"
    return predict(seeded, block_size=int(block),
                   cache_config=cfg,
                   prompts_file=prompts if prompts.is_file() else None,
                   tokenizer_dir=tokenizer_dir(run_dir))


def _view(record: BenchmarkRecord, known: Mapping[str, Workload],
          run_dir: Path | None = None) -> _RecordView:
    w = _workload(record, known)
    d = _delta(record)
    m, e = record.measured, record.expected
    hq = _num(m.get("hit_ratio_queries"))
    hs = _num(m.get("hit_ratio_by_source"))
    hits = _num(m.get("hit_tokens"))
    queries = _num(m.get("query_tokens"))
    if d is not None:
        hq = hq if hq is not None else d.hit_ratio_queries
        hs = hs if hs is not None else d.hit_ratio_by_source
        hits = hits if hits is not None else d.hits
        queries = queries if queries is not None else d.queries
    cfg = d.cache_config if d is not None else None
    block = _num(e.get("block_size"))
    block_size = int(block) if block else (cfg.block_size if cfg else None)
    exp_block = _num(e.get("block_aligned_ratio", e.get("block_aligned")))
    exp_tut = _num(e.get("tutorial_ratio", e.get("tutorial")))
    if w is not None and not w.is_custom:
        if exp_tut is None:
            exp_tut = w.tutorial_ratio()
        if exp_block is None and block_size:
            exp_block = w.expected(block_size).ratio
    counters = d.counters if d is not None else {}
    pre = _num(m.get("preemptions"))
    values, cold, source, note = _per_request(record, w, queries)
    return _RecordView(
        ttft_aligned=_ttft_aligned(record),
        expected_served=_num(e.get("served_ratio")),
        junction_lost_blocks=_num(e.get("junction_lost_blocks")),
        record=record, workload=w, hit_ratio_queries=hq, hit_ratio_by_source=hs,
        hit_tokens=hits, query_tokens=queries, expected_block_aligned=exp_block,
        expected_tutorial=exp_tut, block_size=block_size,
        prefix_caching_enabled=cfg.enable_prefix_caching if cfg else None,
        preemptions=pre if pre is not None else counters.get("num_preemptions"),
        evictions_sampled=counters.get("kv_block_evictions_sampled"),
        kv_cache_usage=d.kv_cache_usage_after if d is not None else None,
        per_request_ms=values, per_request_cold=cold, per_request_source=source, note=note,
        predicted=None if run_dir is None else record_prediction(record, w, run_dir))


def _ttft_aligned(record: BenchmarkRecord) -> tuple[float | None, ...]:
    """Every request's TTFT in ms, in send order; None where the request failed."""
    try:
        detail = record.bench_result.detail
    except BenchResultError:
        return ()
    if detail.ttfts is None:
        return ()
    ok = detail.succeeded
    return tuple(v * 1000.0 if good else None
                 for v, good in zip(detail.ttfts, ok, strict=False))


def _per_request(
    record: BenchmarkRecord, w: Workload | None, queries: float | None,
) -> tuple[tuple[float, ...], tuple[bool, ...] | None, str | None, str | None]:
    """Per-request TTFTs in ms (or latencies), and cold flags rebuilt from the seed."""
    try:
        detail = record.bench_result.detail
    except BenchResultError:
        return (), None, None, "bench result unreadable"
    if detail.ttfts is not None:
        raw, source = detail.ttfts, "ttfts"
    elif detail.latencies:
        raw, source = detail.latencies, "latencies"
    else:
        return (), None, None, "no per-request detail saved"
    ok = detail.succeeded
    values = tuple(v * 1000.0 for v, good in zip(raw, ok, strict=False) if good)
    if w is None:
        return values, None, source, "workload parameters unknown: no cold/warm split"
    if w.is_custom:
        return values, None, source, None
    pre = w.pre_requests
    if queries:
        inferred = w.infer_pre_requests(queries)
        if inferred is not None:
            pre = inferred
    try:
        flags = prefix_repetition_cold_flags(
            record.seed, w.num_prompts, w.prefix_repetition_num_prefixes,
            shuffle=not w.disable_shuffle, pre_requests=pre)
    except ValueError as exc:
        return values, None, source, f"cold/warm split impossible: {exc}"
    if len(flags) != len(raw):
        return values, None, source, (
            f"{len(raw)} per-request values but {len(flags)} requests planned: no split")
    cold = tuple(c for c, good in zip(flags, ok, strict=True) if good)
    return values, cold, source, None


def _cold_warm(values: Sequence[float], cold: Sequence[bool], source: str) -> ColdWarm:
    cold_ms = tuple(v for v, c in zip(values, cold, strict=True) if c)
    warm_ms = tuple(v for v, c in zip(values, cold, strict=True) if not c)
    slowest = max(range(len(values)), key=lambda i: values[i])
    return ColdWarm(
        source=source, cold_ms=cold_ms, warm_ms=warm_ms,
        p99_all_ms=percentile(values, 99),
        p99_warm_ms=percentile(warm_ms, 99) if warm_ms else None,
        median_cold_ms=_median(cold_ms) if cold_ms else None,
        median_warm_ms=_median(warm_ms) if warm_ms else None,
        slowest_is_cold=bool(cold[slowest]) and bool(warm_ms))


def _median_or_none(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return _median(kept) if kept else None


def _sum(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return math.fsum(kept) if kept else None


def _bench_summary(views: Sequence[_RecordView]) -> BenchSummary:
    views = sorted(views, key=lambda v: v.record.key.repetition)
    first = views[0]
    key = first.record.key
    results = [v.record.bench_result for v in views]
    values: list[float] = []
    colds: list[bool] = []
    sources = {v.per_request_source for v in views if v.per_request_source}
    all_flags = True
    notes: list[str] = []
    for v in views:
        values.extend(v.per_request_ms)
        if v.per_request_cold is None:
            all_flags = False
        else:
            colds.extend(v.per_request_cold)
        if v.note:
            notes.append(f"rep{v.record.key.repetition}: {v.note}")
    source = "ttfts" if sources == {"ttfts"} else ("latencies" if sources else None)
    cold_warm = None
    if all_flags and values and source is not None and len(colds) == len(values):
        cold_warm = _cold_warm(values, colds, source)
    w = first.workload
    kv = [v.kv_cache_usage for v in views if v.kv_cache_usage is not None]
    predictions = [v.predicted for v in views if v.predicted is not None]
    prediction_notes = sorted({p.note for p in predictions if p.note})
    return BenchSummary(
        host=key.host, configuration=key.configuration, workload=key.workload,
        repetitions=tuple(v.record.key.repetition for v in views),
        median_ttft_ms=agg([r.median_ttft_ms for r in results]),
        p99_ttft_ms=agg([r.p99_ttft_ms for r in results]),
        mean_ttft_ms=agg([_num(r.data.get("mean_ttft_ms")) for r in results]),
        output_throughput=agg([r.output_throughput for r in results]),
        completed=sum(r.completed for r in results),
        failed=sum(r.failed for r in results),
        hit_ratio_queries=agg([v.hit_ratio_queries for v in views]),
        hit_ratio_by_source=agg([v.hit_ratio_by_source for v in views]),
        expected_block_aligned=first.expected_block_aligned,
        expected_tutorial=first.expected_tutorial,
        block_size=first.block_size,
        prefix_caching_enabled=first.prefix_caching_enabled,
        preemptions=_sum(v.preemptions for v in views),
        evictions_sampled=_sum(v.evictions_sampled for v in views),
        kv_cache_usage_max=max(kv) if kv else None,
        hit_tokens=_sum(v.hit_tokens for v in views),
        query_tokens=_sum(v.query_tokens for v in views),
        request_rate=None if w is None else w.request_rate,
        output_len=None if w is None else w.output_len,
        max_concurrency=None if w is None else w.max_concurrency,
        cold_warm=cold_warm,
        per_request_ms=tuple(values),
        per_request_cold=tuple(colds) if cold_warm is not None else (),
        notes=tuple(notes),
        predicted_hit_ratio=agg([p.ratio for p in predictions]),
        prediction_note="; ".join(prediction_notes) or None,
        ttft_by_rep=tuple(v.ttft_aligned for v in views if v.ttft_aligned),
        expected_served=_median_or_none([v.expected_served for v in views]),
        junction_lost_blocks=_sum(v.junction_lost_blocks for v in views))


# -- tables --------------------------------------------------------------------------------

STEP7_ROWS: Final = (
    ("baseline (high overlap)", BASELINE, HIGH_OVERLAP),
    ("cached (high overlap)", CACHED, HIGH_OVERLAP),
    ("baseline (no overlap)", BASELINE, NO_OVERLAP),
    ("cached (no overlap)", CACHED, NO_OVERLAP),
)


def _med(a: Agg | None) -> float | None:
    return None if a is None else a.median


def _step7(host: HostView) -> Step7:
    rows = []
    for label, conf, role in STEP7_ROWS:
        b = host.role(conf, role)
        rows.append(Step7Row(label=label, configuration=conf,
                             workload=host.roles.get(role, role),
                             median_ttft_ms=None if b is None else b.median_ttft_ms,
                             output_throughput=None if b is None else b.output_throughput))
    reduction: dict[str, float | None] = {}
    gain: dict[str, float | None] = {}
    for wl in (HIGH_OVERLAP, NO_OVERLAP):
        base, cached = host.role(BASELINE, wl), host.role(CACHED, wl)
        bt = _med(base.median_ttft_ms) if base else None
        ct = _med(cached.median_ttft_ms) if cached else None
        reduction[wl] = (1 - ct / bt) * 100 if bt and ct is not None else None
        bo = _med(base.output_throughput) if base else None
        co = _med(cached.output_throughput) if cached else None
        gain[wl] = co / bo if bo and co is not None else None
    return Step7(rows=tuple(rows), ttft_reduction_pct=reduction, throughput_gain=gain)


def _step9(benches: Sequence[BenchSummary]) -> tuple[Step9Row, ...]:
    rows = []
    for b in benches:
        # A server without prefix caching is expected to hit nothing.
        off = b.configuration == BASELINE or b.prefix_caching_enabled is False
        rows.append(Step9Row(
            configuration=b.configuration, workload=b.workload,
            hit_ratio_queries=_med(b.hit_ratio_queries),
            hit_ratio_by_source=_med(b.hit_ratio_by_source),
            expected_block_aligned=0.0 if off else b.expected_block_aligned,
            expected_tutorial=0.0 if off else b.expected_tutorial,
            hit_tokens=b.hit_tokens, query_tokens=b.query_tokens,
            predicted=0.0 if off else _med(b.predicted_hit_ratio),
            prediction_note=None if off else b.prediction_note,
            expected_served=0.0 if off else b.expected_served))
    return tuple(rows)


# -- issues ----------------------------------------------------------------------------------

def _issues(host: HostView, failures: Sequence[FailureInfo], t: Thresholds) -> list[Issue]:
    out: list[Issue] = []
    name = host.name
    ch = host.role(CACHED, HIGH_OVERLAP)
    if ch is not None:
        ratios = [a.median for a in (ch.hit_ratio_by_source, ch.hit_ratio_queries) if a]
        if (ratios and max(ratios) == 0) or ch.prefix_caching_enabled is False:
            ev = (f"cached high_overlap hit ratio "
                  f"{max(ratios) * 100 if ratios else 0:.1f}%")
            if ch.prefix_caching_enabled is False:
                ev += "; vllm:cache_config_info says enable_prefix_caching=False"
            out.append(Issue("zero_hit_rate", "No TTFT improvement: 0% cache hit rate",
                             name, ev, FIX_ZERO_HITS))
        base = host.role(BASELINE, HIGH_OVERLAP)
        if ratios and max(ratios) > 0 and base and base.median_ttft_ms and ch.median_ttft_ms:
            red = 1 - ch.median_ttft_ms.median / base.median_ttft_ms.median
            if red < t.no_gain_max_reduction:
                out.append(Issue(
                    "hits_without_ttft_gain", "Cache hits but no TTFT improvement", name,
                    f"hit ratio {max(ratios) * 100:.1f}% but median TTFT reduction "
                    f"{red * 100:.1f}% (< {t.no_gain_max_reduction:.0%})", FIX_NO_GAIN,
                    source="bundle"))
    for b in host.benches.values():
        if b.configuration != CACHED:
            continue
        signs = []
        if b.preemptions:
            signs.append(f"{b.preemptions:.0f} preemptions")
        if b.evictions_sampled:
            signs.append(f"{b.evictions_sampled:.0f} sampled block evictions")
        # (No KV-usage sign: the gauge is read when the server is idle, where it is 0.)
        if signs:
            out.append(Issue("evictions_under_load", "Cache evictions under sustained load",
                             name, f"{b.workload}: " + ", ".join(signs), FIX_EVICTIONS))
    cn = host.role(CACHED, NO_OVERLAP)
    if cn is not None and cn.hit_ratio_by_source and cn.hit_ratio_by_source.median > 0 and (
            cn.expected_block_aligned == 0):
        out.append(Issue(
            "carry_over_hits", "Hits on the no-overlap workload (prompts reused across runs)",
            name, f"cached no_overlap hit ratio {cn.hit_ratio_by_source.median * 100:.2f}% "
            f"where 0% is expected", FIX_CARRY_OVER, source="bundle"))
    for f in failures:
        text = f"{f.error}\n{f.log_tail}"
        if _OOM.search(text):
            out.append(Issue("server_oom", "Server fails to start with OOM", name,
                             f"{f.configuration}/{f.workload} rep{f.repetition}: {f.error}",
                             FIX_OOM))
        elif _START.search(text):
            out.append(Issue(
                "server_start_failed", "Server failed to start or became unhealthy", name,
                f"{f.configuration}/{f.workload} rep{f.repetition}: {f.error}",
                "Read the journal tail below (journalctl -u vllm-<configuration>). If it "
                "shows an out-of-memory error: " + FIX_OOM, source="bundle"))
    return out


# -- hosts and fleet ---------------------------------------------------------------------------

@dataclass
class HostView:
    name: str
    benches: dict[tuple[str, str], BenchSummary]
    #: Criterion kind -> the workload that serves it (prefixbench.criteria).
    roles: Mapping[str, str] = field(default_factory=dict)

    def get(self, configuration: str, workload: str) -> BenchSummary | None:
        return self.benches.get((configuration, workload))

    def role(self, configuration: str, role: str) -> BenchSummary | None:
        name = self.roles.get(role)
        return None if name is None else self.benches.get((configuration, name))


def _failure_info(rec: FailureRecord, path: Path, root: Path) -> FailureInfo:
    tail = rec.journal_tail or ""
    extra_tail = rec.extra.get("journal_tail") if rec.extra else None
    if not tail and isinstance(extra_tail, list):
        tail = "\n".join(str(x) for x in extra_tail)
    elif not tail and isinstance(extra_tail, str):
        tail = extra_tail
    if rec.stderr:
        tail = (rec.stderr.strip() + ("\n" + tail if tail else "")).strip()
    lines = tail.splitlines()[-20:]
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    return FailureInfo(host=rec.key.host, configuration=rec.key.configuration,
                       workload=rec.key.workload, repetition=rec.key.repetition,
                       error=rec.error, returncode=rec.returncode, path=rel,
                       log_tail="\n".join(lines))


def _dropped_hosts(data: RunData) -> list[FailureInfo]:
    """A host the run started with that has neither a result nor a failure marker once
    the run has ended: it dropped out (unreachable, or failed before its first bench)."""
    if not data.run.get("ended_at"):
        return []  # still running: its benches may simply not have come yet
    seen = {r.key.host for r in data.records} | {f.key.host for f, _ in data.failures}
    return [FailureInfo(host=h, configuration="-", workload="-", repetition=0,
                        error="no result at all from this host: it dropped out "
                              "(unreachable, or failed before its first bench)",
                        returncode=None, path="run.json", log_tail="")
            for h in (str(x) for x in data.run.get("hosts") or []) if h not in seen]


def fleet_values(hosts: Sequence[HostSummary]) -> dict[str, dict[str, float]]:
    """Per metric name, each host's value (its median over repetitions)."""
    metrics: dict[str, dict[str, float]] = {}

    def put(name: str, host: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            metrics.setdefault(name, {})[host] = value

    for h in hosts:
        for b in h.benches:
            prefix = f"{b.configuration}/{b.workload}"
            put(f"{prefix}/median_ttft_ms", h.host, _med(b.median_ttft_ms))
            put(f"{prefix}/p99_ttft_ms", h.host, _med(b.p99_ttft_ms))
            put(f"{prefix}/output_throughput", h.host, _med(b.output_throughput))
            if b.configuration == CACHED:
                put(f"{prefix}/hit_ratio", h.host,
                    _med(b.hit_ratio_by_source) if b.hit_ratio_by_source
                    else _med(b.hit_ratio_queries))
        for wl, v in h.step7.ttft_reduction_pct.items():
            put(f"{wl}/ttft_reduction_pct", h.host, v)
    return metrics


def _fleet_metric(name: str, values: Mapping[str, float], t: Thresholds) -> FleetMetric:
    hosts = sorted(values)
    xs = [values[h] for h in hosts]
    med = _median(xs)
    zs = robust_z_scores(xs) if len(xs) >= 3 else [0.0] * len(xs)
    outs: list[FleetOutlier] = []
    relative_ok = not name.endswith(("hit_ratio", "ttft_reduction_pct"))
    for h, x, z in zip(hosts, xs, zs, strict=True):
        rel = (x / med - 1) if med else None
        reasons = []
        if len(xs) >= 3 and abs(z) > t.outlier_z:
            reasons.append(f"robust z {z:+.1f} (> {t.outlier_z})")
        if len(xs) >= 3 and relative_ok and rel is not None and abs(rel) > t.outlier_rel:
            reasons.append(f"{rel * 100:+.0f}% from the fleet median (> {t.outlier_rel:.0%})")
        if reasons:
            outs.append(FleetOutlier(host=h, value=x, robust_z=z, rel_dev=rel,
                                     reasons=tuple(reasons)))
    return FleetMetric(name=name, values=dict(zip(hosts, xs, strict=True)), median=med,
                       cv=coefficient_of_variation(xs), mad=mad(xs),
                       robust_z=dict(zip(hosts, zs, strict=True)), outliers=tuple(outs))


def _family(h: HostSummary) -> str:
    fp = h.fingerprint
    if fp is not None and fp.family:
        return fp.family
    return instances.family(fp.instance_type) if fp is not None and fp.instance_type else "?"


def _fleet(hosts: Sequence[HostSummary], data: RunData, t: Thresholds) -> FleetSummary:
    # Trn2 and Trn3 hosts are different populations: spread and outliers are computed
    # within each instance family (metric names prefixed with it when there are several).
    families: dict[str, list[HostSummary]] = {}
    for h in hosts:
        families.setdefault(_family(h), []).append(h)
    metrics = []
    for fam, members in sorted(families.items()):
        prefix = f"{fam}: " if len(families) > 1 else ""
        metrics += [_fleet_metric(prefix + n, v, t)
                    for n, v in sorted(fleet_values(members).items())]
    departures: list[HitDeparture] = []
    for h in hosts:
        for b in h.benches:
            if b.configuration != CACHED or b.expected_block_aligned is None:
                continue
            for sig, a in (("queries", b.hit_ratio_queries), ("by_source", b.hit_ratio_by_source)):
                if a is not None and abs(a.median - b.expected_block_aligned) > (
                        t.hit_ratio_max_abs_diff):
                    departures.append(HitDeparture(
                        host=h.host, configuration=b.configuration, workload=b.workload,
                        signal=sig, measured=a.median, expected=b.expected_block_aligned))
    fps = [data.fingerprints[h.host] for h in hosts if h.host in data.fingerprints]
    return FleetSummary(
        hosts=tuple(h.host for h in hosts), metrics=tuple(metrics),
        hit_departures=tuple(departures),
        fingerprint_groups=tuple(group_by_identity(fps)), drift=tuple(drift(fps)),
        hosts_without_fingerprint=tuple(h.host for h in hosts
                                        if h.host not in data.fingerprints))


def build_summary(
    run_dir: str | Path,
    thresholds: Thresholds | None = None,
    *,
    now: datetime | None = None,
) -> Summary:
    """Everything the report shows, decided from the run directory."""
    t = thresholds or Thresholds()
    data = load_run(run_dir)
    known = data.workloads()
    views = [_view(r, known, data.run_dir) for r in data.records]
    grouped: dict[str, dict[tuple[str, str], list[_RecordView]]] = {}
    for v in views:
        k = v.record.key
        grouped.setdefault(k.host, {}).setdefault((k.configuration, k.workload), []).append(v)
    failures = [_failure_info(f, p, data.run_dir) for f, p in data.failures]
    failures += _dropped_hosts(data)
    roles = dict(criteria.assign(list(known.values())).serving)
    hosts: list[HostSummary] = []
    for host in data.hosts:
        benches = {key: _bench_summary(vs) for key, vs in sorted(grouped.get(host, {}).items())}
        hv = HostView(host, benches, roles)
        host_failures = [f for f in failures if f.host == host]
        fp = data.fingerprints.get(host)
        prices = data.run.get("price_per_instance_hour") or {}
        price = prices.get(fp.instance_type) if fp is not None and fp.instance_type else None
        spans = [(r.started_at, r.ended_at) for r in data.records if r.key.host == host]
        spans += [(f.started_at, f.ended_at) for f, _ in data.failures if f.key.host == host]
        hosts.append(HostSummary(
            time=host_time(data.run_dir, host, spans,
                           float(price) if isinstance(price, int | float) else None),
            host=host, benches=tuple(benches.values()), step7=_step7(hv),
            step9=_step9(list(benches.values())), verdicts=verdicts.verdicts(hv, t),
            issues=tuple(_issues(hv, host_failures, t)),
            fingerprint=data.fingerprints.get(host), failures=tuple(host_failures),
            roles=roles))
    return Summary(
        run_id=data.run_id, run=data.run,
        generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        thresholds=t, hosts=tuple(hosts), fleet=_fleet(hosts, data, t),
        failures=tuple(failures), warnings=tuple(data.warnings))
