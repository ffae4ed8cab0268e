"""``fleet.json``: what the harness records of the fleet's processes, written atomically.

:class:`FleetState` holds each host's ``systemd-nspawn`` process and the artifact
server's, as :class:`~prefixbench_sim.system.ProcRef` (PID plus start time), so that
``down`` kills only what the harness started. A missing or broken file reads as an empty
fleet.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from prefixbench_sim.system import ProcRef

__all__ = ["STATE_VERSION", "FleetState", "atomic_write"]

STATE_VERSION: Final = 1


@dataclass
class FleetState:
    """What ``fleet.json`` records: each host's systemd-nspawn process and the server."""

    hosts: dict[str, ProcRef | None] = field(default_factory=dict)
    http: ProcRef | None = None

    @classmethod
    def load(cls, path: Path) -> FleetState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        raw_hosts = data.get("hosts")
        hosts: dict[str, ProcRef | None] = {}
        if isinstance(raw_hosts, dict):
            for name, rec in raw_hosts.items():
                hosts[str(name)] = ProcRef.from_json(
                    rec.get("nspawn") if isinstance(rec, dict) else None
                )
        return cls(hosts=hosts, http=ProcRef.from_json(data.get("http")))

    def save(self, path: Path) -> None:
        data = {
            "version": STATE_VERSION,
            "hosts": {
                name: {"nspawn": ref.to_json() if ref else None}
                for name, ref in sorted(self.hosts.items())
            },
            "http": self.http.to_json() if self.http else None,
        }
        atomic_write(path, json.dumps(data, indent=2) + "\n")

    def refs(self) -> list[ProcRef]:
        found = [r for r in self.hosts.values() if r is not None]
        return [*found, self.http] if self.http else found


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``path`` through a temporary file beside it: a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(mode)
    tmp.replace(path)
