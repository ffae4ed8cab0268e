"""The tutorial's four confirmation criteria, decided with intervals.

Each criterion is judged on the workload that serves it (:mod:`prefixbench.bench.criteria`:
by what the workload is, never by its name); a criterion no workload serves is
``NOT_RUN``. Timing criteria compare the two servers request by request: both run every
(workload, repetition) with the same seed, so the comparison is paired, and
:func:`prefixbench.measure.stats.paired_ratio_interval` gives the ratio of median TTFTs with a
95% bootstrap interval (repetitions, then request pairs). A verdict is

- ``PASS`` when the whole interval is on the passing side of the threshold,
- ``FAIL`` when the whole interval is on the failing side,
- ``INCONCLUSIVE`` when the interval straddles it (the text says about how many
  repetitions would decide it), or when a result it needs is missing.

The hit-rate criterion compares counters, not timings: it is exact, not sampled, and
keeps its fixed tolerance. docs/reading-the-report.md states every threshold as this
module applies it.

A pairing holds the prompts equal, not the machine: when the rest of the machine was
busier during one configuration's runs than the other's (the share of its CPU that
neither the server nor the bench client used, prefixbench.measure.hostload, differing by
more than ``Thresholds.other_load_max_diff``), a timing PASS or FAIL says as much about
that load as about caching, and becomes INCONCLUSIVE, saying so (:func:`unequal_load`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from prefixbench.bench.criteria import HIGH_OVERLAP, NO_OVERLAP, SUSTAINED
from prefixbench.measure.stats import RatioInterval, paired_ratio_interval, repetitions_to_decide
from prefixbench.report.bench_model import Agg, BenchSummary
from prefixbench.report.model import Verdict
from prefixbench.report.vocab import (
    BASELINE,
    CACHED,
    FAIL,
    INCONCLUSIVE,
    NOT_RUN,
    PASS,
    Status,
    Thresholds,
)

__all__ = ["RoleView", "decide", "verdicts"]


class RoleView(Protocol):
    """What a verdict reads of one host: its benches by configuration and role."""

    roles: Mapping[str, str]

    def role(self, configuration: str, role: str) -> BenchSummary | None: ...


def decide(interval: RatioInterval, threshold: float) -> Status:
    """PASS when the interval lies at or below ``threshold``, FAIL when above it."""
    if interval.high <= threshold:
        return PASS
    if interval.low > threshold:
        return FAIL
    return INCONCLUSIVE


def _range(a: Agg | None) -> str:
    if a is None:
        return "n/a"
    if a.n == 1:
        return f"{a.median:.1f}"
    return f"{a.median:.1f} (min {a.min:.1f}, max {a.max:.1f}, n={a.n})"


def _interval_text(iv: RatioInterval) -> str:
    return (f"ratio {iv.estimate:.3f} [{iv.confidence:.0%} interval {iv.low:.3f} to "
            f"{iv.high:.3f}; {iv.pairs} request pairs, {iv.repetitions} repetition(s)]")


def _undecided_text(iv: RatioInterval, threshold: float) -> str:
    need = repetitions_to_decide(iv, threshold)
    if need is None:
        return ("; the estimate is too close to the threshold for more repetitions to "
                "decide it")
    return f"; about {need} repetitions (prefixbench_repetitions) would decide it"


def _noise_note(iv: RatioInterval) -> str:
    return ("; one repetition: the interval holds request-to-request noise only, "
            "not run-to-run noise (prefixbench_repetitions >= 3 measures it)"
            if iv.repetitions == 1 else "")


def _missing(role_name: str, host: RoleView, *configurations: str) -> str | None:
    """Why a criterion cannot be judged on this host, or None when it can."""
    workload = host.roles.get(role_name)
    if workload is None:
        return None
    gone = [f"{c}/{workload}" for c in configurations if host.role(c, role_name) is None]
    if gone:
        return f"no result for {', '.join(gone)} (see the failures below)"
    return None


def _interval(host: RoleView, role_name: str) -> RatioInterval | None:
    base, cached = host.role(BASELINE, role_name), host.role(CACHED, role_name)
    if base is None or cached is None or not base.ttft_by_rep or not cached.ttft_by_rep:
        return None
    return paired_ratio_interval(base.ttft_by_rep, cached.ttft_by_rep)


def _not_run(name: str, crit: str, thr: str, role_name: str) -> Verdict:
    return Verdict(name, crit, thr, NOT_RUN,
                   f"no {role_name.replace('_', '-')} workload in this run (declare one "
                   f"with criterion: {role_name})")


def _timing_verdict(host: RoleView, role_name: str, name: str, crit: str, *, thr: str,
                    threshold: float) -> tuple[Verdict, RatioInterval | None]:
    if role_name not in host.roles:
        return _not_run(name, crit, thr, role_name), None
    why = _missing(role_name, host, BASELINE, CACHED)
    if why:
        return Verdict(name, crit, thr, INCONCLUSIVE, why), None
    iv = _interval(host, role_name)
    base, cached = host.role(BASELINE, role_name), host.role(CACHED, role_name)
    assert base is not None and cached is not None  # checked by _missing
    if iv is None:
        return Verdict(name, crit, thr, INCONCLUSIVE,
                       "no per-request TTFTs on both servers (save_detailed off, or every "
                       "request failed): nothing to build an interval from"), None
    status = decide(iv, threshold)
    detail = (f"{host.roles[role_name]}: cached {_range(cached.median_ttft_ms)} ms vs "
              f"baseline {_range(base.median_ttft_ms)} ms median TTFT: "
              f"{_interval_text(iv)}{_noise_note(iv)}")
    if status == INCONCLUSIVE:
        detail += _undecided_text(iv, threshold)
    return Verdict(name, crit, thr, status, detail, {
        "workload": host.roles[role_name],
        "baseline_median_ttft_ms": None if base.median_ttft_ms is None
        else base.median_ttft_ms.median,
        "cached_median_ttft_ms": None if cached.median_ttft_ms is None
        else cached.median_ttft_ms.median,
        "ratio": iv.estimate, "ratio_low": iv.low, "ratio_high": iv.high,
        "ttft_reduction_pct": (1 - iv.estimate) * 100, "threshold": threshold,
        "repetitions": iv.repetitions, "pairs": iv.pairs}), iv


def lower_ttft(host: RoleView, t: Thresholds) -> Verdict:
    crit = ("The high-overlap workload shows measurably lower median TTFT compared to the "
            "baseline.")
    thr = (f"cached / baseline median TTFT, {t.confidence:.0%} interval: PASS when it lies "
           f"at or below {t.lower_ttft_max_ratio:.2f} (at least "
           f"{(1 - t.lower_ttft_max_ratio):.0%} lower), FAIL when above, else INCONCLUSIVE")
    return _timing_verdict(host, HIGH_OVERLAP, "high_overlap_ttft_lower", crit, thr=thr,
                           threshold=t.lower_ttft_max_ratio)[0]


def no_regression(host: RoleView, t: Thresholds) -> Verdict:
    crit = ("The no-overlap workload shows no meaningful TTFT difference (confirms no "
            "regression from enabling caching).")
    limit = 1 + t.no_overlap_max_rel_diff
    thr = (f"cached / baseline median TTFT, {t.confidence:.0%} interval: PASS when it lies "
           f"at or below {limit:.2f} (no more than {t.no_overlap_max_rel_diff:.0%} slower; "
           f"one-sided: a regression is what the criterion guards against), FAIL when "
           f"above, else INCONCLUSIVE")
    verdict, iv = _timing_verdict(host, NO_OVERLAP, "no_overlap_no_regression", crit,
                                  thr=thr, threshold=limit)
    if iv is not None and iv.high < 1 - t.no_overlap_max_rel_diff:
        verdict = Verdict(verdict.name, crit, thr, verdict.status, verdict.detail + (
            "; cached is faster, which is no regression: on a workload with nothing to "
            "reuse, expect noise or a difference between the two servers' start-ups"),
            verdict.numbers)
    return verdict


def hit_rate(host: RoleView, t: Thresholds) -> Verdict:
    name = "hit_rate_matches_expected"
    crit = ("The Prometheus cache hit rate matches the expected ratio derived from "
            "num_prefixes, num_prompts, prefix_len and suffix_len.")
    thr = (f"both signals within {t.hit_ratio_max_abs_diff * 100:.1f} percentage point(s) "
           f"of the expectation, on the cached high- and no-overlap runs (counters: exact, "
           f"no interval). The expectation is computed from the tokens the server sees "
           f"(the bench's prompts re-encoded and replayed), else the block-aligned formula")
    roles = [r for r in (HIGH_OVERLAP, NO_OVERLAP) if r in host.roles]
    if not roles:
        return Verdict(name, crit, thr, NOT_RUN,
                       "no high- or no-overlap workload in this run")
    numbers: dict[str, float | str | None] = {}
    parts: list[str] = []
    status: Status = PASS
    for role_name in roles:
        wl = host.roles[role_name]
        b = host.role(CACHED, role_name)
        exp = None if b is None else (b.expected_served if b.expected_served is not None
                                      else b.expected_block_aligned)
        if b is None or exp is None:
            status = INCONCLUSIVE if status == PASS else status
            parts.append(f"{wl}: {'no result' if b is None else 'no expectation (block size)'}")
            continue
        numbers[f"{role_name}_expected"] = exp
        numbers[f"{role_name}_expected_block_aligned"] = b.expected_block_aligned
        numbers[f"{role_name}_expected_tutorial"] = b.expected_tutorial
        if b.expected_served is not None and b.expected_block_aligned is not None:
            lost = b.junction_lost_blocks or 0
            parts.append(f"{wl} expected {exp * 100:.2f}% from the served tokens (block-"
                         f"aligned formula {b.expected_block_aligned * 100:.2f}%; "
                         f"{lost:.0f} block(s) lost where prefix and suffix re-split)")
        seen_any = False
        for sig, a in (("queries", b.hit_ratio_queries), ("by_source", b.hit_ratio_by_source)):
            if a is None:
                continue
            seen_any = True
            numbers[f"{role_name}_{sig}"] = a.median
            diff = a.median - exp
            if abs(diff) > t.hit_ratio_max_abs_diff:
                status = FAIL
            parts.append(f"{wl} {sig} {a.median * 100:.2f}% vs expected {exp * 100:.2f}% "
                         f"({diff * 100:+.2f} pp)")
        if not seen_any:
            status = INCONCLUSIVE if status == PASS else status
            parts.append(f"{wl}: no hit-rate signal in the metrics")
    return Verdict(name, crit, thr, status, "; ".join(parts), numbers)


def _median(a: Agg | None) -> float | None:
    return None if a is None else a.median


def sustained(host: RoleView, t: Thresholds) -> Verdict:
    """Caching's benefit under load: cached vs baseline at the same concurrency.

    The tutorial's step 8 expects that "the TTFT benefit of prefix caching is preserved"
    and its confirmation that "the throughput benefit is preserved": both compare the
    two servers under the same sustained load. TTFT decides (interval); output
    throughput must not drop below ``sustained_throughput_min_ratio`` x baseline's
    unless the offered load caps both (then it cannot show a difference, and says so).
    Throughput against the cached server at concurrency 1 is shown beside it.
    """
    crit = "Under sustained load, the throughput benefit is preserved."
    thr = (f"same load on both servers: cached / baseline median TTFT, "
           f"{t.confidence:.0%} interval, PASS when it lies at or below "
           f"{t.sustained_ttft_max_ratio:.2f}, FAIL when above, else INCONCLUSIVE; and "
           f"cached output throughput >= {t.sustained_throughput_min_ratio:.2f} x "
           f"baseline's unless the request rate caps both (>= {t.rate_bound_fraction:.0%} "
           f"of the offered load served)")
    verdict, _ = _timing_verdict(host, SUSTAINED, "sustained_benefit_preserved", crit,
                                 thr=thr, threshold=t.sustained_ttft_max_ratio)
    if verdict.status == NOT_RUN or SUSTAINED not in host.roles:
        return verdict
    base, cached = host.role(BASELINE, SUSTAINED), host.role(CACHED, SUSTAINED)
    if base is None or cached is None:
        return verdict
    status = verdict.status
    numbers = dict(verdict.numbers)
    parts = [verdict.detail]
    ob, oc = _median(base.output_throughput), _median(cached.output_throughput)
    offered = cached.offered_output_rate
    if ob and oc is not None:
        ratio = oc / ob
        numbers.update(baseline_output_throughput=ob, cached_output_throughput=oc,
                       throughput_ratio=ratio, offered_output_rate=offered)
        capped = offered is not None and min(ob, oc) >= t.rate_bound_fraction * offered
        text = f"output throughput cached {oc:.1f} vs baseline {ob:.1f} tok/s ({ratio:.2f}x)"
        if capped:
            text += (f"; both served the offered load ({offered:.0f} tok/s), which caps "
                     "throughput: it cannot show caching's benefit here")
        elif ratio < t.sustained_throughput_min_ratio:
            text += f" < {t.sustained_throughput_min_ratio:.2f}x"
            status = FAIL if status == FAIL or _all_reps_below(base, cached, t) \
                else INCONCLUSIVE if status == PASS else status
        parts.append(text)
    c1 = host.role(CACHED, HIGH_OVERLAP)
    o1 = _median(c1.output_throughput) if c1 else None
    if o1 and oc is not None:
        numbers["vs_concurrency_1"] = oc / o1
        parts.append(f"cached under load vs cached at concurrency 1: {oc / o1:.2f}x "
                     "output throughput")
    return Verdict(verdict.name, crit, thr, status, "; ".join(parts), numbers)


def _all_reps_below(base: BenchSummary, cached: BenchSummary, t: Thresholds) -> bool:
    """Every repetition's cached throughput below the bound: a decided drop (>= 3 reps)."""
    b, c = base.output_throughput, cached.output_throughput
    if b is None or c is None or min(b.n, c.n) < 3:
        return False
    return max(c.values) < t.sustained_throughput_min_ratio * min(b.values)


