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
keeps its fixed tolerance. Each criterion is a :class:`Rule` (:data:`RULES`): the verdict
decides with it and words its threshold from it, and the report's Thresholds section
prints the same words (:func:`method_lines`); docs/reading-the-report.md explains
each one.

A pairing holds the prompts equal, not the machine: when the rest of the machine was
busier during one configuration's runs than the other's (the share of its CPU that
neither the server nor the bench client used, prefixbench.measure.hostload, differing by
more than ``Thresholds.other_load_max_diff``), a timing PASS or FAIL says as much about
that load as about caching, and becomes INCONCLUSIVE, saying so (:func:`unequal_load`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from prefixbench.bench.criteria import HIGH_OVERLAP, NO_OVERLAP, SUSTAINED
from prefixbench.measure.stats import RatioInterval, paired_ratio_interval, repetitions_to_decide
from prefixbench.report.bench_model import Agg, BenchSummary
from prefixbench.report.model import Verdict
from prefixbench.report.shortfall import expectation_steps
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

__all__ = ["RULES", "RoleView", "Rule", "decide", "method_lines", "verdicts"]

#: A throughput drop under sustained load fails only when every repetition shows it, and
#: there are at least this many; with fewer it makes the verdict INCONCLUSIVE.
DECIDED_DROP_MIN_REPS: Final = 3


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


def _interval(host: RoleView, role_name: str, confidence: float) -> RatioInterval | None:
    base, cached = host.role(BASELINE, role_name), host.role(CACHED, role_name)
    if base is None or cached is None or not base.ttft_by_rep or not cached.ttft_by_rep:
        return None
    return paired_ratio_interval(base.ttft_by_rep, cached.ttft_by_rep, confidence=confidence)


@dataclass(frozen=True)
class Rule:
    """One confirmation criterion: the tutorial's words and the rule that decides it.

    ``limit`` is the number a timing criterion's interval is compared with (None for the
    hit rate, which compares counters); ``threshold`` words the whole rule from the same
    :class:`Thresholds`. The verdict functions below decide with ``limit`` and print
    ``threshold``; the report's Thresholds section prints ``threshold`` too
    (:func:`method_lines`), so the rule stated is the rule applied.
    """

    name: str
    title: str
    criterion: str
    threshold: Callable[[Thresholds], str]
    limit: Callable[[Thresholds], float] | None = None


def _interval_rule(t: Thresholds, limit: float, passing: str) -> str:
    return (f"cached / baseline median TTFT, {t.confidence:.0%} interval: PASS when it lies "
            f"at or below {limit:.2f} ({passing}), FAIL when it lies above, else "
            f"INCONCLUSIVE")


def _lower_ttft_limit(t: Thresholds) -> float:
    return t.lower_ttft_max_ratio


def _no_regression_limit(t: Thresholds) -> float:
    return 1 + t.no_overlap_max_rel_diff


def _sustained_limit(t: Thresholds) -> float:
    return t.sustained_ttft_max_ratio


LOWER_TTFT: Final = Rule(
    "high_overlap_ttft_lower", "TTFT lower (high overlap)",
    "The high-overlap workload shows measurably lower median TTFT compared to the "
    "baseline.",
    lambda t: _interval_rule(t, _lower_ttft_limit(t),
                             f"at least {1 - _lower_ttft_limit(t):.0%} lower"),
    _lower_ttft_limit)
NO_REGRESSION: Final = Rule(
    "no_overlap_no_regression", "No regression (no overlap)",
    "The no-overlap workload shows no meaningful TTFT difference (confirms no regression "
    "from enabling caching).",
    lambda t: _interval_rule(t, _no_regression_limit(t),
                             f"no more than {t.no_overlap_max_rel_diff:.0%} slower; "
                             "one-sided: a regression is what the criterion guards "
                             "against"),
    _no_regression_limit)
HIT_RATE: Final = Rule(
    "hit_rate_matches_expected", "Hit rate as expected",
    "The Prometheus cache hit rate matches the expected ratio derived from num_prefixes, "
    "num_prompts, prefix_len and suffix_len.",
    lambda t: (f"both signals within {t.hit_ratio_max_abs_diff * 100:.1f} percentage "
               f"point(s) of the expectation, on the cached high- and no-overlap runs "
               f"(counters: exact, no interval). The expectation is computed from the "
               f"tokens the server sees (the bench's prompts re-encoded and replayed), else "
               f"the block-aligned formula"))
SUSTAINED_BENEFIT: Final = Rule(
    "sustained_benefit_preserved", "Benefit under load",
    "Under sustained load, the throughput benefit is preserved.",
    lambda t: (f"same load on both servers: "
               f"{_interval_rule(t, _sustained_limit(t), 'caching still lowers TTFT')}; "
               f"and cached output throughput >= {t.sustained_throughput_min_ratio:.2f} x "
               f"baseline's unless the request rate caps both (>= "
               f"{t.rate_bound_fraction:.0%} of the offered load served); a drop below it "
               f"FAILs when every one of {DECIDED_DROP_MIN_REPS}+ repetitions shows it, "
               f"else it makes the verdict INCONCLUSIVE"),
    _sustained_limit)

#: The four criteria, in the tutorial's order (the order of :func:`verdicts`).
RULES: Final = (LOWER_TTFT, NO_REGRESSION, HIT_RATE, SUSTAINED_BENEFIT)


def load_rule(t: Thresholds) -> str:
    """The rule :func:`unequal_load` applies to every timing verdict, in words."""
    return (f"a timing PASS or FAIL becomes INCONCLUSIVE when the share of the machine's "
            f"CPU used by others differs by more than {t.other_load_max_diff:.0%} between "
            f"the baseline and the cached runs of its workload")


def method_lines(t: Thresholds) -> list[str]:
    """Every verdict rule as the verdicts apply it, one line each."""
    return [*(f"{r.title}: {r.threshold(t)}" for r in RULES),
            f"Unequal load: {load_rule(t)}"]


def _limit(rule: Rule, t: Thresholds) -> float:
    assert rule.limit is not None  # a timing rule
    return rule.limit(t)


def _not_run(name: str, crit: str, thr: str, role_name: str) -> Verdict:
    return Verdict(name, crit, thr, NOT_RUN,
                   f"no {role_name.replace('_', '-')} workload in this run (declare one "
                   f"with criterion: {role_name})")


def _timing_verdict(host: RoleView, role_name: str, rule: Rule, t: Thresholds
                    ) -> tuple[Verdict, RatioInterval | None]:
    """``rule`` judged on ``role_name``'s workload: its interval against ``rule.limit``."""
    name, crit, thr, threshold = rule.name, rule.criterion, rule.threshold(t), _limit(rule, t)
    if role_name not in host.roles:
        return _not_run(name, crit, thr, role_name), None
    why = _missing(role_name, host, BASELINE, CACHED)
    if why:
        return Verdict(name, crit, thr, INCONCLUSIVE, why), None
    iv = _interval(host, role_name, t.confidence)
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
        "repetitions": iv.repetitions, "pairs": iv.pairs,
        "repetitions_to_decide": (repetitions_to_decide(iv, threshold)
                                  if status == INCONCLUSIVE else None)}), iv


