"""The run plan that preflight prints: what will run where, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The tutorial's workloads, in its order, used when the inventory names none.
TUTORIAL_WORKLOAD_NAMES = ("high_overlap", "no_overlap", "sustained_c4")


@dataclass(frozen=True)
class HostPlan:
    """What one host will do."""

    host: str
    instance_type: str
    platform: str
    configurations: tuple[str, ...]
    workloads: tuple[str, ...]
    repetitions: int

    @property
    def benches(self) -> int:
        return len(self.configurations) * len(self.workloads) * self.repetitions


def host_plan(host: str, settings: Mapping[str, Any]) -> HostPlan:
    """Build one host's plan from its validated settings."""
    workloads = tuple(str(w.get("name", f"workload{i + 1}"))
                      for i, w in enumerate(settings.get("prefixbench_workloads") or []))
    return HostPlan(
        host=host,
        instance_type=str(settings.get("prefixbench_instance_type", "?")),
        platform=str(settings.get("prefixbench_platform", "?")),
        configurations=tuple(settings.get("prefixbench_configurations") or ()),
        workloads=workloads or TUTORIAL_WORKLOAD_NAMES,
        repetitions=int(settings.get("prefixbench_repetitions", 1)),
    )


def render(plans: Sequence[HostPlan]) -> list[str]:
    """The plan as lines for the console: one per host, then the total."""
    if not plans:
        return ["plan: no hosts matched - check the inventory and --limit"]
    lines = []
    for p in sorted(plans, key=lambda p: p.host):
        lines.append(
            f"{p.host} ({p.instance_type}, {p.platform}): "
            f"{' -> '.join(p.configurations)} x [{', '.join(p.workloads)}] "
            f"x {p.repetitions} rep = {p.benches} benches")
    total = sum(p.benches for p in plans)
    lines.append(f"total: {len(plans)} hosts, {total} benches")
    return lines
