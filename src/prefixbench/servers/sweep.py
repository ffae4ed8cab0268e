"""Sweeps: one server setup per point, each point a run of its own.

Two dials are swept:

* **Segment size** (``prefixbench_sweep_segment_sizes``, points ``seg<size>``). The tutorial
  names ``kv_segment_size_buckets`` as the main dial for prefix caching and states its
  constraint: ``num_batched_tokens_buckets`` must equal it, and ``--max-num-batched-tokens``
  is the prefill segment. A point is the inventory's settings with those three values
  set to one segment size, and runs a baseline/cached pair.
* **KV capacity** (``prefixbench_sweep_kv_blocks``, points ``kv<blocks>``): the cached
  server started with ``--num-gpu-blocks-override`` set to the point's value, to measure
  the hit ratio against KV capacity (the capacity curve,
  :mod:`prefixbench.report.capacity`). Only the cached configuration runs: the baseline
  caches nothing at any capacity.

Everything else (model, workloads, seeds) is unchanged, so the points differ only in
the dial. Each point is a run of its own inside the run directory
(``<run>/sweep/<name>/``): the same layout, resume, fingerprints and report as a plain
run, so every per-run tool works on a point. The run's own report compares the points
(:mod:`prefixbench.report.sweep`, :mod:`prefixbench.report.capacity`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from prefixbench.measure.layout import TOKENIZER_DIR

__all__ = ["KV", "SEG", "SWEEP_DIR", "SweepPoint", "dial_of", "point_dirs", "point_value",
           "points", "tokenizer_dir"]

#: Sub-directory of a run that holds one run directory per sweep point.
SWEEP_DIR: Final = "sweep"

Dial = Literal["seg", "kv"]
#: The two dials, as the prefixes of their points' names.
SEG: Final[Dial] = "seg"
KV: Final[Dial] = "kv"
_POINT_NAME: Final = re.compile(r"^(seg|kv)(\d+)$")


@dataclass(frozen=True)
class SweepPoint:
    """One value of a sweep's dial and the settings its servers run with."""

    dial: Dial
    value: int
    settings: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"{self.dial}{self.value}"

    @property
    def segment_size(self) -> int | None:
        return self.value if self.dial == SEG else None

    @property
    def kv_blocks(self) -> int | None:
        return self.value if self.dial == KV else None

    def run_dir(self, run_dir: str | Path) -> Path:
        return Path(run_dir) / SWEEP_DIR / self.name

    def as_dict(self, run_dir: str | Path) -> dict[str, Any]:
        return {"name": self.name, "dial": self.dial, "value": self.value,
                "segment_size": self.segment_size, "kv_blocks": self.kv_blocks,
                "run_dir": str(self.run_dir(run_dir)), "settings": dict(self.settings)}


def overlay(settings: Mapping[str, Any], segment_size: int) -> dict[str, Any]:
    """The settings with the segment size, its batched-token bucket and
    max-num-batched-tokens all set to ``segment_size`` (the tutorial's constraint)."""
    out = copy.deepcopy(dict(settings))
    neuron_config = dict(out.get("vllm_service_neuron_config") or {})
    neuron_config["kv_segment_size_buckets"] = [segment_size]
    neuron_config["num_batched_tokens_buckets"] = [segment_size]
    out["vllm_service_neuron_config"] = neuron_config
    out["vllm_service_max_num_batched_tokens"] = segment_size
    out["prefixbench_sweep_segment_sizes"] = []
    out["prefixbench_sweep_kv_blocks"] = []
    return out


def kv_overlay(settings: Mapping[str, Any], blocks: int) -> dict[str, Any]:
    """The settings of one capacity point: ``--num-gpu-blocks-override blocks`` and the
    cached configuration only."""
    out = copy.deepcopy(dict(settings))
    out["vllm_service_num_gpu_blocks_override"] = blocks
    out["prefixbench_configurations"] = ["cached"]
    out["prefixbench_sweep_segment_sizes"] = []
    out["prefixbench_sweep_kv_blocks"] = []
    return out


def _values(settings: Mapping[str, Any], name: str) -> list[int]:
    values = [int(v) for v in settings.get(name) or []]
    if len(set(values)) != len(values):
        raise ValueError(f"{name} repeats a value: {values}")
    return values


def points(settings: Mapping[str, Any]) -> list[SweepPoint]:
    """The sweep's points in the order given; empty when no sweep is configured.
    Raises ``ValueError`` for a repeated value or both dials at once."""
    sizes = _values(settings, "prefixbench_sweep_segment_sizes")
    blocks = _values(settings, "prefixbench_sweep_kv_blocks")
    if sizes and blocks:
        raise ValueError("prefixbench_sweep_segment_sizes and prefixbench_sweep_kv_blocks "
                         "are both set: sweep one dial per run")
    if blocks:
        return [SweepPoint(KV, b, kv_overlay(settings, b)) for b in blocks]
    return [SweepPoint(SEG, size, overlay(settings, size)) for size in sizes]


def point_value(point_dir: str | Path) -> tuple[Dial, int] | None:
    """``("seg", 512)`` for ``.../seg512``; ``None`` for a name that is not a point's."""
    m = _POINT_NAME.match(Path(point_dir).name)
    if m is None:
        return None
    return (SEG if m.group(1) == SEG else KV), int(m.group(2))


def dial_of(run_dir: str | Path) -> Dial | None:
    """The dial a sweep run's points turn (from their directories), or ``None``."""
    found = {value[0] for d in point_dirs(run_dir) if (value := point_value(d))}
    if len(found) > 1:
        raise ValueError(f"{run_dir}: points of both sweeps under {SWEEP_DIR}/")
    return next(iter(found), None)


def point_dirs(run_dir: str | Path) -> list[Path]:
    """The point run directories found in a run, ordered by dial, then value."""
    root = Path(run_dir) / SWEEP_DIR
    if not root.is_dir():
        return []
    found = [(value, p) for p in root.iterdir()
             if p.is_dir() and (value := point_value(p)) is not None]
    return [p for _, p in sorted(found)]


def tokenizer_dir(run_dir: str | Path) -> Path | None:
    """The run's copy of the model's tokenizer (``<run>/tokenizer``), also for a sweep
    point (whose run directory is ``<run>/sweep/seg<size>``); ``None`` if there is none."""
    here = Path(run_dir)
    candidates = [here / TOKENIZER_DIR]
    if here.parent.name == SWEEP_DIR:
        candidates.append(here.parent.parent / TOKENIZER_DIR)
    for candidate in candidates:
        if (candidate / "tokenizer.json").is_file():
            return candidate
    return None
