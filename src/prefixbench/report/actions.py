"""What to do next, per undecided or failed verdict: one line with the action and the
setting, for the report's first screen, the ``report`` command and ``prefixbench run``.

Each line is decided from the verdict's numbers (``repetitions_to_decide``, the other
load's shares) and its detail's own words (a missing result), in this order: a missing
result, unequal machine load, more repetitions, a failed criterion. A host without any
result says ``no data`` instead of a verdict (:func:`host_status`).
"""

from __future__ import annotations

from typing import Final

from prefixbench.report.model import HostSummary, Summary, Verdict
from prefixbench.report.vocab import FAIL, INCONCLUSIVE

__all__ = ["NO_DATA", "action_lines", "host_status", "verdict_action"]

#: What a host without any result shows instead of a verdict status.
NO_DATA: Final = "no data"

#: What to check first when a criterion FAILs (RUNBOOK's rows for each).
_FAILED: Final = {
    "high_overlap_ttft_lower": "check the host's common issues: prefix caching on the "
                               "cached unit, a shared prefix spanning whole prefill segments",
    "no_overlap_no_regression": "check for carry-over hits (every workload its own seed), "
                                "then rerun with prefixbench_repetitions: 3 before concluding",
    "hit_rate_matches_expected": "read the shortfall lines under step 9: each cause in "
                                 "percentage points",
    "sustained_benefit_preserved": "check evictions and preemptions, and compare the step 8 "
                                   "runs",
}


def host_status(h: HostSummary) -> str:
    """The host's status as the first screen shows it: ``no data`` without any result."""
    return h.status if h.benches else NO_DATA


def verdict_action(v: Verdict) -> str:
    """The action that would decide (or fix) ``v``, with its setting; "" for PASS and
    NOT_RUN."""
    if v.status not in (INCONCLUSIVE, FAIL):
        return ""
    n = v.numbers
    if v.detail.startswith("no result for"):
        return ("rerun with the same prefixbench_run_id: only the benches without a "
                f"result run ({v.detail.split(' (', 1)[0]})")
    base, cached = n.get("baseline_other_load"), n.get("cached_other_load")
    if v.status == INCONCLUSIVE and "otherwise idle" in v.detail \
            and isinstance(base, float) and isinstance(cached, float):
        return (f"rerun when the host is idle: others used {base:.0%} of its CPU during "
                f"the baseline runs and {cached:.0%} during the cached ones")
    need = n.get("repetitions_to_decide")
    if v.status == INCONCLUSIVE and isinstance(need, int | float) and need:
        return (f"prefixbench_repetitions: {int(need)} would decide it (rerun with "
                f"-e prefixbench_repetitions={int(need)} and a new run id)")
    if v.status == INCONCLUSIVE and "too close to the threshold" in v.detail:
        return ("more repetitions will not decide it: the estimate sits on the threshold; "
                "read the interval in the verdict")
    if v.status == INCONCLUSIVE:
        return f"read the verdict: {v.detail}"
    return _FAILED.get(v.name, "read the verdict and its linked section")


def action_lines(s: Summary) -> list[str]:
    """``<host>: <verdict> <STATUS>: <action>`` for every undecided or failed verdict, and
    ``<host>: no data: ...`` for a host without any result."""
    out = []
    for h in s.hosts:
        if not h.benches:
            out.append(f"{h.host}: {NO_DATA}: no bench of this host has a result (see "
                       f"Failures); rerun with the same prefixbench_run_id")
            continue
        out += [f"{h.host}: {v.name} {v.status}: {act}"
                for v in h.verdicts if (act := verdict_action(v))]
    return out
