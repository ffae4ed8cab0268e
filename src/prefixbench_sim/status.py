"""The ``simfleet status`` table: one row per host, formatted without touching the machine.

:class:`HostStatus` is one row (filled by :meth:`prefixbench_sim.fleet.Fleet.status`);
:func:`format_status` lays the rows out and :func:`parse_units` reads the ``systemctl
list-units`` lines the rows show. Both are pure, for the unit tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["HostStatus", "format_status", "parse_units"]


@dataclass(frozen=True)
class HostStatus:
    """One line of ``simfleet status``."""

    name: str
    address: str
    group: str
    instance_type: str
    running: bool | None  # None: unknown (not root)
    system: str
    units: tuple[tuple[str, str], ...] = ()
    memory_mib: int | None = None


def format_status(rows: Sequence[HostStatus], server: str) -> str:
    """The ``status`` table (pure, for the unit tests)."""
    header = ("NAME", "ADDRESS", "GROUP", "INSTANCE TYPE", "UP", "SYSTEM", "MEM", "VLLM UNITS")
    table = [header]
    for r in rows:
        units = ", ".join(f"{u}={s}" for u, s in r.units) or "-"
        mem = f"{r.memory_mib}M" if r.memory_mib is not None else "-"
        table.append(
            (
                r.name,
                r.address,
                r.group,
                r.instance_type,
                "?" if r.running is None else "yes" if r.running else "no",
                r.system,
                mem,
                units,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
    if not rows:
        lines.append("(no hosts; `scripts/simfleet up 3` starts three)")
    lines.append(f"artifact server: {server}")
    return "\n".join(lines)


def parse_units(text: str) -> tuple[tuple[str, str], ...]:
    """``systemctl list-units --plain --no-legend`` lines -> ((unit, active/sub), ...)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out.append((parts[0], f"{parts[2]}/{parts[3]}"))
    return tuple(out)
