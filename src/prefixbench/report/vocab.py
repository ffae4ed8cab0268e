"""The terms a report decides in: configuration names, criterion kinds, verdict statuses
and the thresholds.

Every decision of the report (verdicts, common issues, fleet flags) and every summary type
speaks of the two configurations (:data:`BASELINE`, :data:`CACHED`), the criteria's
workload kinds, a :data:`Status` per verdict (combined by :func:`overall_status`), and the
:class:`Thresholds` it was judged against (documented in docs/reading-the-report.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "BASELINE",
    "CACHED",
    "FAIL",
    "HIGH_OVERLAP",
    "INCONCLUSIVE",
    "NOT_RUN",
    "NO_OVERLAP",
    "PASS",
    "SUSTAINED",
    "Status",
    "Thresholds",
    "overall_status",
]

BASELINE: Final = "baseline"
CACHED: Final = "cached"
#: The criteria's workload kinds (prefixbench.bench.criteria): not workload names.
HIGH_OVERLAP: Final = "high_overlap"
NO_OVERLAP: Final = "no_overlap"
SUSTAINED: Final = "sustained"

Status = Literal["PASS", "FAIL", "INCONCLUSIVE", "NOT_RUN"]
PASS: Final[Status] = "PASS"  # noqa: S105 - a verdict, not a password
FAIL: Final[Status] = "FAIL"
#: The interval straddles the threshold, or a result the criterion needs is missing.
INCONCLUSIVE: Final[Status] = "INCONCLUSIVE"
#: No workload of the criterion's kind in the run.
NOT_RUN: Final[Status] = "NOT_RUN"


@dataclass(frozen=True)
class Thresholds:
    """Every threshold a verdict, issue or fleet flag uses; the report words each rule
    from these (prefixbench.report.document.threshold_lines)."""

    #: Confirmation 1 ("measurably lower"): the interval of cached / baseline high-overlap
    #: median TTFT at or below this.
    lower_ttft_max_ratio: float = 0.90
    #: Confirmation 2: cached / baseline no-overlap median TTFT at most 1 + this (one-sided:
    #: a regression is what the criterion guards against).
    no_overlap_max_rel_diff: float = 0.10
    #: Confirmation 3: both measured hit ratios within this (absolute, 0.01 = 1 point) of
    #: the expectation (served tokens, else block-aligned), on the cached high- and
    #: no-overlap runs; also the fleet's hit-ratio departures.
    hit_ratio_max_abs_diff: float = 0.01
    #: Confirmation 4 (caching's benefit under load): the interval of cached / baseline
    #: median TTFT of the sustained workload at or below this ...
    sustained_ttft_max_ratio: float = 1.0
    #: ... and cached output throughput at least this x baseline's ...
    sustained_throughput_min_ratio: float = 0.95
    #: ... unless both served at least this fraction of the offered load (request_rate x
    #: output_len): the rate caps their throughput, which then cannot show a difference.
    rate_bound_fraction: float = 0.95
    #: Confidence of every timing interval (paired two-stage bootstrap).
    confidence: float = 0.95
    #: A timing verdict is no verdict when the share of the machine's CPU that others
    #: used (prefixbench.measure.hostload) differs by more than this between the two
    #: configurations' runs of its workload: PASS or FAIL becomes INCONCLUSIVE.
    other_load_max_diff: float = 0.15
    #: Common issue "hits but no TTFT gain": high-overlap TTFT reduction below this.
    no_gain_max_reduction: float = 0.10
    #: Fleet outliers: |robust z| above this ...
    outlier_z: float = 3.5
    #: ... or the host departs from the fleet median by more than this fraction (robust z
    #: cannot exceed 2.39 with 3 hosts when two are equal, so small fleets need this).
    outlier_rel: float = 0.25

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


def overall_status(statuses: Any) -> Status:
    """FAIL if any verdict failed, else INCONCLUSIVE if any is, else PASS; NOT_RUN when
    no criterion was judged at all."""
    seen = [s for s in statuses if s != NOT_RUN]
    if FAIL in seen:
        return FAIL
    if INCONCLUSIVE in seen:
        return INCONCLUSIVE
    return PASS if seen else NOT_RUN
