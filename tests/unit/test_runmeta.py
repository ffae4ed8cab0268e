"""Opening a run directory: a results disk without room is refused before any host
changes (the bench action checks again before each bench)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from prefixbench.bench import runmeta


def test_a_full_results_disk_is_refused_when_the_run_opens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(  # type: ignore[attr-defined]
        10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    with pytest.raises(runmeta.NoRoom) as exc:
        runmeta.open_run(tmp_path, "run1", {}, ["h1"], ["inv"])
    assert str(exc.value) == (
        f"results disk full: 1 MiB free under {tmp_path / 'run1'}, a bench needs 16 MiB for "
        "its record; free space there and rerun with the same run id (run1): records "
        "already written are intact")
    assert list(tmp_path.iterdir()) == []


def test_a_disk_with_room_opens_and_resumes_the_run(tmp_path: Path) -> None:
    run_dir, resumed = runmeta.open_run(tmp_path, "run1", {}, ["h1"], ["inv"])
    assert (run_dir / "run.json").is_file() and not resumed
    assert runmeta.open_run(tmp_path, "run1", {}, ["h2"], ["inv"])[1] is True
