"""The segment-size sweep: one baseline/cached server pair per kv_segment_size_buckets value.

The tutorial names ``kv_segment_size_buckets`` as the main dial for prefix caching and
states its constraint: ``num_batched_tokens_buckets`` must equal it, and
``--max-num-batched-tokens`` is the prefill segment. A sweep point is therefore the
inventory's settings with those three values set to one segment size; everything else
(model, workloads, seeds) is unchanged, so the points differ only in the dial.

Each point is a run of its own inside the run directory (``<run>/sweep/seg<size>/``):
the same layout, resume, fingerprints and report as a plain run, so every per-run tool
works on a point. The run's own report compares the points (see
:mod:`prefixbench.report.sweep`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.measure.layout import TOKENIZER_DIR

__all__ = ["SWEEP_DIR", "SweepPoint", "point_dirs", "points", "tokenizer_dir"]

#: Sub-directory of a run that holds one run directory per sweep point.
SWEEP_DIR: Final = "sweep"


@dataclass(frozen=True)
class SweepPoint:
    """One segment size of a sweep and the settings its servers run with."""

    segment_size: int
    settings: Mapping[str, Any]

    @property
    def name(self) -> str:
        return f"seg{self.segment_size}"

    def run_dir(self, run_dir: str | Path) -> Path:
        return Path(run_dir) / SWEEP_DIR / self.name

    def as_dict(self, run_dir: str | Path) -> dict[str, Any]:
        return {"name": self.name, "segment_size": self.segment_size,
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
    return out


def points(settings: Mapping[str, Any]) -> list[SweepPoint]:
    """The sweep's points in the order given; empty when no sweep is configured."""
    sizes = list(settings.get("prefixbench_sweep_segment_sizes") or [])
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"prefixbench_sweep_segment_sizes repeats a value: {sizes}")
    return [SweepPoint(segment_size=int(size), settings=overlay(settings, int(size)))
            for size in sizes]


def point_dirs(run_dir: str | Path) -> list[Path]:
    """The point run directories found in a run, ordered by segment size."""
    root = Path(run_dir) / SWEEP_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("seg")
             and p.name[3:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[3:]))


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
