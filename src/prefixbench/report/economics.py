"""Time and cost of a run, per host: what a manager needs beside the verdicts.

- *bench wall*: from the first bench's start to the last bench's end on the host (the
  records' own times; provisioning and the model download are not in it);
- *server start-ups*: seconds each configuration's server took to become healthy, from
  ``<host>/<configuration>/startup.json`` (on Neuron this is mostly graph compilation),
  and how that start got its compiled graphs, from ``<host>/<configuration>/compile.json``
  (the shared compile cache, :mod:`prefixbench.servers.compile_cache`): ``compiled`` (the start
  added graphs to its cache), ``restored`` (from the fleet's store before the start) or
  ``reused`` (its own cache already had them);
- *instance-hours*: the bench wall in hours;
- *idle for other hosts*: for each configuration, from the moment its server was healthy
  (``startup.json`` ``healthy_at``) to the start of its first bench (in Ansible's
  lockstep mostly the wait for the other hosts' starts; with the hosts at their own pace
  the host's own bench client start), plus a compile follower's wait for its key's
  leader (``compile.json`` ``waited_for_leader_s``): time the instance is paid for and
  measures nothing; priced like the instance-hours;
- *cost per million output tokens* with and without caching: the price of an
  instance-hour (``prefixbench_price_per_instance_hour``, by instance type, recorded in
  ``run.json``) over the output tokens an hour of the high-overlap workload yields at the
  measured output throughput of each server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from prefixbench.measure.layout import COMPILE, STARTUP, RunLayout

__all__ = ["HostTime", "compilations", "cost_per_million", "host_time"]


@dataclass(frozen=True)
class HostTime:
    host: str
    bench_wall_s: float | None
    startup_s: Mapping[str, float]
    price_per_hour: float | None
    #: configuration -> compiled | restored | reused (absent: not recorded).
    graphs: Mapping[str, str] = field(default_factory=dict)
    #: configuration -> seconds from its server's healthy_at to its first bench's start.
    idle_s: Mapping[str, float] = field(default_factory=dict)
    #: configuration -> seconds its start waited for its compile key's leader to publish.
    leader_wait_s: Mapping[str, float] = field(default_factory=dict)
    #: configuration -> why its graphs were not shared (``compile.json``
    #: ``why_not_shared``: the host compiled its own), where they were not.
    unshared: Mapping[str, str] = field(default_factory=dict)

    @property
    def idle_total_s(self) -> float | None:
        if not self.idle_s and not self.leader_wait_s:
            return None
        return sum(self.idle_s.values()) + sum(self.leader_wait_s.values())

    @property
    def idle_cost(self) -> float | None:
        if self.idle_total_s is None or self.price_per_hour is None:
            return None
        return self.idle_total_s / 3600 * self.price_per_hour

    @property
    def instance_hours(self) -> float | None:
        return None if self.bench_wall_s is None else self.bench_wall_s / 3600

    @property
    def cost(self) -> float | None:
        if self.instance_hours is None or self.price_per_hour is None:
            return None
        return self.instance_hours * self.price_per_hour

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "bench_wall_s": self.bench_wall_s,
                "startup_s": dict(self.startup_s), "graphs": dict(self.graphs),
                "instance_hours": self.instance_hours, "price_per_hour": self.price_per_hour,
                "cost": self.cost, "idle_s": dict(self.idle_s),
                "leader_wait_s": dict(self.leader_wait_s), "unshared": dict(self.unshared),
                "idle_total_s": self.idle_total_s, "idle_cost": self.idle_cost}


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None


def host_time(run_dir: Path, host: str, spans: Sequence[tuple[str, str]],
              price_per_hour: float | None,
              first_bench: Mapping[str, str] | None = None) -> HostTime:
    """``spans`` are the (started_at, ended_at) of the host's benches; ``first_bench``
    the earliest started_at of each configuration's benches (for the idle time)."""
    starts = [t for t in (_time(a) for a, _ in spans) if t is not None]
    ends = [t for t in (_time(b) for _, b in spans) if t is not None]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    startup: dict[str, float] = {}
    idle: dict[str, float] = {}
    layout = RunLayout.of(run_dir)
    for path in layout.server_records(host, STARTUP).values():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        elapsed = data.get("elapsed_s") if isinstance(data, Mapping) else None
        if isinstance(elapsed, int | float):
            startup[path.parent.name] = float(elapsed)
        healthy = _time(str(data.get("healthy_at") or "")) if isinstance(data, Mapping) else None
        first = _time((first_bench or {}).get(path.parent.name, ""))
        if healthy is not None and first is not None and first >= healthy:
            idle[path.parent.name] = (first - healthy).total_seconds()
    graphs = {conf: how for conf, path in layout.server_records(host, COMPILE).items()
              if (how := _graphs(path)) is not None}
    waits = {conf: wait for conf, path in layout.server_records(host, COMPILE).items()
             if (wait := _leader_wait(path))}
    unshared = {conf: why for conf, path in layout.server_records(host, COMPILE).items()
                if (why := _unshared(path))}
    return HostTime(host, wall, startup, price_per_hour, graphs, idle, waits, unshared)


def _unshared(path: Path) -> str:
    """Why a start's graphs were not shared (``compile.json``), "" when they were."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(data, Mapping) or data.get("key"):
        return ""
    return str(data.get("why_not_shared") or "")


def _leader_wait(path: Path) -> float | None:
    """A start's wait for its compile leader (``compile.json``), or None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("waited_for_leader_s") if isinstance(data, Mapping) else None
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _graphs(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, Mapping):
        return None
    if data.get("compiled"):
        return "compiled"
    return "restored" if data.get("restored_files") else "reused"


def compilations(times: Sequence[HostTime]) -> tuple[int, int]:
    """(server starts that compiled, server starts recorded) across the fleet."""
    hows = [how for t in times for how in t.graphs.values()]
    return sum(how == "compiled" for how in hows), len(hows)


def cost_per_million(price_per_hour: float | None, output_tok_s: float | None) -> float | None:
    """Instance cost of a million output tokens at a sustained ``output_tok_s``."""
    if not price_per_hour or not output_tok_s:
        return None
    return price_per_hour / (output_tok_s * 3600) * 1e6
