"""Atomic file writes: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory.

    The temporary file is flushed and fsynced, renamed over ``path`` and the directory
    fsynced, so that a crash leaves either the previous content or the new one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Atomically write UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"), mode)


def write_json_atomic(path: Path, obj: Any, mode: int = 0o644) -> None:
    """Atomically write ``obj`` as indented, key-sorted JSON with a final newline."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", mode)
