"""The report of a KV-capacity sweep: hit ratio against KV capacity, measured and predicted.

A capacity sweep (``prefixbench_sweep_kv_blocks``, :mod:`prefixbench.servers.sweep`) runs the
cached server once per capacity, each started with ``--num-gpu-blocks-override``; every
point is a run of its own under ``<run>/sweep/kv<blocks>/``. Each bench's record already
carries the prediction at the capacity its server *reported* (``vllm:cache_config_info``
``num_gpu_blocks``, less the null block): for prefix_repetition the prompts the server
really sees, replayed with eviction (:func:`prefixbench.predict.served.served_expectation`),
for your prompts the what-if replay (:func:`prefixbench.report.records.record_prediction`).

Per point, host and workload this report sets the measured hit ratio beside that
prediction, and judges it (:func:`prefixbench.report.capacity_verdict.decide`):
``capacity_curve`` PASS when they are within :attr:`CapacityThresholds.max_diff` (2
points), FAIL otherwise, INCONCLUSIVE when there is no prediction, or, above concurrency
1, when the record does not say the prediction was made at the workload's concurrency by
the scheduler model. Each decided row says the interval of measured ratios its verdict
accepted and how many points wide it is (the table's "Accepted" column, ``accepted`` /
``accepted_width_pp`` in the JSON and the CSV). It also draws, per workload, the
predicted curve over a range of capacities with the measured points on it, at the
workload's concurrency through the scheduler model when the record keeps the server's
limits (one request at a time otherwise, and the curve's note says which), and marks the
working set: the distinct full blocks the workload caches, from where it fits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.kvcapacity import usable_blocks
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.workloads import Workload
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.metrics import CacheConfig
from prefixbench.predict.whatif import server_cache_model
from prefixbench.report.build import build_summary
from prefixbench.report.capacity_verdict import (
    decide,
    judge,
    predicted_at,
    scheduler_of,
)
from prefixbench.report.load import ReportInputError, load_run
from prefixbench.report.model import Summary
from prefixbench.report.records import as_float, concurrency_of, kept_serving, record_view
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, NOT_RUN, Status, overall_status
from prefixbench.servers.sweep import KV, dial_of, point_dirs, point_value, tokenizer_dir

__all__ = ["CapacityCurveView", "CapacityRow", "CapacitySummary", "CapacityThresholds",
           "build_capacity", "is_capacity_sweep", "judge"]  # judge: capacity_verdict's

CAPACITY_SCHEMA_VERSION: Final = 1
#: Capacities the predicted curve is drawn at, besides the measured ones.
CURVE_STEPS: Final = 24


@dataclass(frozen=True)
class CapacityThresholds:
    #: Measured hit ratio within this (absolute, 0.02 = 2 points) of the prediction.
    max_diff: float = 0.02


def is_capacity_sweep(run_dir: str | Path) -> bool:
    """Whether the run directory holds the points of a KV-capacity sweep."""
    try:
        return dial_of(run_dir) == KV
    except ValueError:
        return False


@dataclass(frozen=True)
class CapacityRow:
    """One (point, host, workload, repetition): measured against predicted hit ratio."""

    point_blocks: int
    host: str
    workload: str
    repetition: int
    #: Usable blocks of the server as it reported itself (num_gpu_blocks - 1).
    capacity_blocks: int | None
    measured: float | None
    predicted: float | None
    #: Where the prediction comes from ("served": the server's own tokens; "what-if").
    method: str | None
    evictions: float | None
    status: Status
    detail: str
    #: The measured hit ratios the verdict passes (``None``: no interval decided it).
    accepted: tuple[float, float] | None = None

    @property
    def diff_pp(self) -> float | None:
        if self.measured is None or self.predicted is None:
            return None
        return (self.measured - self.predicted) * 100

    @property
    def accepted_width_pp(self) -> float | None:
        """How wide the accepted interval is, in points: the verdict's power."""
        return None if self.accepted is None else (self.accepted[1] - self.accepted[0]) * 100

    def to_dict(self) -> dict[str, Any]:
        return {"point_blocks": self.point_blocks, "host": self.host,
                "workload": self.workload, "repetition": self.repetition,
                "capacity_blocks": self.capacity_blocks, "measured": self.measured,
                "predicted": self.predicted, "method": self.method,
                "diff_pp": self.diff_pp, "evictions": self.evictions,
                "status": self.status, "detail": self.detail,
                "accepted": list(self.accepted) if self.accepted is not None else None,
                "accepted_width_pp": self.accepted_width_pp}


@dataclass(frozen=True)
class CapacityCurveView:
    """The predicted curve of one workload, and where its working set fits."""

    workload: str
    block_size: int
    points: tuple[tuple[int, float], ...]
    unbounded_ratio: float | None
    working_set_blocks: int | None
    note: str | None = None

    @property
    def fits_from(self) -> int | None:
        """The smallest capacity drawn whose predicted ratio is the unbounded one: below
        the working set when the blocks evicted there are ones never asked for again."""
        if self.unbounded_ratio is None:
            return None
        return next((x for x, y in sorted(self.points)
                     if abs(y - self.unbounded_ratio) < 1e-12), None)

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "block_size": self.block_size,
                "points": [list(p) for p in self.points],
                "unbounded_ratio": self.unbounded_ratio,
                "working_set_blocks": self.working_set_blocks, "fits_from": self.fits_from,
                "note": self.note}


