"""The run directory's identity: its id, its path, and ``run.json``."""

from __future__ import annotations

import datetime as dt
import json
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prefixbench import __version__
from prefixbench.bench import benchrun, experiment
from prefixbench.measure.atomic import write_json_atomic
from prefixbench.measure.layout import RunLayout
from prefixbench.servers import sweep

SCHEMA_VERSION = 1


def new_run_id(now: dt.datetime | None = None) -> str:
    """A sortable id from the UTC time: ``20261129T093000Z``."""
    moment = now or dt.datetime.now(dt.UTC)
    return moment.strftime("%Y%m%dT%H%M%SZ")


def attempt_id(run_id: str) -> str:
    """This invocation of the playbook on ``run_id`` (a resume is another attempt): the
    scope of the compile cache's claims, so a claim a dead controller left behind holds
    no later run up."""
    return f"{run_id}-{secrets.token_hex(4)}"


def run_meta(run_id: str, settings: Mapping[str, Any], hosts: Sequence[str],
             inventory: Sequence[str], started_at: str) -> dict[str, Any]:
    """The content of ``run.json`` (documented in docs/summary-schema.md)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "started_at": started_at,
        "bundle_version": __version__,
        "inventory": list(inventory),
        "hosts": sorted(hosts),
        "configurations": list(settings.get("prefixbench_configurations", [])),
        "workloads": [w.to_dict() for w in experiment.workloads_of(settings)],
        "repetitions": int(settings.get("prefixbench_repetitions", 1)),
        "base_seed": int(settings.get("prefixbench_base_seed", 1000)),
        "sweep_segment_sizes": [p.value for p in sweep.points(settings) if p.dial == sweep.SEG],
        "sweep_kv_blocks": [p.value for p in sweep.points(settings) if p.dial == sweep.KV],
        "goodput": None if (ladder := experiment.ladder_of(settings)) is None
        else ladder.to_dict(),
        "price_per_instance_hour": {
            str(k): float(v) for k, v in
            (settings.get("prefixbench_price_per_instance_hour") or {}).items()},
    }


class NoRoom(Exception):
    """The results disk cannot take a bench's record: refused before any host changes."""


def open_run(results_dir: Path, run_id: str, settings: Mapping[str, Any],
             hosts: Sequence[str], inventory: Sequence[str]) -> tuple[Path, bool]:
    """Create ``results_dir/run_id/run.json`` unless it exists (a resumed run).

    Returns the run directory and whether the run is resumed. A resumed run keeps its
    first ``started_at`` and gains the hosts of this invocation. A results disk without
    room for one bench's record raises :class:`NoRoom` (the bench action checks again
    before each bench: the disk may fill during the run).
    """
    run_dir = results_dir / run_id
    no_room = benchrun.results_space_problem(run_dir)
    if no_room:
        raise NoRoom(no_room)
    meta_path = RunLayout.of(run_dir).meta_path
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        meta["hosts"] = sorted(set(meta.get("hosts", [])) | set(hosts))
        meta.setdefault("resumed_at", []).append(now)
        meta.pop("ended_at", None)
        write_json_atomic(meta_path, meta)
        _open_points(run_dir, settings, hosts, inventory)
        return run_dir, True
    write_json_atomic(meta_path, run_meta(run_id, settings, hosts, inventory, now))
    _open_points(run_dir, settings, hosts, inventory)
    return run_dir, False


def _open_points(run_dir: Path, settings: Mapping[str, Any], hosts: Sequence[str],
                 inventory: Sequence[str]) -> None:
    """Open one run directory per sweep point (``<run>/sweep/seg<size>``)."""
    for point in sweep.points(settings):
        open_run(run_dir / sweep.SWEEP_DIR, point.name, point.settings, hosts, inventory)


def close_run(run_dir: Path) -> None:
    """Stamp ``ended_at`` into ``run.json``."""
    meta_path = RunLayout.of(run_dir).meta_path
    meta = json.loads(meta_path.read_text())
    meta["ended_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    write_json_atomic(meta_path, meta)
    for point_dir in sweep.point_dirs(run_dir):
        if RunLayout.of(point_dir).meta_path.exists():
            close_run(point_dir)