def lower_ttft(host: RoleView, t: Thresholds) -> Verdict:
    return _timing_verdict(host, HIGH_OVERLAP, LOWER_TTFT, t)[0]


def no_regression(host: RoleView, t: Thresholds) -> Verdict:
    crit, thr = NO_REGRESSION.criterion, NO_REGRESSION.threshold(t)
    verdict, iv = _timing_verdict(host, NO_OVERLAP, NO_REGRESSION, t)
    if iv is not None and iv.high < 1 - t.no_overlap_max_rel_diff:
        verdict = Verdict(verdict.name, crit, thr, verdict.status, verdict.detail + (
            "; cached is faster, which is no regression: on a workload with nothing to "
            "reuse, expect noise or a difference between the two servers' start-ups"),
            verdict.numbers)
    return verdict


def hit_rate(host: RoleView, t: Thresholds) -> Verdict:
    name, crit, thr = HIT_RATE.name, HIT_RATE.criterion, HIT_RATE.threshold(t)
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
        held = None if b is None else b.verdict_expectation
        exp = None if held is None else held[0]
        if b is None or exp is None:
            status = INCONCLUSIVE if status == PASS else status
            parts.append(f"{wl}: {'no result' if b is None else 'no expectation (block size)'}")
            continue
        numbers[f"{role_name}_expected"] = exp
        numbers[f"{role_name}_expected_block_aligned"] = b.expected_block_aligned
        numbers[f"{role_name}_expected_tutorial"] = b.expected_tutorial
        if b.expected_served is not None and b.expected_block_aligned is not None:
            steps = "".join(f", {c.points:+.2f} pp {c.label}" for c in expectation_steps(b))
            parts.append(f"{wl} expected {exp * 100:.2f}% from the served tokens (block-"
                         f"aligned formula {b.expected_block_aligned * 100:.2f}%{steps})")
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
    crit, thr = SUSTAINED_BENEFIT.criterion, SUSTAINED_BENEFIT.threshold(t)
    verdict, _ = _timing_verdict(host, SUSTAINED, SUSTAINED_BENEFIT, t)
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
    """Every repetition's cached throughput below the bound: a decided drop (at least
    :data:`DECIDED_DROP_MIN_REPS` repetitions)."""
    b, c = base.output_throughput, cached.output_throughput
    if b is None or c is None or min(b.n, c.n) < DECIDED_DROP_MIN_REPS:
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
