"""The shared compile cache: archives of a server's compile-cache directory, by key.

Plain Python (standard library only), used by ``library/prefixbench_compile_cache.py`` on
the hosts (scan, pack, restore) and on the controller (lookup, publish), and unit-tested.

A store is a directory on the controller holding, per key, ``<key>.tar.gz`` and its
manifest ``<key>.json`` (sha256, size, files, what the key was made of, who published
it). Publishing writes the archive under a temporary name, then renames it, then writes
the manifest the same way: a key is in the store once its manifest is, and its archive is
then whole. The first publisher of a key wins; a later one leaves it as it is.

Restoring checks the archive's sha256 against the manifest before reading it, refuses
members that would land outside the cache directory or are not plain files and folders,
writes each file itself (no owner, mode or link taken from the archive) into a temporary
folder beside the cache, and renames each into place unless the cache already has it
(both platforms' caches name their entries by content hash, so a file of the same name
holds the same graph). A marker ``.prefixbench-keys/<key>`` then says the key's graphs
are here, so the next start skips the copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

MARKERS = ".prefixbench-keys"
INCOMING = ".prefixbench-incoming"
CHUNK = 1 << 20


class CompileCacheError(Exception):
    """An archive that cannot be used: the message is one line for the operator."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _walk(directory: Path) -> list[str]:
    """The cache's files, relative, sorted; the bundle's own folders left out."""
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        base = Path(root)
        if base == directory:
            dirs[:] = [d for d in dirs if d not in {MARKERS, INCOMING}]
        dirs.sort()
        found.extend(str((base / name).relative_to(directory)) for name in sorted(files)
                     if not (base / name).is_symlink())
    return found


def scan(directory: str) -> dict[str, Any]:
    """How many files (and bytes) the cache holds: compared before and after a server
    start, a growth means that start compiled."""
    path = Path(directory)
    if not path.is_dir():
        return {"files": 0, "bytes": 0}
    files = _walk(path)
    return {"files": len(files), "bytes": sum((path / f).stat().st_size for f in files)}


def has_marker(directory: str, key: str) -> bool:
    return (Path(directory) / MARKERS / key).is_file()


def write_marker(directory: str, key: str) -> None:
    markers = Path(directory) / MARKERS
    markers.mkdir(parents=True, exist_ok=True)
    (markers / key).write_text(f"{int(time.time())}\n", encoding="utf-8")


def _temp_beside(target: Path, prefix: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=target.parent)
    os.close(fd)
    return Path(tmp)


def pack(directory: str, archive: str) -> dict[str, Any]:
    """``directory``'s files into the gzipped tar ``archive`` (written under a temporary
    name, then renamed); returns sha256, size and file count."""
    source, target = Path(directory), Path(archive).absolute()
    files = _walk(source) if source.is_dir() else []
    if not files:
        raise CompileCacheError(f"{directory}: no compiled files to publish")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(target, ".pack-")
    try:
        with tarfile.open(tmp, mode="w:gz") as tar:
            for rel in files:
                tar.add(source / rel, arcname=rel, recursive=False)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return {"sha256": sha256_file(target), "size": target.stat().st_size, "files": len(files)}


def _checked(member: tarfile.TarInfo) -> PurePosixPath:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or not name.parts or name.parts == (".",):
        raise CompileCacheError(f"member {member.name!r} is outside the cache")
    if name.parts[0] in {MARKERS, INCOMING}:
        raise CompileCacheError(f"member {member.name!r} is the bundle's own")
    if not (member.isfile() or member.isdir()):
        raise CompileCacheError(f"member {member.name!r} is not a file or folder")
    return name


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, into: Path) -> None:
    target = into.joinpath(*_checked(member).parts)
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    source = tar.extractfile(member)
    if source is None:
        raise CompileCacheError(f"member {member.name!r} has no data")
    target.parent.mkdir(parents=True, exist_ok=True)
    with source, target.open("wb") as handle:
        shutil.copyfileobj(source, handle, CHUNK)


def _owner(directory: Path) -> tuple[int, int]:
    """The owner of ``directory``, or of its nearest existing parent: the service user
    that owns VLLM_CACHE_ROOT, which must be able to add its own graphs later."""
    path = directory.absolute()
    while not path.exists():
        path = path.parent
    info = path.stat()
    return info.st_uid, info.st_gid


def _give(directory: Path, owner: tuple[int, int]) -> None:
    """Everything under ``directory`` to ``owner`` (when run as root and needed)."""
    if os.geteuid() != 0:
        return
    uid, gid = owner
    for root, dirs, files in os.walk(directory):
        for name in [*dirs, *files]:
            info = (Path(root) / name).lstat()
            if (info.st_uid, info.st_gid) != owner:
                os.lchown(Path(root) / name, uid, gid)
    info = directory.stat()
    if (info.st_uid, info.st_gid) != owner:
        os.chown(directory, uid, gid)


def restore(archive: str, sha256: str, directory: str, key: str) -> dict[str, Any]:
    """Unpack a checked archive into ``directory`` (see the module's docstring).
    Raises :class:`CompileCacheError` for a corrupt or mismatched archive, leaving the
    cache as it was."""
    got = sha256_file(archive)
    if got != sha256:
        raise CompileCacheError(f"sha256 {got[:12]}... is not the store's {sha256[:12]}...")
    cache = Path(directory)
    owner = _owner(cache)
    cache.mkdir(parents=True, exist_ok=True)
    incoming = cache / INCOMING
    shutil.rmtree(incoming, ignore_errors=True)  # left by a killed run
    incoming.mkdir()
    restored = kept = 0
    try:
        try:
            with tarfile.open(archive, mode="r:gz") as tar:
                for member in tar:
                    _extract(tar, member, incoming)
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise CompileCacheError(f"unreadable archive: {exc}") from None
        for rel in _walk(incoming):
            target = cache / rel
            if target.exists():
                kept += 1
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            (incoming / rel).replace(target)
            restored += 1
    finally:
        shutil.rmtree(incoming, ignore_errors=True)
    write_marker(directory, key)
    _give(cache, owner)
    return {"restored": restored, "kept": kept}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _temp_beside(path, ".tmp-")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def lookup(store: str, key: str) -> dict[str, Any] | None:
    """The manifest of ``key`` when the store holds it whole, else None."""
    archive = Path(store) / f"{key}.tar.gz"
    try:
        data = json.loads((Path(store) / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not archive.is_file() \
            or archive.stat().st_size != data.get("size"):
        return None
    return data


def publish(archive: str, sha256: str, store: str, key: str,
            details: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Put a fetched archive into the store under ``key`` unless the key is already
    there. Returns (published, manifest)."""
    existing = lookup(store, key)
    if existing is not None:
        return False, existing
    got = sha256_file(archive)
    if got != sha256:
        raise CompileCacheError(f"the fetched archive's sha256 {got[:12]}... is not the "
                                f"packed {sha256[:12]}...")
    folder = Path(store)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = _temp_beside(folder / f"{key}.tar.gz", ".tmp-")
    try:
        shutil.copyfile(archive, tmp)
        tmp.chmod(0o644)
        tmp.replace(folder / f"{key}.tar.gz")
    finally:
        tmp.unlink(missing_ok=True)
    manifest = {"key": key, "sha256": sha256, "size": Path(archive).stat().st_size,
                "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **dict(details)}
    _write_atomic(folder / f"{key}.json",
                  (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return True, manifest
