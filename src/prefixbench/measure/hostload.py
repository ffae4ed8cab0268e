"""How busy the rest of the machine was while a bench ran: the CPU that neither the server
under test nor the bench client used.

A timing comparison between the two configurations is paired (same seed, same prompts),
but it still assumes both ran on an otherwise equal machine. The bench's host module
reads the machine's CPU counters (the aggregate ``cpu`` line of ``/proc/stat``:
user, nice, system, idle, iowait, irq, softirq, steal; proc(5)) before and after the
bench, the server's CPU (its unit's ``MainPID`` and every live descendant, so the
engine-core child and every worker count: utime, stime, cutime and cstime of
``/proc/<pid>/stat``; systemd's own ``CPUUsageNSec`` needs cgroup CPU accounting, which
not every host has) and the bench client's (the CPU of the children the module waited
for, getrusage(2)). What is left of the machine's busy time
is someone else's: another job, a monitoring agent, a noisy co-tenant, or on the
simulated fleet the other hosts, which share this machine's cores.

:func:`host_load` turns the snapshots into ``other_share``, the fraction of the
machine's CPU time that others used during the bench (0 on an idle host, 1 when every
core was busy with someone else). The report compares it between the two configurations
of each paired verdict (``Thresholds.other_load_max_diff``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["host_load", "parse_cpu_line"]

#: Fields of the aggregate ``cpu`` line, in order (proc(5)); guest time is already
#: counted in user, so it is left out.
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_IDLE = frozenset({"idle", "iowait"})


def parse_cpu_line(text: str) -> dict[str, int]:
    """The aggregate ``cpu`` line of ``/proc/stat`` (clock ticks by field)."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1:1 + len(_FIELDS)]]
            return dict(zip(_FIELDS, values, strict=False))
    raise ValueError("no aggregate cpu line in /proc/stat")


def host_load(snapshot: Mapping[str, Any]) -> dict[str, Any] | None:
    """The machine's CPU during one bench, split into the server's, the client's and
    everyone else's (seconds), and ``other_share``. ``snapshot`` is the host module's
    ``cpu`` (``stat_before``, ``stat_after``, ``clk_tck``, ``ncpu``,
    ``server_ticks_before``, ``server_ticks_after``, ``client_cpu_s``). None when a
    counter is missing (no ``/proc``, a server that was gone): unknown, never guessed."""
    try:
        before = parse_cpu_line(str(snapshot["stat_before"]))
        after = parse_cpu_line(str(snapshot["stat_after"]))
        tck = float(snapshot["clk_tck"])
        client = float(snapshot["client_cpu_s"])
        server_ticks = int(snapshot["server_ticks_after"]) - int(snapshot["server_ticks_before"])
    except (KeyError, TypeError, ValueError):
        return None
    if tck <= 0:
        return None
    delta = {f: max(0, after.get(f, 0) - before.get(f, 0)) / tck for f in _FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return None
    busy = sum(v for f, v in delta.items() if f not in _IDLE)
    server = max(0.0, server_ticks / tck)
    other = max(0.0, busy - server - client)
    return {"cpu_s": round(total, 3), "busy_s": round(busy, 3), "server_s": round(server, 3),
            "client_s": round(client, 3), "other_s": round(other, 3),
            "ncpu": int(snapshot.get("ncpu") or 0), "other_share": round(other / total, 4)}
