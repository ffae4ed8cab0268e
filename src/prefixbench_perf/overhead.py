
"""How much time the bundle adds: a run's wall time against the work it cannot avoid.

The work a host cannot avoid is its benches' own durations (what ``vllm bench serve``
reports) plus its servers' start-ups (compilation, loading). Hosts run in parallel, so
the run's wall time is compared with the slowest host's essential time.

:func:`breakdown` says where the rest went, on one host's timeline (the run's start and
end, each server's start and health, each bench's record times and own duration): before
the first server start; each start-up; from healthy to the first bench (waiting for
other hosts: a compile leader's publish, the slowest host's start); around each bench
(the bench client's own start, the metrics, the result's trip; the wait for the other
hosts' bench of the same step); between configurations; after the last bench (report).
The segments add up to the wall time.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from prefixbench.measure.layout import COMPILE, STARTUP, RunLayout


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
class HostWall:
    """One host's own timeline: from the run's start to its last bench's end, what of it
    was waiting for another host (a compile follower's wait for its leader), and the
    longest gap between a server's health and its first bench (a host that waits for
    another host's start shows it there)."""

    host: str
    span_s: float
    leader_wait_s: float
    first_bench_gap_s: float

    @property
    def own_s(self) -> float:
        """Its fixed part + start-ups + benches: the span less the waits for others."""
        return self.span_s - self.leader_wait_s


@dataclass(frozen=True)
class RunOverhead:
    run_id: str
    wall_seconds: float
    hosts: tuple[HostTime, ...]
    walls: tuple[HostWall, ...] = ()

    @property
    def slowest(self) -> HostTime:
        return max(self.hosts, key=lambda h: h.essential)

    @property
    def ratio(self) -> float:
        return self.wall_seconds / self.slowest.essential if self.slowest.essential else 0.0

    segments: tuple[tuple[str, float], ...] = ()

    def lines(self) -> list[str]:
        out = [f"run {self.run_id}: wall {self.wall_seconds:.0f} s"]
        for h in sorted(self.hosts, key=lambda h: h.host):
            out.append(f"  {h.host}: {h.benches} benches {h.bench_seconds:.0f} s + server "
                       f"start-ups {h.startup_seconds:.0f} s = {h.essential:.0f} s")
        out.append(f"wall / slowest host's (benches + start-ups) = {self.ratio:.2f}")
        if self.walls:
            out.append("each host's own wall (run start -> its last bench):")
            for w in sorted(self.walls, key=lambda w: w.host):
                out.append(f"  {w.host}: ended at +{w.span_s:.0f} s; waited "
                           f"{w.leader_wait_s:.0f} s for a compile leader; longest healthy "
                           f"-> first bench "
                           f"{w.first_bench_gap_s:.1f} s; own {w.own_s:.0f} s")
            slowest = max(self.walls, key=lambda w: w.own_s)
            out.append(f"wall / slowest host's own wall ({slowest.host}: fixed part + "
                       f"start-ups + benches) = "
                       f"{self.wall_seconds / slowest.own_s if slowest.own_s else 0.0:.3f}")
        if self.segments:
            out.append(f"where {self.slowest.host}'s wall went:")
            out += [f"  {seconds:7.1f} s  {label}" for label, seconds in self.segments]
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
    slowest = max(hosts, key=lambda h: h.essential).host
    walls = tuple(w for h in sorted(per_host) if (w := host_wall(run_dir, h)) is not None)
    return RunOverhead(run_id=meta["run_id"], wall_seconds=wall, hosts=tuple(hosts),
                       walls=walls, segments=tuple(breakdown(run_dir, slowest)))


def host_wall(run_dir: Path, host: str) -> HostWall | None:
    """``host``'s own timeline (:class:`HostWall`); None when the records lack the times."""
    layout = RunLayout.of(run_dir)
    begin = _parse(json.loads(layout.meta_path.read_text())["started_at"])
    try:
        runs = sorted((_parse(r.started_at), _parse(r.ended_at)) for r in layout.load_results()
                      if r.key.host == host)
    except ValueError:
        return None
    if not runs:
        return None
    waited = sum(float(json.loads(p.read_text()).get("waited_for_leader_s") or 0)
                 for p in layout.server_records(host, COMPILE).values())
    gaps = []
    for path in layout.server_records(host, STARTUP).values():
        healthy = json.loads(path.read_text()).get("healthy_at")
        after = [start for start, _ in runs if healthy and start >= _parse(healthy)]
        if after:
            gaps.append((min(after) - _parse(healthy)).total_seconds())
    return HostWall(host, (runs[-1][1] - begin).total_seconds(), waited, max(gaps, default=0.0))


#: The first segment: everything before the host's first server start.
SETUP = ("before the first server start (preflight, deploy, fingerprint; a follower: its "
         "leader's compile)")


def breakdown(run_dir: Path, host: str) -> list[tuple[str, float]]:
    """Where ``host``'s wall time went, in order (see the module's docstring). Empty when
    the records lack the times it needs (a run written before they were kept)."""
    layout = RunLayout.of(run_dir)
    meta = json.loads(layout.meta_path.read_text())
    begin, end = _parse(meta["started_at"]), _parse(meta["ended_at"])
    starts: dict[str, tuple[dt.datetime, float]] = {}
    for conf, path in layout.server_records(host, STARTUP).items():
        data = json.loads(path.read_text())
        if "healthy_at" not in data:
            return []
        starts[conf] = (_parse(data["healthy_at"]), float(data["elapsed_s"]))
    benches: dict[str, list[tuple[dt.datetime, dt.datetime, float]]] = {}
    for record in layout.load_results():
        if record.key.host == host:
            try:
                window = (_parse(record.started_at), _parse(record.ended_at))
            except ValueError:
                return []
            benches.setdefault(record.key.configuration, []).append(
                (*window, float(record.bench["duration"])))
    order = sorted((c for c in benches if c in starts), key=lambda c: starts[c][0])
    if not order:
        return []
    totals: dict[str, float] = {}

    def add(label: str, seconds: float) -> None:
        totals[label] = totals.get(label, 0.0) + seconds

    cursor = begin
    for index, conf in enumerate(order):
        healthy, elapsed = starts[conf]
        launched = healthy - dt.timedelta(seconds=elapsed)
        add(SETUP if index == 0 else "between configurations (stop, compile-cache steps)",
            (launched - cursor).total_seconds())
        add("server start-ups (essential)", elapsed)
        runs = sorted(benches[conf])
        add("healthy -> first bench (waiting for the other hosts' start or publish)",
            (runs[0][0] - healthy).total_seconds())
        previous = None
        for started, ended, duration in runs:
            if previous is not None:
                add("between benches (controller tasks)", (started - previous).total_seconds())
            add("benches' own durations (essential)", duration)
            add("around each bench (client start, metrics, result; other hosts' bench)",
                (ended - started).total_seconds() - duration)
            previous = ended
        cursor = previous or healthy
    add("after the last bench (stop, report)", (end - cursor).total_seconds())
    return list(totals.items())
