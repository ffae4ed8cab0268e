"""The goodput ladder: a workload run at a few request rates, to find the highest rate
each configuration serves within a TTFT target.

A median at concurrency 1 says how much faster one request is; a platform team sizes a
service by the load it can take at its latency target. With ``prefixbench_goodput_ttft_ms``
and ``prefixbench_goodput_rates`` set, every goodput workload (by default the ones serving
the tutorial's high-overlap and no-overlap criteria) also runs once per rate as a *rung*:
the same prompts' shape, ``--request-rate`` the rung's rate (Poisson arrivals, as
``vllm bench serve`` draws them), no concurrency cap (the server's ``max_num_seqs``
queues), its own seed like every other workload, and ``criterion: none`` so that no
rung serves one of the tutorial's criteria. Rungs are workloads like any other: resume,
records and the per-bench report need nothing new. :mod:`prefixbench.report.goodput`
reads them back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.bench import criteria
from prefixbench.engines.workloads import Workload, WorkloadError

__all__ = ["Ladder", "LadderError", "ladder_of", "parse_rung", "rung_name", "rungs"]

_RUNG: Final = re.compile(r"^(?P<base>.+)\.rate(?P<rate>\d+(?:\.\d+)?)$")


class LadderError(WorkloadError):
    """The goodput settings do not make a ladder; the message is one line for the user."""


def rung_name(base: str, rate: float) -> str:
    """``high_overlap`` at 2 requests/s -> ``high_overlap.rate2``."""
    return f"{base}.rate{rate:g}"


def parse_rung(name: str) -> tuple[str, float] | None:
    """``("high_overlap", 2.0)`` for ``high_overlap.rate2``; ``None`` for a non-rung."""
    m = _RUNG.match(name)
    return None if m is None else (m.group("base"), float(m.group("rate")))


@dataclass(frozen=True)
class Ladder:
    """What the goodput ladder runs and how it is judged."""

    ttft_ms: float
    percentile: float
    rates: tuple[float, ...]
    workloads: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms, "percentile": self.percentile,
                "rates": list(self.rates), "workloads": list(self.workloads)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ladder:
        return cls(ttft_ms=float(data["ttft_ms"]), percentile=float(data["percentile"]),
                   rates=tuple(float(r) for r in data["rates"]),
                   workloads=tuple(str(w) for w in data["workloads"]))


def ladder_of(settings: Mapping[str, Any], workloads: Sequence[Workload]) -> Ladder | None:
    """The run's ladder, or ``None`` when it is off (no target or no rates). Raises
    :class:`LadderError` for rates out of order or a workload the run does not have."""
    target = float(settings.get("prefixbench_goodput_ttft_ms") or 0)
    rates = [float(r) for r in settings.get("prefixbench_goodput_rates") or []]
    if not target and not rates:
        return None
    if not target or not rates:
        raise LadderError("the goodput ladder needs both prefixbench_goodput_ttft_ms and "
                            "prefixbench_goodput_rates (or neither)")
    if rates != sorted(set(rates)):
        raise LadderError(f"prefixbench_goodput_rates must be ascending without repeats, "
                            f"got {rates}")
    names = [str(n) for n in settings.get("prefixbench_goodput_workloads") or []]
    if not names:
        served = criteria.assign(workloads).serving
        names = [n for role in (criteria.HIGH_OVERLAP, criteria.NO_OVERLAP)
                 if (n := served.get(role)) is not None]
    known = {w.name for w in workloads}
    missing = [n for n in names if n not in known]
    if missing:
        raise LadderError(f"prefixbench_goodput_workloads names {missing}, not among the "
                            f"run's workloads ({', '.join(sorted(known))})")
    if not names:
        raise LadderError("the goodput ladder has no workload: name some in "
                            "prefixbench_goodput_workloads")
    return Ladder(ttft_ms=target, percentile=float(settings.get(
        "prefixbench_goodput_percentile", 90.0)), rates=tuple(rates), workloads=tuple(names))


def rungs(ladder: Ladder, workloads: Sequence[Workload]) -> list[Workload]:
    """The ladder's rungs, base workload by base workload, rate by rate."""
    by_name = {w.name: w for w in workloads}
    out = []
    for name in ladder.workloads:
        base = by_name[name]
        for rate in ladder.rates:
            data = {**base.to_dict(), "name": rung_name(name, rate), "request_rate": rate,
                    "max_concurrency": None, "criterion": "none", "seed": None}
            out.append(Workload.from_dict(data))
    return out
