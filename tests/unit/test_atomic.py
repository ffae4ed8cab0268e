"""Atomic writes leave the old content or the new, never a part, and no temp files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench import atomic


def test_json_is_written_whole_and_sorted(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.json"
    atomic.write_json_atomic(target, {"z": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "z": 1}
    assert target.read_text().startswith('{\n  "a"')
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    atomic.write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        atomic.write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