def unequal_load(verdict: Verdict, host: RoleView, role_name: str, t: Thresholds
                 ) -> Verdict:
    """``verdict`` as INCONCLUSIVE when the machine's other load differed between the two
    configurations' runs of its workload by more than the threshold (module docstring);
    the load shares go into its numbers whenever both are known."""
    base, cached = host.role(BASELINE, role_name), host.role(CACHED, role_name)
    if base is None or cached is None or base.other_load is None \
            or cached.other_load is None:
        return verdict
    b, c = base.other_load.median, cached.other_load.median
    numbers = {**verdict.numbers, "baseline_other_load": b, "cached_other_load": c}
    if abs(c - b) <= t.other_load_max_diff or verdict.status not in (PASS, FAIL):
        return Verdict(verdict.name, verdict.criterion, verdict.threshold, verdict.status,
                       verdict.detail, numbers)
    return Verdict(verdict.name, verdict.criterion, verdict.threshold, INCONCLUSIVE,
                   f"{verdict.detail}; not decided ({verdict.status} on these figures): "
                   f"others used {b:.0%} of the machine's CPU during the baseline runs "
                   f"and {c:.0%} during the cached ones (more than "
                   f"{t.other_load_max_diff:.0%} apart), so the timings compare two "
                   f"different machines; rerun this host when it is otherwise idle",
                   numbers)


def verdicts(host: RoleView, t: Thresholds) -> tuple[Verdict, ...]:
    """The four criteria, in the tutorial's order."""
    return (unequal_load(lower_ttft(host, t), host, HIGH_OVERLAP, t),
            unequal_load(no_regression(host, t), host, NO_OVERLAP, t), hit_rate(host, t),
            unequal_load(sustained(host, t), host, SUSTAINED, t))
