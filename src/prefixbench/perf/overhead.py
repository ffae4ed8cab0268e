
"""How much time the bundle adds: a run's wall time against the work it cannot avoid.

The work a host cannot avoid is its benches' own durations (what ``vllm bench serve``
reports) plus its servers' start-ups (compilation, loading). Hosts run in parallel, so
the run's wall time is compared with the slowest host's essential time.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from prefixbench.measure.layout import STARTUP, RunLayout


@dataclass(frozen=True)
class HostTime:
    host: str
    benches: int
    bench_seconds: float
    startup_seconds: float

    @property
    def essential(self) -> float:
        return self.bench_seconds + self.startup_seconds


@dataclass(frozen=True)
class RunOverhead:
    run_id: str
    wall_seconds: float
    hosts: tuple[HostTime, ...]

    @property
    def slowest(self) -> HostTime:
        return max(self.hosts, key=lambda h: h.essential)

    @property
    def ratio(self) -> float:
        return self.wall_seconds / self.slowest.essential if self.slowest.essential else 0.0

    def lines(self) -> list[str]:
        out = [f"run {self.run_id}: wall {self.wall_seconds:.0f} s"]
        for h in sorted(self.hosts, key=lambda h: h.host):
            out.append(f"  {h.host}: {h.benches} benches {h.bench_seconds:.0f} s + server "
                       f"start-ups {h.startup_seconds:.0f} s = {h.essential:.0f} s")
        out.append(f"wall / slowest host's (benches + start-ups) = {self.ratio:.2f}")
        return out


def _parse(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))


def run_overhead(run_dir: Path) -> RunOverhead:
    """Measure a finished run directory (``run.json`` needs ``ended_at``)."""
    layout = RunLayout.of(run_dir)
    meta = json.loads(layout.meta_path.read_text())
    if "ended_at" not in meta:
        raise ValueError(f"{run_dir}: the run has not ended (no ended_at in run.json)")
    wall = (_parse(meta["ended_at"]) - _parse(meta["started_at"])).total_seconds()
    per_host: dict[str, list[float]] = {}
    for record in layout.load_results():
        per_host.setdefault(record.key.host, []).append(float(record.bench["duration"]))
    hosts = []
    for host, durations in per_host.items():
        startups = [json.loads(p.read_text())["elapsed_s"]
                    for p in layout.server_records(host, STARTUP).values()]
        hosts.append(HostTime(host, len(durations), sum(durations), float(sum(startups))))
    if not hosts:
        raise ValueError(f"{run_dir}: no results")
    return RunOverhead(run_id=meta["run_id"], wall_seconds=wall, hosts=tuple(hosts))
