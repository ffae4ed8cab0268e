"""Assemble a run's summary: read the run directory, then decide per host and for the fleet.

:func:`build_summary` is the whole decision, in order: :mod:`prefixbench.report.load`
reads the run directory; :mod:`prefixbench.report.records` and
:mod:`prefixbench.report.aggregate` turn each host's records into benchmark summaries and
the tutorial's tables; :mod:`prefixbench.report.verdicts` judges the four criteria,
:mod:`prefixbench.report.issues` finds the common issues and
:mod:`prefixbench.report.fleet` the fleet's spread. Nothing here writes files;
:mod:`prefixbench.report.write` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from prefixbench.bench import criteria
from prefixbench.engines.kvcapacity import kv_cache_line
from prefixbench.measure.metrics import CacheConfig
from prefixbench.measure.records import BenchmarkRecord
from prefixbench.report import goodput, shortfall, ttft_predicted, verdicts
from prefixbench.report.aggregate import HostView, bench_summary, step7_of, step9_of
from prefixbench.report.economics import host_time
from prefixbench.report.fleet import fleet_summary
from prefixbench.report.issues import common_issues
from prefixbench.report.load import ReportInputError, dropped_hosts, failure_info, load_run
from prefixbench.report.model import HostSummary, Summary
from prefixbench.report.records import RecordView, record_view
from prefixbench.report.vocab import Thresholds

# ReportInputError is re-exported: plugins/action/prefixbench_report.py imports it from here.
__all__ = ["ReportInputError", "build_summary"]


def kv_cache_of(records: Sequence[BenchmarkRecord]) -> str | None:
    """The KV-cache line of one host (:func:`prefixbench.engines.kvcapacity.kv_cache_line`)
    from its prefix-caching servers' ``vllm:cache_config_info``, as each record keeps it;
    distinct lines joined, then the engine model the expectations assumed (a record's
    ``expected_scheduler`` / ``expected_kv_manager``, and where the scheduler was read:
    ``expected_scheduler_source``, the server's command line; records made before it say
    the hosts' platform's, :func:`prefixbench.engines.platforms.engine_model`). ``None``
    without a record of a prefix-caching server."""
    lines: list[str] = []
    assumed = [f"{e['expected_scheduler']} over {e.get('expected_kv_manager')}"
               + (f" (from {e['expected_scheduler_source']})"
                  if e.get("expected_scheduler_source") else "")
               for r in records if (e := getattr(r, "expected", None) or {})
               and e.get("expected_scheduler")]
    if assumed:
        lines.append("the expectation assumed " + ", ".join(dict.fromkeys(assumed)))
    labelled = False
    for record in records:
        labels = (record.metrics_delta or {}).get("cache_config")
        if not isinstance(labels, dict) or not labels:
            continue
        labelled = True
        if CacheConfig.from_labels(labels).enable_prefix_caching is False:
            continue
        line = kv_cache_line(labels)
        if line not in lines:
            lines.insert(len(lines) - bool(assumed), line)
    if records and not labelled:
        return "; ".join([kv_cache_line(None), *lines])
    return "; ".join(lines) or None


def build_summary(
    run_dir: str | Path,
    thresholds: Thresholds | None = None,
    *,
    now: datetime | None = None,
    accept_unchecksummed: bool = False,
) -> Summary:
    """Everything the report shows, decided from the run directory. Results without a
    checksum are benches without a result unless ``accept_unchecksummed`` (a run of an
    older version): then they are used, and the report warns on its first screen."""
    t = thresholds or Thresholds()
    data = load_run(run_dir, accept_unchecksummed=accept_unchecksummed)
    known = data.workloads()
    # A what-if replay for custom workloads only: a tutorial workload's record keeps the
    # replay of the prompts its server was sent (expected.served_ratio), which the report
    # shows and judges against.
    views = [record_view(r, known, data.run_dir, custom_only=True) for r in data.records]
    grouped: dict[str, dict[tuple[str, str], list[RecordView]]] = {}
    for v in views:
        k = v.record.key
        grouped.setdefault(k.host, {}).setdefault((k.configuration, k.workload), []).append(v)
    failures = [failure_info(f, p, data.run_dir) for f, p in data.failures]
    failures += data.rejected + dropped_hosts(data)
    roles = dict(criteria.assign(list(known.values())).serving)
    ladder = goodput.ladder_of_run(data.run)
    hosts: list[HostSummary] = []
    for host in data.hosts:
        benches = {key: bench_summary(vs) for key, vs in sorted(grouped.get(host, {}).items())}
        hv = HostView(host, benches, roles)
        host_failures = [f for f in failures if f.host == host]
        fp = data.fingerprints.get(host)
        prices = data.run.get("price_per_instance_hour") or {}
        price = prices.get(fp.instance_type) if fp is not None and fp.instance_type else None
        spans = [(r.started_at, r.ended_at) for r in data.records if r.key.host == host]
        spans += [(f.started_at, f.ended_at) for f, _ in data.failures if f.key.host == host]
        first_bench: dict[str, str] = {}
        for r in data.records:
            if r.key.host == host and (r.key.configuration not in first_bench or
                                       r.started_at < first_bench[r.key.configuration]):
                first_bench[r.key.configuration] = r.started_at
        hosts.append(HostSummary(
            time=host_time(data.run_dir, host, spans,
                           float(price) if isinstance(price, int | float) else None,
                           first_bench),
            host=host, benches=tuple(benches.values()), step7=step7_of(hv),
            step9=step9_of(list(benches.values())), verdicts=verdicts.verdicts(hv, t),
            issues=tuple(common_issues(hv, host_failures, t,
                                       fp.platform if fp is not None else None)),
            fingerprint=data.fingerprints.get(host), failures=tuple(host_failures),
            roles=roles, shortfalls={b.workload: causes for b in benches.values()
                                     if (causes := shortfall.explain(b))},
            goodput=goodput.goodput_of(tuple(benches.values()), ladder, roles),
            kv_cache=kv_cache_of([r for r in data.records if r.key.host == host]),
            ttft_predicted=ttft_predicted.for_host(
                [r for r in [*data.records, *data.calibration] if r.key.host == host],
                load_max_diff=t.other_load_max_diff)))
    return Summary(
        run_id=data.run_id, run=data.run,
        generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        thresholds=t, hosts=tuple(hosts), fleet=fleet_summary(hosts, data, t),
        failures=tuple(failures), warnings=tuple(data.warnings),
        unchecksummed=tuple(data.unchecksummed))
