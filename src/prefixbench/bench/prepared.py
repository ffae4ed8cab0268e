"""A custom workload's prepared prompts in the run directory: where the bench keeps the
file vLLM's ``custom`` dataset reads (:class:`prefixbench.engines.custom.PreparedPrompts`)
and writing it there."""

from __future__ import annotations

from pathlib import Path

from prefixbench.engines.custom import PreparedPrompts
from prefixbench.measure.atomic import write_bytes_atomic
from prefixbench.measure.layout import RunLayout

__all__ = ["prepared_path", "write_prepared"]


def prepared_path(run_dir: Path, workload_name: str) -> Path:
    """``<run_dir>/prompts/<workload>.jsonl`` (:meth:`RunLayout.prompts_path`)."""
    return RunLayout.of(run_dir).prompts_path(workload_name)


def write_prepared(run_dir: Path, workload_name: str, prepared: PreparedPrompts) -> Path:
    """Write the prepared file atomically into the run directory; its path."""
    path = prepared_path(run_dir, workload_name)
    write_bytes_atomic(path, prepared.jsonl)
    return path
