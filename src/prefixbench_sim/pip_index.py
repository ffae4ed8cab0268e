"""What the wheelhouse serves: a PEP 503 "simple" index of pinned wheels, and code-free
wheels built here.

:class:`LockEntry` is one pinned wheel (name, version, file, where it came from, sha256);
:func:`write_index` lays out ``files/`` (hard links into the download cache) and
``simple/`` (one page per project, links carrying ``#sha256=``);
:func:`build_shim_wheel` writes the reproducible code-free wheels that
:mod:`prefixbench_sim.artifacts_pip` adds (the ``vllm`` shim, the ``vllm-neuron``
stand-ins) and tests use as doubles.
"""

from __future__ import annotations

import base64
import html
import re
import urllib.parse
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prefixbench_sim._build import atomic_write, link_or_copy, sha256_bytes

__all__ = [
    "LockEntry",
    "build_shim_wheel",
    "normalize",
    "render_project_page",
    "render_root_page",
    "write_index",
]

_FIXED_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)


def normalize(name: str) -> str:
    """PEP 503 project name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockEntry:
    """One pinned wheel of the lock."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str

    @property
    def project(self) -> str:
        return normalize(self.name)

    def requirement_line(self) -> str:
        return f"{self.project}=={self.version} --hash=sha256:{self.sha256}"


def _record_hash(data: bytes) -> str:
    raw = bytes.fromhex(sha256_bytes(data))
    return "sha256=" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def build_shim_wheel(dest: Path, name: str, version: str, requires: Sequence[str],
                     summary: str, *, modules: Mapping[str, bytes] | None = None) -> Path:
    """Write a minimal, reproducible, code-free wheel ``<name>-<version>-py3-none-any.whl``.

    It holds ``METADATA``, ``WHEEL`` and ``RECORD`` in ``<name>-<version>.dist-info``
    (the wheel spec's minimum); the zip entries carry a fixed date. ``modules`` (file name
    in the wheel's root -> bytes) adds code: then it is no longer code-free.
    """
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    metadata = "".join([
        "Metadata-Version: 2.1\n",
        f"Name: {name}\n",
        f"Version: {version}\n",
        f"Summary: {summary}\n",
        *(f"Requires-Dist: {r}\n" for r in requires),
        "Requires-Python: >=3.9\n",
    ])
    # The generator keeps the name it had when the wheels were first built: the wheels'
    # bytes, hence the lock's hashes, stay the same.
    wheel = (
        "Wheel-Version: 1.0\nGenerator: prefixbench_sim.artifacts_pip\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files = {**(modules or {}), f"{info}/METADATA": metadata.encode(),
             f"{info}/WHEEL": wheel.encode()}
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items())
    record += f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    path = dest / f"{dist}-py3-none-any.whl"
    dest.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files.items():
            zi = zipfile.ZipInfo(arcname, date_time=_FIXED_ZIP_TIME)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    tmp.replace(path)
    return path


def render_project_page(project: str, entries: Sequence[LockEntry]) -> str:
    links = "".join(
        f'    <a href="../../files/{urllib.parse.quote(e.filename)}#sha256={e.sha256}">'
        f"{html.escape(e.filename)}</a><br>\n"
        for e in sorted(entries, key=lambda e: e.filename)
    )
    return (
        f"<!DOCTYPE html>\n<html>\n  <head><title>Links for {project}</title></head>\n"
        f"  <body>\n    <h1>Links for {project}</h1>\n{links}  </body>\n</html>\n"
    )


def render_root_page(projects: Iterable[str]) -> str:
    links = "".join(f'    <a href="{p}/">{p}</a><br>\n' for p in sorted(set(projects)))
    return (
        "<!DOCTYPE html>\n<html>\n  <head><title>Simple index</title></head>\n"
        f"  <body>\n{links}  </body>\n</html>\n"
    )


def write_index(pip_www: Path, entries: Sequence[LockEntry], wheels: Path) -> None:
    """Lay out ``files/`` and ``simple/`` under ``pip_www`` (a fresh directory)."""
    files = pip_www / "files"
    for e in entries:
        link_or_copy(wheels / e.filename, files / e.filename)
    by_project: dict[str, list[LockEntry]] = {}
    for e in entries:
        by_project.setdefault(e.project, []).append(e)
    simple = pip_www / "simple"
    for project, group in by_project.items():
        atomic_write(simple / project / "index.html", render_project_page(project, group))
    atomic_write(simple / "index.html", render_root_page(by_project))
