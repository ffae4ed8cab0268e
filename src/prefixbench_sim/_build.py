"""Small helpers shared by the simulated-fleet artifact builders.

Everything the builders write goes through :func:`atomic_write` or a temporary directory
renamed into place, so an interrupted build never leaves a half-written file that a later
run would mistake for a finished one. Inputs are hashed into a stamp file next to the
output; a builder whose stamp matches does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

#: A fixed timestamp for reproducible archives (2025-01-01T00:00:00Z) unless the caller
#: sets ``SOURCE_DATE_EPOCH``.
DEFAULT_SOURCE_DATE_EPOCH: Final = 1735689600


class BuildError(RuntimeError):
    """An artifact could not be built; the message says what failed and why."""


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH")
    return int(value) if value and value.isdigit() else DEFAULT_SOURCE_DATE_EPOCH


def cache_dir() -> Path:
    """``$PREFIXBENCH_CACHE_DIR`` or ``~/.cache/prefixbench`` (created)."""
    env = os.environ.get("PREFIXBENCH_CACHE_DIR")
    path = Path(env).resolve() if env else Path.home() / ".cache" / "prefixbench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(message: str) -> None:
    """One progress line on stderr (stdout stays free for machine-readable output)."""
    print(f"artifacts: {message}", file=sys.stderr, flush=True)


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Log ``what`` when it starts and how long it took when it ends."""
    log(f"{what} ...")
    start = time.monotonic()
    yield
    log(f"{what}: done in {time.monotonic() - start:.1f} s")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest_inputs(parts: Mapping[str, Any]) -> str:
    """A stable digest of a JSON-serialisable description of a build's inputs."""
    return sha256_bytes(json.dumps(parts, sort_keys=True, default=str).encode())


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.chmod(mode)
    tmp.replace(path)


def stamp_matches(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == digest


def write_stamp(stamp: Path, digest: str) -> None:
    atomic_write(stamp, digest + "\n")


def replace_dir(tmp: Path, final: Path) -> None:
    """Move the finished directory ``tmp`` to ``final``, replacing what was there."""
    old = final.with_name(f".{final.name}.old{os.getpid()}")
    if final.exists():
        final.replace(old)
    tmp.replace(final)
    if old.exists():
        shutil.rmtree(old)


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (same file system) or copy it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input_data: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv``; on failure raise :class:`BuildError` carrying its stderr."""
    proc = subprocess.run(
        list(argv), env=dict(env) if env is not None else None, cwd=cwd,
        input=input_data, capture_output=True, check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()[-4000:]
        raise BuildError(f"{argv[0]} failed (exit {proc.returncode}): {err}")
    return proc
