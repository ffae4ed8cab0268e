"""The notes a prediction carries about how its requests were sent, next to how the
workload runs: one at a time for a workload at a higher concurrency, or a concurrency or
pacing other than the workload's (re-exported by :mod:`prefixbench.predict.replay`).
Each part is a clause; parts are joined by ``"; "`` (the what-if prints each as a
sentence)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from prefixbench.engines.schedconfig import Serving

if TYPE_CHECKING:
    from prefixbench.engines.workloads import Workload

__all__ = ["concurrency_note", "serving_note"]


def concurrency_note(workload: Workload | None) -> str | None:
    if workload is not None and workload.max_concurrency != 1:
        return (f"replayed one request at a time; at concurrency "
                f"{workload.max_concurrency or 'unbounded'} requests sharing a prefix can "
                f"overlap and the server may count fewer hits")
    return None


def serving_note(workload: Workload | None, serving: Serving) -> str | None:
    """The note of a replay as ``serving`` sends it: one at a time, the concurrency note
    (:func:`concurrency_note`); through the scheduler model, what differs from the
    workload's own run."""
    if not serving.scheduled:
        return concurrency_note(workload)
    notes: list[str] = []
    if workload is not None and workload.max_concurrency != serving.concurrency:
        notes.append(f"replayed at concurrency {serving.concurrency}, while the workload "
                     f"runs at {workload.max_concurrency or 'unbounded'}")
    if workload is not None and workload.request_rate != math.inf:
        notes.append(f"the workload paces requests at {workload.request_rate:g}/s, but the "
                     f"predicted ratio has each request sent as soon as one of the "
                     f"{serving.concurrency} in flight finishes; the timing range spans the "
                     f"paced arrivals")
    return "; ".join(notes) or None