@dataclass(frozen=True)
class CapacityPoint:
    blocks: int
    run_dir: Path
    summary: Summary


@dataclass(frozen=True)
class CapacitySummary:
    """Everything the capacity-sweep report shows."""

    run_id: str
    run: dict[str, Any]
    generated_at: str
    points: tuple[CapacityPoint, ...]
    rows: tuple[CapacityRow, ...]
    curves: tuple[CapacityCurveView, ...]
    max_diff: float

    @property
    def status(self) -> Status:
        """The capacity_curve verdicts' overall; NOT_RUN when no bench was judged."""
        return overall_status(r.status for r in self.rows) if self.rows else NOT_RUN

    @property
    def failed_verdicts(self) -> list[str]:
        return [f"kv{r.point_blocks} {r.host}: capacity_curve {r.workload} rep{r.repetition}"
                for r in self.rows if r.status == FAIL]

    @property
    def inconclusive_verdicts(self) -> list[str]:
        return [f"kv{r.point_blocks} {r.host}: capacity_curve {r.workload} rep{r.repetition}"
                for r in self.rows if r.status == INCONCLUSIVE]

    @property
    def failures(self) -> list[str]:
        """The benches of every point without a result (failed, rejected, dropped)."""
        return [f"kv{p.blocks} {f.host} {f.configuration}/{f.workload} rep{f.repetition}: "
                f"{f.error}" for p in self.points for f in p.summary.failures]

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": CAPACITY_SCHEMA_VERSION, "kind": "capacity_sweep",
                "run_id": self.run_id, "run": self.run, "generated_at": self.generated_at,
                "status": self.status, "max_diff": self.max_diff,
                "failures": self.failures,
                "points": [{"kv_blocks": p.blocks, "run_dir": p.run_dir.name,
                            "status": overall_status(r.status for r in self.rows
                                                     if r.point_blocks == p.blocks),
                            "failed_verdicts": [v for v in self.failed_verdicts
                                                if v.startswith(f"kv{p.blocks} ")]}
                           for p in self.points],
                "rows": [r.to_dict() for r in self.rows],
                "curves": [c.to_dict() for c in self.curves]}


def _rows(blocks: int, point_dir: Path, max_diff: float) -> tuple[list[CapacityRow],
                                                                   dict[str, Any]]:
    """The point's rows, and per workload what its curve needs (workload, block size,
    prompts file)."""
    data = load_run(point_dir)
    known = data.workloads()
    rows = []
    shapes: dict[str, Any] = {}
    for record in data.records:
        view = record_view(record, known, data.run_dir)
        if view.prefix_caching_enabled is False:
            continue
        labels = (record.metrics_delta or {}).get("cache_config") or {}
        capacity = usable_blocks(int(n) if (n := as_float(labels.get("num_gpu_blocks")))
                                 is not None else None)
        predicted = view.expected_served
        method: str | None = "served"
        note: str | None = None
        if predicted is None and view.predicted is not None:
            predicted, method, note = view.predicted.ratio, "what-if", view.predicted.note
        if predicted is None:
            method = None
            note = note or str((record.expected or {}).get("served_note") or "")
        w = view.workload
        evicted = (as_float((record.expected or {}).get("served_evicted_blocks"))
                   if method == "served" else
                   view.predicted.evicted_blocks if view.predicted is not None else None)
        verdict = decide(
            view.hit_ratio_queries, predicted, max_diff=max_diff, note=note,
            concurrency=concurrency_of(w) if w is not None else None,
            predicted_at=predicted_at(record, w, method) if w is not None else None,
            request_rate=w.request_rate if w is not None else math.inf,
            evicted_blocks=None if evicted is None else int(evicted),
            band=view.expected_served_band if method == "served" else
            view.predicted.band if view.predicted is not None else None,
            scheduler=scheduler_of(record) if method == "served" else None)
        rows.append(CapacityRow(
            point_blocks=blocks, host=record.key.host, workload=record.key.workload,
            repetition=record.key.repetition, capacity_blocks=capacity,
            measured=view.hit_ratio_queries, predicted=predicted, method=method,
            evictions=view.evictions_sampled, status=verdict.status, detail=verdict.detail,
            accepted=verdict.accepted))
        if view.workload is not None and view.block_size:
            chunk = (record.expected or {}).get("max_num_batched_tokens")
            model = (server_cache_model(CacheConfig.from_labels(labels))[1] if labels
                     else FULL_ATTENTION).chunked(chunk if isinstance(chunk, int) else None)
            shapes.setdefault(record.key.workload, (
                view.workload, view.block_size, RunLayout.of(point_dir), model,
                kept_serving(record, view.workload) or SERIAL))
    return rows, shapes


