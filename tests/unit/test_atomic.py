"""Atomic writes leave the old content or the new, never a part, and no temp files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefixbench.measure import atomic


def test_json_is_written_whole_and_sorted(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.json"
    atomic.write_json_atomic(target, {"z": 1, "a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2], "z": 1}
    assert target.read_text().startswith('{\n  "a"')
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]


def test_unserialisable_json_keeps_the_old_file(tmp_path: Path) -> None:
    # This one fails in json.dumps, before any file is opened; the tests below
    # inject the fault after the temporary file has been created and written.
    target = tmp_path / "r.json"
    atomic.write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        atomic.write_json_atomic(target, {"v": object()})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def _others(directory: Path, name: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.name != name}


def test_a_failed_fsync_after_the_write_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    atomic.write_json_atomic(target, {"v": 1})
    old = target.read_bytes()
    seen: list[dict[str, bytes]] = []

    def failing_fsync(fd: int) -> None:
        seen.append(_others(tmp_path, "r.json"))
        raise OSError(5, "injected EIO on fsync")

    monkeypatch.setattr(atomic.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="injected EIO"):
        atomic.write_json_atomic(target, {"v": 2, "pad": "x" * 10000})
    monkeypatch.undo()
    # the fault hit after the new bytes were in a temporary file next to the target
    assert len(seen) == 1 and len(seen[0]) == 1, seen
    assert b'"v": 2' in next(iter(seen[0].values()))
    assert target.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_failed_rename_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    atomic.write_json_atomic(target, {"v": 1})
    old = target.read_bytes()
    seen: list[dict[str, bytes]] = []
    real_replace, real_os_replace = Path.replace, os.replace

    def fail_on_target(dest: os.PathLike[str] | str) -> None:
        if Path(dest) == target:
            seen.append(_others(tmp_path, "r.json"))
            raise OSError(28, "injected ENOSPC on rename")

    def failing_replace(self: Path, dest: os.PathLike[str] | str) -> Path:
        fail_on_target(dest)
        return real_replace(self, dest)

    def failing_os_replace(src: str, dst: str) -> None:
        fail_on_target(dst)
        real_os_replace(src, dst)

    # Path.replace is what the writer calls; os.replace too, should it switch to that.
    monkeypatch.setattr(Path, "replace", failing_replace)
    monkeypatch.setattr(atomic.os, "replace", failing_os_replace)
    with pytest.raises(OSError, match="injected ENOSPC"):
        atomic.write_text_atomic(target, '{"v": 2}\n')
    monkeypatch.undo()
    assert len(seen) == 1 and list(seen[0].values()) == [b'{"v": 2}\n'], seen
    assert target.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


class _TornHandle:
    """A file object that writes half of the data, then fails (a full disk)."""

    def __init__(self, handle):  # type: ignore[no-untyped-def]
        self._handle = handle

    def __enter__(self) -> _TornHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def write(self, data: bytes) -> int:
        self._handle.write(data[: len(data) // 2])
        self._handle.flush()
        raise OSError(28, "injected ENOSPC mid-write")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._handle, name)


def test_a_write_failing_half_way_keeps_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "r.json"
    atomic.write_json_atomic(target, {"v": 1})
    old = target.read_bytes()
    real_fdopen = os.fdopen
    monkeypatch.setattr(atomic.os, "fdopen",
                        lambda *a, **kw: _TornHandle(real_fdopen(*a, **kw)))
    with pytest.raises(OSError, match="injected ENOSPC mid-write"):
        atomic.write_bytes_atomic(target, b"new content " * 100)
    monkeypatch.undo()
    assert target.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
