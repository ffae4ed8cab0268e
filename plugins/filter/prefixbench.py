"""Filters of the bundle: a name -> function map over the pure package, nothing else."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from prefixbench import plan, server
except ImportError:  # running from a checkout without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from prefixbench import plan, server


def prefixbench_plan(preflight_results: Sequence[Mapping[str, Any]],
                     hosts: Sequence[str]) -> list[str]:
    """Render the run plan from each host's registered preflight result."""
    return plan.render([plan.host_plan(h, r.get("settings", {}))
                        for h, r in zip(hosts, preflight_results, strict=True)])


def prefixbench_unit_spec(settings: Mapping[str, Any], configuration: str,
                          vllm_executable: str) -> dict[str, Any]:
    """Everything the unit template prints for one configuration."""
    if configuration not in server.CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}")
    conf: server.Configuration = "baseline" if configuration == "baseline" else "cached"
    return server.unit_spec(settings, conf, vllm_executable).as_dict()


class FilterModule:
    """Expose the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "prefixbench_plan": prefixbench_plan,
            "prefixbench_unit_spec": prefixbench_unit_spec,
        }