def _grid(measured: Sequence[int], working_set: int | None) -> list[int]:
    top = max([*measured, int((working_set or 0) * 1.25), 2])
    step = max(1, top // CURVE_STEPS)
    return sorted({*range(step, top + 1, step), *measured})


def _curve(name: str, workload: Workload, block_size: int, layout: RunLayout,
           measured: Sequence[int], *, model: CacheModel = FULL_ATTENTION,
           serving: Serving = SERIAL) -> CapacityCurveView:
    """The predicted curve through the servers' cache model (``model``: from the first
    record's ``vllm:cache_config_info``, :func:`prefixbench.predict.whatif
    .server_cache_model`; full attention when the kind cannot be told), sent as
    ``serving`` says (the workload's concurrency and the server's limits the record
    keeps; one at a time without them). The working set comes from a one-at-a-time
    replay, the distinct prompt blocks: concurrency changes no hit of an unbounded cache."""
    from prefixbench.engines.tokenizer import TokenizerError  # noqa: PLC0415
    from prefixbench.predict import capacity_curve  # noqa: PLC0415 - tokenizer library
    from prefixbench.predict.served import served_curve  # noqa: PLC0415

    tok = tokenizer_dir(layout.run_dir)
    if tok is None:
        return CapacityCurveView(workload=name, block_size=block_size, points=(),
                                 unbounded_ratio=None, working_set_blocks=None,
                                 note="no tokenizer copy in the run directory")
    working: int | None
    try:
        if workload.is_custom:
            def custom(caps: list[int], how: Serving) -> capacity_curve.CapacityCurve:
                return capacity_curve.predict_curve(
                    workload, block_size=block_size, capacities=caps,
                    prompts_file=layout.prompts_path(name), tokenizer_dir=tok,
                    cache_model=model, serving=how)
            working = custom([max(measured, default=1)], SERIAL).working_set_blocks
            curve = custom(_grid(measured, working), serving)
            bounded, unbounded = list(curve.points), curve.unbounded
        else:
            working = served_curve(workload, tok, block_size, [1], model)[1].cached_blocks
            bounded, unbounded = served_curve(workload, tok, block_size,
                                              _grid(measured, working), model,
                                              serving=serving)
    except (capacity_curve.CurveError, TokenizerError, ValueError, OSError) as exc:
        return CapacityCurveView(workload=name, block_size=block_size, points=(),
                                 unbounded_ratio=None, working_set_blocks=None,
                                 note=f"no predicted curve: {exc}")
    pts = tuple((p.capacity_blocks, p.ratio) for p in bounded
                if p.ratio is not None and p.capacity_blocks is not None)
    said = None if model.kind == "full" else f"KV-cache model: {model.describe()}"
    how = (f"curve replayed through the {serving.describe()}" if serving.scheduled else
           "curve replayed one request at a time: the record keeps no server limits "
           "(max_num_seqs, max_num_batched_tokens) for the scheduler model"
           if concurrency_of(workload) > 1 else None)
    note = "; ".join(n for n in (how, unbounded.note if serving.scheduled else None, said)
                     if n) or None
    return CapacityCurveView(workload=name, block_size=block_size, points=pts,
                             unbounded_ratio=unbounded.ratio,
                             working_set_blocks=working, note=note)


def build_capacity(run_dir: str | Path, *, thresholds: CapacityThresholds | None = None,
                   now: datetime | None = None) -> CapacitySummary:
    """Summarise every point of a capacity sweep and set each beside its prediction."""
    t = thresholds or CapacityThresholds()
    root = Path(run_dir)
    dirs = [d for d in point_dirs(root) if (v := point_value(d)) and v[0] == KV]
    if not dirs:
        raise ReportInputError(f"{root}: no capacity points (kv<blocks>) under "
                               f"{root / 'sweep'}")
    run: dict[str, Any] = {}
    meta = RunLayout.of(root).meta_path
    if meta.exists():
        try:
            loaded = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{meta}: unreadable ({exc})") from exc
        run = loaded if isinstance(loaded, dict) else {}
    points, rows = [], []
    shapes: dict[str, Any] = {}
    for d in dirs:
        value = point_value(d)
        assert value is not None
        points.append(CapacityPoint(blocks=value[1], run_dir=d,
                                    summary=build_summary(d, now=now)))
        point_rows, point_shapes = _rows(value[1], d, t.max_diff)
        rows += point_rows
        for name, shape in point_shapes.items():
            shapes.setdefault(name, shape)
    curves = []
    for name, (workload, block_size, layout, model, serving) in sorted(shapes.items()):
        measured = sorted({r.capacity_blocks for r in rows
                           if r.workload == name and r.capacity_blocks is not None})
        curves.append(_curve(name, workload, block_size, layout, measured, model=model,
                             serving=serving))
    return CapacitySummary(
        run_id=str(run.get("run_id") or root.name), run=run,
        generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        points=tuple(points), rows=tuple(sorted(rows, key=lambda r: (
            r.workload, r.host, r.point_blocks, r.repetition))),
        curves=tuple(curves), max_diff=t.max_diff)
