"""Filters of the bundle: a name -> function map over the pure package, nothing else."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from prefixbench import plan
except ImportError:  # running from a checkout without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from prefixbench import plan


def prefixbench_plan(preflight_results: Sequence[Mapping[str, Any]],
                     hosts: Sequence[str]) -> list[str]:
    """Render the run plan from each host's registered preflight result."""
    return plan.render([plan.host_plan(h, r.get("settings", {}))
                        for h, r in zip(hosts, preflight_results, strict=True)])


class FilterModule:
    """Expose the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"prefixbench_plan": prefixbench_plan}
