"""How close the TTFT predictions of one finished run came to what it measured, against
the goal of issue 50 (median within 10%, p99 within 25%), with the machine's other load
beside each figure (``make bench-ttft-accuracy``; docs/performance.md, "TTFT predicted").

A benchmark, not a test: a run on a shared machine misses the goal because of what else
ran, which no model of the server predicts. So each row carries the share of the
machine's CPU that others used (:mod:`prefixbench.measure.hostload`) while the host's
baselines ran and while the cached bench ran: a cached bench that measured slower than
predicted under more load than its baselines had is the machine, not the model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.report.load import RunData
from prefixbench.report.ttft_predicted import TtftRow, server_of, ttft_rows

__all__ = ["Accuracy", "AccuracyRow", "accuracy", "mean_abs_median_error", "render_text"]

GOAL_MEDIAN = 0.10
GOAL_P99 = 0.25


@dataclass(frozen=True)
class AccuracyRow:
    row: TtftRow

    @property
    def baseline_load(self) -> float | None:
        """Others' share of the machine's CPU under the host's baselines at concurrency 1
        (their mean: what the fit saw); None: not measured."""
        return self.row.comparison.baseline_load

    @property
    def cached_load(self) -> float | None:
        """The same while the cached bench ran."""
        return self.row.comparison.cached_load

    @property
    def load_gap(self) -> float | None:
        if self.baseline_load is None or self.cached_load is None:
            return None
        return self.cached_load - self.baseline_load


@dataclass(frozen=True)
class Accuracy:
    rows: tuple[AccuracyRow, ...]
    goal_median: float = GOAL_MEDIAN
    goal_p99: float = GOAL_P99

    @property
    def medians_within(self) -> int:
        return sum(abs(r.row.comparison.median_error) <= self.goal_median for r in self.rows)

    @property
    def judged_p99s(self) -> list[AccuracyRow]:
        """The rows whose p99 is judged (not set by the server's first request)."""
        return [r for r in self.rows if not r.row.comparison.startup_p99]

    @property
    def p99s_within(self) -> int:
        return sum(abs(r.row.comparison.p99_error) <= self.goal_p99 for r in self.judged_p99s)

    def as_dict(self) -> dict[str, Any]:
        return {"goal_median": self.goal_median, "goal_p99": self.goal_p99,
                "medians_within": self.medians_within, "rows": len(self.rows),
                "p99s_within": self.p99s_within, "p99s_judged": len(self.judged_p99s),
                "by_row": [r.row.as_dict() for r in self.rows]}


def accuracy(data: RunData, *, goal_median: float = GOAL_MEDIAN,
             goal_p99: float = GOAL_P99) -> Accuracy:
    """Every host's TTFT rows (as the report makes them: the server its records
    describe) with the machine's other load beside each."""
    out: list[AccuracyRow] = []
    for host in data.hosts:
        mine = [r for r in [*data.records, *data.calibration] if r.key.host == host]
        server = server_of(mine)
        if server is None:
            continue
        rows = ttft_rows(mine, block_size=server.block_size,
                         max_num_seqs=server.max_num_seqs, max_num_batched_tokens=server.chunk,
                         platform=server.platform, max_model_len=server.max_model_len,
                         neuron_config=server.neuron_config, scheduler=server.scheduler)
        out += [AccuracyRow(row) for row in rows]
    return Accuracy(tuple(out), goal_median, goal_p99)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_text(acc: Accuracy, title: str = "") -> str:
    """The rows, each host's fit, and the count against the goal."""
    lines = [title] if title else []
    lines.append(f"{'host':<14} {'workload':<14} {'median pred/meas ms':>22} {'err':>7}  "
                 f"{'p99 pred/meas ms':>20} {'err':>7}  load base/cached")
    fits: dict[str, str] = {}
    for r in acc.rows:
        c = r.row.comparison
        p99 = f"{c.p99_error:+.1%}" + ("*" if c.startup_p99 else "")
        lines.append(
            f"{r.row.host:<14} {r.row.workload:<14} "
            f"{c.predicted_median_ms:>9.1f} / {c.measured_median_ms:>9.1f} "
            f"{c.median_error:>+7.1%}  {c.predicted_p99_ms:>8.1f} / {c.measured_p99_ms:>8.1f} "
            f"{p99:>7}  {_pct(r.baseline_load)} / {_pct(r.cached_load)}")
        fits[r.row.host] = r.row.fit.summary()
    lines += [f"  {host}: {fit}" for host, fit in fits.items()]
    if any(r.row.comparison.startup_p99 for r in acc.rows):
        lines.append("  * p99 set by the server's first request after start-up: shown, "
                     "not judged")
    lines.append(
        f"goal: median within {acc.goal_median:.0%} on {acc.medians_within} of "
        f"{len(acc.rows)}; p99 within {acc.goal_p99:.0%} on {acc.p99s_within} of "
        f"{len(acc.judged_p99s)} judged; mean absolute median error "
        f"{mean_abs_median_error(acc.rows):.1%}")
    return "\n".join(lines) + "\n"


def mean_abs_median_error(rows: Sequence[AccuracyRow]) -> float:
    """The mean absolute median error of ``rows`` (0 when there are none)."""
    return statistics.fmean(abs(r.row.comparison.median_error) for r in rows) if rows else 0.0
