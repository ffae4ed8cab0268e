"""Which workload serves which of the tutorial's confirmation criteria.

The tutorial confirms prefix caching with three kinds of run: a *high-overlap* workload
at concurrency 1 (many requests share a prefix: TTFT must drop), a *no-overlap* one
(every prompt has its own prefix: no regression), and the high-overlap workload under
*sustained* load (concurrency above 1: caching's benefit must hold). A workload's kind
is what it is, not what it is called: declared with ``criterion:`` or inferred here from
its parameters, so a run whose workloads are named ``hi`` and ``no`` is judged exactly
like the tutorial's.

Inference, for ``prefix_repetition`` workloads (a custom workload is judged only when
declared):

- ``num_prefixes >= num_prompts``: every prompt has its own prefix -> ``no_overlap``;
- otherwise at most one request in flight (``max_concurrency`` 1) -> ``high_overlap``;
- otherwise (``max_concurrency`` above 1 or unbounded) -> ``sustained``.

When several workloads are of one kind, the first in the run's order serves the
criterion; the plan says which, and ``criterion: none`` keeps a workload out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from prefixbench.engines.workloads import Workload

HIGH_OVERLAP: Final = "high_overlap"
NO_OVERLAP: Final = "no_overlap"
SUSTAINED: Final = "sustained"
ROLES: Final = (HIGH_OVERLAP, NO_OVERLAP, SUSTAINED)

#: What each role is used for, in the plan's words.
USES: Final = {
    HIGH_OVERLAP: "high-overlap TTFT and the hit rate",
    NO_OVERLAP: "no-overlap regression and the hit rate",
    SUSTAINED: "sustained-load benefit",
}


def infer_role(w: Workload) -> str | None:
    """The criterion ``w`` serves: declared, else inferred from its parameters."""
    if w.is_random:  # the calibration bench: never judged
        return None
    if w.criterion:
        return None if w.criterion == "none" else w.criterion
    if w.is_custom:
        return None
    if w.prefix_repetition_num_prefixes >= w.num_prompts:
        return NO_OVERLAP
    if w.max_concurrency == 1:
        return HIGH_OVERLAP
    return SUSTAINED


@dataclass(frozen=True)
class Assignment:
    """Role -> the workload that serves it, and the workloads left over per role."""

    serving: dict[str, str]
    also: dict[str, tuple[str, ...]]

    def workload(self, role: str) -> str | None:
        return self.serving.get(role)

    def lines(self) -> list[str]:
        out = []
        for role in ROLES:
            name = self.serving.get(role)
            if name is None:
                out.append(f"criterion {role} ({USES[role]}): not run - no workload of "
                           f"this kind (set criterion: {role} on one)")
                continue
            extra = self.also.get(role) or ()
            tail = (f"; also of this kind, not judged: {', '.join(extra)}" if extra else "")
            out.append(f"criterion {role} ({USES[role]}): workload {name}{tail}")
        return out


def assign(workloads: Sequence[Workload]) -> Assignment:
    """Which workload serves each criterion (the first of its kind, in order)."""
    serving: dict[str, str] = {}
    also: dict[str, list[str]] = {}
    for w in workloads:
        role = infer_role(w)
        if role is None:
            continue
        if role in serving:
            also.setdefault(role, []).append(w.name)
        else:
            serving[role] = w.name
    return Assignment(serving, {k: tuple(v) for k, v in also.items()})
