"""Mirror an S3 prefix into a local directory: the sync of the prefixbench_s3_sync module.

Runs on the host (Python >= 3.11) and imports nothing from Ansible but its sibling
module_util ``prefixbench_s3`` (names, the S3 client and listing, local files); it is
unit-tested as plain Python against a local S3 server.

- Every object under ``s3://<bucket>/<prefix>/`` is listed (paginated) and becomes the
  file ``<dest>/<key without the prefix>``.
- A file is downloaded only when it is missing, or when the local manifest
  (``<dest>/.prefixbench-s3-manifest.json``: size, ETag and sha256 of every file synced)
  says it differs from the object. A file already there without a manifest entry is
  adopted without a download when its size and MD5 match a single-part ETag.
- Each file is streamed into ``<dir>/.<name>.prefixbench-part-<random>``, checked (size,
  MD5 against a single-part ETag), and renamed into place: the final path never holds a
  partial file. Parts left by a killed run are removed by the next one.
- The download is conditional on the ETag listed (``If-Match``): an object replaced
  during the sync fails that file instead of mixing two versions.
- Transient errors (connection, timeouts, throttling, 5xx, a short read) are retried with
  exponential backoff; botocore's own retries come first.
- Local files the mirror does not hold are left alone unless ``delete_extra``.
- The revision is a sha256 over the sorted (path, size, sha256) of every file: it names
  the bytes on disk, so two regional mirrors of the same model give the same revision.
- Check mode lists and compares, reads local files when it has to, and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

# On a host the sibling is ansible.module_utils.prefixbench_s3: Ansible ships it because
# it finds this import. The unit tests import module_utils as top-level modules.
if TYPE_CHECKING:
    import prefixbench_s3 as s3
else:
    try:
        from ansible.module_utils import prefixbench_s3 as s3
    except ImportError:
        import prefixbench_s3 as s3


@dataclass
class SyncResult:
    """What a sync did (or, in check mode, would do)."""

    revision: str | None = None
    downloaded: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    removed_parts: list[str] = field(default_factory=list)
    bytes_downloaded: int = 0
    files: int = 0
    bytes_total: int = 0
    manifest_changed: bool = False
    elapsed_s: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.downloaded or self.adopted or self.deleted or self.removed_parts
                    or self.manifest_changed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "revision": self.revision,
            "downloaded": sorted(self.downloaded),
            "adopted": sorted(self.adopted),
            "deleted": sorted(self.deleted),
            "extra": sorted(self.extra),
            "removed_parts": sorted(self.removed_parts),
            "bytes_downloaded": self.bytes_downloaded,
            "files": self.files,
            "bytes_total": self.bytes_total,
            "elapsed_s": round(self.elapsed_s, 3),
        }


# --- writing ------------------------------------------------------------------------

def _manifest_text(bucket: str, prefix: str, files: Mapping[str, Mapping[str, Any]]) -> str:
    data = {"version": s3.MANIFEST_VERSION, "bucket": bucket, "prefix": prefix,
            "files": {k: dict(files[k]) for k in sorted(files)}}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}{s3.PART_MARK}{secrets.token_hex(4)}")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _make_dirs(dest: Path, rel_dir: PurePosixPath, owner: s3.Owner) -> None:
    current = dest
    for part in rel_dir.parts:
        current = current / part
        if not current.is_dir():
            current.mkdir(mode=0o755, exist_ok=True)
            owner.apply(current)


# --- the sync -----------------------------------------------------------------------

@dataclass
class Sync:
    """One sync of ``s3://bucket/prefix/`` into ``dest``.

    ``client`` is a boto3 S3 client (see :func:`prefixbench_s3.make_client`); ``sleep``
    is injectable so tests need not wait for backoffs.
    """

    client: Any
    bucket: str
    prefix: str
    dest: Path
    check_mode: bool = False
    delete_extra: bool = False
    verify: bool = False
    concurrency: int = 8
    retries: int = 5
    owner: s3.Owner = field(default_factory=s3.Owner)
    sleep: Callable[[float], None] = time.sleep
    backoff_s: float = 0.5
    page_size: int = 1000
    progress: Callable[[str, int], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        s3.check_bucket(self.bucket)
        self.prefix = s3.normalise_prefix(self.prefix)
        self.dest = Path(self.dest)
        if not self.dest.is_absolute():
            raise s3.SyncError(f"dest must be an absolute path, got {str(self.dest)!r}")

    # The plan: what is up to date, what to adopt, what to fetch.
    def _up_to_date(self, obj: s3.RemoteObject, entry: Mapping[str, Any] | None) -> bool:
        if entry is None or entry.get("etag") != obj.etag or entry.get("size") != obj.size \
                or not entry.get("sha256"):
            return False
        path = self.dest / obj.rel
        if not path.is_file() or path.is_symlink() or path.stat().st_size != obj.size:
            return False
        return not self.verify or s3.hash_file(path)[1] == entry["sha256"]

    def _adoptable(self, obj: s3.RemoteObject) -> dict[str, Any] | None:
        path = self.dest / obj.rel
        if not s3.is_plain_md5(obj.etag) or not path.is_file() or path.is_symlink() \
                or path.stat().st_size != obj.size:
            return None
        md5, sha = s3.hash_file(path)
        return {"etag": obj.etag, "size": obj.size, "sha256": sha} if md5 == obj.etag \
            else None

    def run(self) -> SyncResult:
        start = time.monotonic()
        result = SyncResult()
        if self.dest.exists() and not self.dest.is_dir():
            raise s3.SyncError(f"{self.dest} exists and is not a directory")
        objects = s3.list_objects(self.client, self.bucket, self.prefix, self.page_size)
        old = s3.read_manifest(self.dest)
        new: dict[str, dict[str, Any]] = {}
        fetch: list[s3.RemoteObject] = []
        for obj in objects:
            entry = old.get(obj.rel)
            if self._up_to_date(obj, entry):
                assert entry is not None
                new[obj.rel] = {"etag": obj.etag, "size": obj.size,
                                "sha256": entry["sha256"]}
                continue
            adopted = self._adoptable(obj)
            if adopted is not None:
                new[obj.rel] = adopted
                result.adopted.append(obj.rel)
            else:
                fetch.append(obj)
        present, parts = s3.local_files(self.dest)
        wanted = {o.rel for o in objects}
        extra = sorted(present - wanted)
        result.removed_parts = parts
        result.files = len(objects)
        result.bytes_total = sum(o.size for o in objects)
        if self.delete_extra:
            result.deleted = extra
        else:
            result.extra = extra

        if self.check_mode:
            result.downloaded = [o.rel for o in fetch]
            result.bytes_downloaded = sum(o.size for o in fetch)
            if not fetch:
                result.revision = s3.revision_of(new)
                result.manifest_changed = read_manifest_text(self.dest) != _manifest_text(
                    self.bucket, self.prefix, new)
            else:
                result.manifest_changed = True
            result.elapsed_s = time.monotonic() - start
            return result

        self.dest.mkdir(mode=0o755, parents=True, exist_ok=True)
        for rel in parts:
            (self.dest / rel).unlink(missing_ok=True)
        for rel in result.deleted:
            (self.dest / rel).unlink(missing_ok=True)
        self._prune_empty_dirs({str(PurePosixPath(r).parent) for r in result.deleted})
        failures: list[str] = []
        try:
            self._fetch_all(fetch, new, result, failures)
        finally:
            text = _manifest_text(self.bucket, self.prefix, new)
            if read_manifest_text(self.dest) != text:
                _atomic_write_text(self.dest / s3.MANIFEST_NAME, text)
                self.owner.apply(self.dest / s3.MANIFEST_NAME)
                result.manifest_changed = True
            result.elapsed_s = time.monotonic() - start
        if failures:
            raise s3.SyncError(f"{len(failures)} of {len(fetch)} file(s) failed: "
                               + "; ".join(failures[:5]))
        result.revision = s3.revision_of(new)
        return result

    def _prune_empty_dirs(self, rel_dirs: Iterable[str]) -> None:
        for rel in sorted(rel_dirs, key=lambda r: -r.count("/")):
            current = self.dest / rel
            while current != self.dest and self.dest in current.parents:
                try:
                    current.rmdir()
                except OSError:
                    break
                current = current.parent

    def _fetch_all(self, fetch: list[s3.RemoteObject], new: dict[str, dict[str, Any]],
                   result: SyncResult, failures: list[str]) -> None:
        def one(obj: s3.RemoteObject) -> None:
            try:
                entry = self._fetch_with_retries(obj)
            except s3.SyncError as exc:
                with self._lock:
                    failures.append(str(exc))
                return
            with self._lock:
                new[obj.rel] = entry
                result.downloaded.append(obj.rel)
                result.bytes_downloaded += obj.size
                # Keep the manifest current, so a killed run loses at most the files
                # in flight.
                _atomic_write_text(self.dest / s3.MANIFEST_NAME,
                                   _manifest_text(self.bucket, self.prefix, new))

        workers = max(1, min(self.concurrency, len(fetch)))
        if workers == 1:
            for obj in fetch:
                one(obj)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(one, obj) for obj in fetch]:
                future.result()

    def _fetch_with_retries(self, obj: s3.RemoteObject) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return self.fetch_one(obj)
            except s3.SyncError:
                raise
            except Exception as exc:  # botocore's or the socket's: classified below
                if s3.precondition_failed(exc):
                    raise s3.SyncError(f"{obj.key} changed in the bucket during the sync; "
                                       "run again") from exc
                if not s3.is_transient(exc) or attempt >= self.retries:
                    raise s3.SyncError(f"{obj.key}: {s3.describe(exc)}") from exc
                self.sleep(min(30.0, self.backoff_s * 2 ** attempt))
                attempt += 1

    def fetch_one(self, obj: s3.RemoteObject) -> dict[str, Any]:
        """Download one object into place atomically; its manifest entry."""
        target = self.dest / obj.rel
        _make_dirs(self.dest, PurePosixPath(obj.rel).parent, self.owner)
        if target.is_dir() and not target.is_symlink():
            raise s3.SyncError(f"{target} is a directory; the mirror has a file there")
        tmp = target.with_name(f".{target.name}{s3.PART_MARK}{secrets.token_hex(4)}")
        md5 = hashlib.md5(usedforsecurity=False)
        sha = hashlib.sha256()
        size = 0
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=obj.key,
                                            IfMatch=f'"{obj.etag}"')
            body = answer["Body"]
            try:
                with tmp.open("xb") as out:
                    tmp.chmod(0o644)
                    while chunk := body.read(s3.CHUNK):
                        out.write(chunk)
                        md5.update(chunk)
                        sha.update(chunk)
                        size += len(chunk)
                        if self.progress is not None:
                            self.progress(obj.rel, len(chunk))
                    out.flush()
                    os.fsync(out.fileno())
            finally:
                body.close()
            if size != obj.size:
                raise s3.Transient(f"{obj.key}: got {size} bytes, the listing says {obj.size}")
            kms = answer.get("ServerSideEncryption") == "aws:kms"
            if s3.is_plain_md5(obj.etag) and not kms and md5.hexdigest() != obj.etag:
                raise s3.Transient(f"{obj.key}: MD5 {md5.hexdigest()} does not match "
                                   f"the ETag {obj.etag}")
            self.owner.apply(tmp)
            if target.is_symlink():
                target.unlink()
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        return {"etag": obj.etag, "size": obj.size, "sha256": sha.hexdigest()}


def read_manifest_text(dest: Path) -> str | None:
    """The manifest file's text, or None."""
    try:
        return (dest / s3.MANIFEST_NAME).read_text(encoding="utf-8")
    except OSError:
        return None


def sync(client: Any, bucket: str, prefix: str, dest: str | Path, **options: Any
         ) -> SyncResult:
    """Run one :class:`Sync` (the options are its fields)."""
    return Sync(client=client, bucket=bucket, prefix=prefix, dest=Path(dest), **options).run()
