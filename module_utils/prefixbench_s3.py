"""Mirror an S3 prefix into a local directory: the logic of the prefixbench_s3_sync module.

Runs on the host (Python >= 3.11, boto3 imported only when a client is made), imports
nothing from Ansible, and is unit-tested as plain Python against a local S3 server.

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
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST_NAME = ".prefixbench-s3-manifest.json"
RECORD_NAME = ".prefixbench-model.json"
#: Names at the top of ``dest`` that belong to the bundle, never to the mirror.
RESERVED = frozenset({MANIFEST_NAME, RECORD_NAME})
PART_MARK = ".prefixbench-part-"
MANIFEST_VERSION = 1
CHUNK = 8 * 1024 * 1024

_PLAIN_MD5 = re.compile(r"^[0-9a-f]{32}$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_TRANSIENT_CODES = frozenset({
    "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestTimeTooSkewed", "503", "500", "502", "504"})


class SyncError(Exception):
    """The sync cannot go on; the message says why in one sentence."""


class Transient(Exception):
    """A failure worth another attempt."""


@dataclass(frozen=True)
class RemoteObject:
    """One object of the mirror and the file it becomes."""

    key: str
    rel: str
    size: int
    etag: str


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


# --- names --------------------------------------------------------------------------

def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``."""
    if not uri.startswith("s3://"):
        raise SyncError(f"not an s3:// URI: {uri!r}")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    check_bucket(bucket)
    return bucket, normalise_prefix(prefix)


def check_bucket(bucket: str) -> None:
    """Raise :class:`SyncError` unless ``bucket`` has the form of an S3 bucket name."""
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise SyncError(f"{bucket!r} is not a valid S3 bucket name")


def normalise_prefix(prefix: str) -> str:
    """The prefix without surrounding slashes; refuses ``.`` and ``..`` components."""
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise SyncError(f"{prefix!r} is not a usable key prefix")
    return prefix


def relative_path(key: str, prefix: str) -> str | None:
    """The file path of ``key`` under ``dest``; None for a folder marker.

    Raises :class:`SyncError` for a key that would land outside ``dest`` or on a name
    the bundle reserves.
    """
    head = f"{prefix}/" if prefix else ""
    if not key.startswith(head):
        raise SyncError(f"key {key!r} is not under the prefix {prefix!r}")
    rel = key[len(head):]
    if rel == "" or rel.endswith("/"):
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") or "\x00" in p for p in parts):
        raise SyncError(f"key {key!r} does not map to a safe local path")
    if PART_MARK in parts[-1]:
        raise SyncError(f"key {key!r} collides with this module's temporary files")
    return rel


def is_plain_md5(etag: str) -> bool:
    """True for the ETag of a single-part upload (the MD5 of the content)."""
    return bool(_PLAIN_MD5.match(etag))


def revision_of(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """``sha256:<hex>`` over the sorted ``path size sha256`` lines of the files."""
    digest = hashlib.sha256()
    for rel in sorted(entries):
        entry = entries[rel]
        digest.update(f"{rel}\t{int(entry['size'])}\t{entry['sha256']}\n".encode())
    return "sha256:" + digest.hexdigest()


# --- remote -------------------------------------------------------------------------

def make_client(region: str = "", endpoint_url: str = "", access_key_id: str = "",
                secret_access_key: str = "", retries: int = 5) -> Any:
    """An S3 client; credentials from boto3's chain unless both keys are given."""
    try:
        import boto3  # type: ignore[import-untyped]  # noqa: PLC0415 - only on the host
        from botocore.config import Config  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError as exc:
        raise SyncError("boto3 is not importable by this Python (install python3-boto3, "
                        "or set model_cache_s3_boto3: venv)") from exc
    if bool(access_key_id) != bool(secret_access_key):
        raise SyncError("give both access_key_id and secret_access_key, or neither")
    kwargs: dict[str, Any] = {
        "config": Config(retries={"max_attempts": max(1, retries), "mode": "standard"},
                         connect_timeout=10, read_timeout=60),
    }
    if region:
        kwargs["region_name"] = region
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    if access_key_id:
        kwargs["aws_access_key_id"] = access_key_id
        kwargs["aws_secret_access_key"] = secret_access_key
    return boto3.session.Session().client("s3", **kwargs)


def list_objects(client: Any, bucket: str, prefix: str, page_size: int = 1000
                 ) -> list[RemoteObject]:
    """Every object under ``prefix`` (all pages), as files under ``dest``."""
    head = f"{prefix}/" if prefix else ""
    out: list[RemoteObject] = []
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=head, PaginationConfig={"PageSize": page_size})
    try:
        for page in pages:
            for item in page.get("Contents", []):
                rel = relative_path(str(item["Key"]), prefix)
                if rel is None:
                    continue
                out.append(RemoteObject(str(item["Key"]), rel, int(item["Size"]),
                                        str(item["ETag"]).strip('"')))
    except SyncError:
        raise
    except Exception as exc:  # botocore's errors, whatever their class: one line
        raise SyncError(f"cannot list s3://{bucket}/{head}: {describe(exc)}") from exc
    if not out:
        raise SyncError(f"s3://{bucket}/{head} holds no objects")
    rels = {o.rel for o in out}
    for obj in out:
        if obj.rel in RESERVED:
            raise SyncError(f"key {obj.key!r} would overwrite the bundle's own {obj.rel}")
        parents = PurePosixPath(obj.rel).parents
        clash = next((str(p) for p in parents if str(p) in rels), None)
        if clash is not None:
            raise SyncError(f"{clash!r} is both a file and a folder in the mirror")
    return sorted(out, key=lambda o: o.rel)


def describe(exc: BaseException) -> str:
    """The first line of an error's message (its class name when it has none)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return str(error.get("Code") or status or "")
    return ""


def is_transient(exc: BaseException) -> bool:
    """True for failures that another attempt may not see."""
    if isinstance(exc, Transient | ConnectionError | TimeoutError):
        return True
    code = _error_code(exc)
    if code:
        return code in _TRANSIENT_CODES or code.startswith("5")
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"EndpointConnectionError", "ConnectionClosedError",
                         "ReadTimeoutError", "ConnectTimeoutError", "ResponseStreamingError",
                         "IncompleteReadError", "ProtocolError", "HTTPClientError"})


def precondition_failed(exc: BaseException) -> bool:
    """True when a conditional request failed: the object is no longer the one listed."""
    return _error_code(exc) in ("PreconditionFailed", "412")


# --- local --------------------------------------------------------------------------

def read_manifest(dest: Path) -> dict[str, dict[str, Any]]:
    """The files of the local manifest (empty when there is none or it is unreadable)."""
    try:
        data = json.loads((dest / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(k): dict(v) for k, v in files.items() if isinstance(v, dict)}


def _manifest_text(bucket: str, prefix: str, files: Mapping[str, Mapping[str, Any]]) -> str:
    data = {"version": MANIFEST_VERSION, "bucket": bucket, "prefix": prefix,
            "files": {k: dict(files[k]) for k in sorted(files)}}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}{PART_MARK}{secrets.token_hex(4)}")
    try:
        with tmp.open("w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def hash_file(path: Path) -> tuple[str, str]:
    """(md5, sha256) hex digests of a local file."""
    md5 = hashlib.md5(usedforsecurity=False)
    sha = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(CHUNK):
            md5.update(chunk)
            sha.update(chunk)
    return md5.hexdigest(), sha.hexdigest()


def local_files(dest: Path) -> tuple[set[str], list[str]]:
    """(files under ``dest`` that a mirror could own, leftover part files)."""
    files: set[str] = set()
    parts: list[str] = []
    if not dest.is_dir():
        return files, parts
    for root, dirs, names in os.walk(dest):
        dirs.sort()
        for name in names:
            rel = (Path(root) / name).relative_to(dest).as_posix()
            if PART_MARK in name:
                parts.append(rel)
            elif rel not in RESERVED:
                files.add(rel)
    return files, sorted(parts)


@dataclass(frozen=True)
class Owner:
    """Numeric owner of what the sync writes; -1 keeps the writer's."""

    uid: int = -1
    gid: int = -1

    @classmethod
    def named(cls, owner: str = "", group: str = "") -> Owner:
        import grp  # noqa: PLC0415 - POSIX only
        import pwd  # noqa: PLC0415

        try:
            uid = pwd.getpwnam(owner).pw_uid if owner else -1
            gid = grp.getgrnam(group).gr_gid if group else -1
        except KeyError as exc:
            raise SyncError(f"no such user or group on this host: {exc}") from None
        return cls(uid, gid)

    def apply(self, path: Path) -> None:
        if self.uid != -1 or self.gid != -1:
            os.chown(path, self.uid, self.gid)


def _make_dirs(dest: Path, rel_dir: PurePosixPath, owner: Owner) -> None:
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

    ``client`` is a boto3 S3 client (see :func:`make_client`); ``sleep`` is injectable
    so tests need not wait for backoffs.
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
    owner: Owner = field(default_factory=Owner)
    sleep: Callable[[float], None] = time.sleep
    backoff_s: float = 0.5
    page_size: int = 1000
    progress: Callable[[str, int], None] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        check_bucket(self.bucket)
        self.prefix = normalise_prefix(self.prefix)
        self.dest = Path(self.dest)
        if not self.dest.is_absolute():
            raise SyncError(f"dest must be an absolute path, got {str(self.dest)!r}")

    # The plan: what is up to date, what to adopt, what to fetch.
    def _up_to_date(self, obj: RemoteObject, entry: Mapping[str, Any] | None) -> bool:
        if entry is None or entry.get("etag") != obj.etag or entry.get("size") != obj.size \
                or not entry.get("sha256"):
            return False
        path = self.dest / obj.rel
        if not path.is_file() or path.is_symlink() or path.stat().st_size != obj.size:
            return False
        return not self.verify or hash_file(path)[1] == entry["sha256"]

    def _adoptable(self, obj: RemoteObject) -> dict[str, Any] | None:
        path = self.dest / obj.rel
        if not is_plain_md5(obj.etag) or not path.is_file() or path.is_symlink() \
                or path.stat().st_size != obj.size:
            return None
        md5, sha = hash_file(path)
        return {"etag": obj.etag, "size": obj.size, "sha256": sha} if md5 == obj.etag \
            else None

    def run(self) -> SyncResult:
        start = time.monotonic()
        result = SyncResult()
        if self.dest.exists() and not self.dest.is_dir():
            raise SyncError(f"{self.dest} exists and is not a directory")
        objects = list_objects(self.client, self.bucket, self.prefix, self.page_size)
        old = read_manifest(self.dest)
        new: dict[str, dict[str, Any]] = {}
        fetch: list[RemoteObject] = []
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
        present, parts = local_files(self.dest)
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
                result.revision = revision_of(new)
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
                _atomic_write_text(self.dest / MANIFEST_NAME, text)
                self.owner.apply(self.dest / MANIFEST_NAME)
                result.manifest_changed = True
            result.elapsed_s = time.monotonic() - start
        if failures:
            raise SyncError(f"{len(failures)} of {len(fetch)} file(s) failed: "
                            + "; ".join(failures[:5]))
        result.revision = revision_of(new)
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

    def _fetch_all(self, fetch: list[RemoteObject], new: dict[str, dict[str, Any]],
                   result: SyncResult, failures: list[str]) -> None:
        def one(obj: RemoteObject) -> None:
            try:
                entry = self._fetch_with_retries(obj)
            except SyncError as exc:
                with self._lock:
                    failures.append(str(exc))
                return
            with self._lock:
                new[obj.rel] = entry
                result.downloaded.append(obj.rel)
                result.bytes_downloaded += obj.size
                # Keep the manifest current, so a killed run loses at most the files
                # in flight.
                _atomic_write_text(self.dest / MANIFEST_NAME,
                                   _manifest_text(self.bucket, self.prefix, new))

        workers = max(1, min(self.concurrency, len(fetch)))
        if workers == 1:
            for obj in fetch:
                one(obj)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(one, obj) for obj in fetch]:
                future.result()

    def _fetch_with_retries(self, obj: RemoteObject) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return self.fetch_one(obj)
            except SyncError:
                raise
            except Exception as exc:  # botocore's or the socket's: classified below
                if precondition_failed(exc):
                    raise SyncError(f"{obj.key} changed in the bucket during the sync; "
                                    "run again") from exc
                if not is_transient(exc) or attempt >= self.retries:
                    raise SyncError(f"{obj.key}: {describe(exc)}") from exc
                self.sleep(min(30.0, self.backoff_s * 2 ** attempt))
                attempt += 1

    def fetch_one(self, obj: RemoteObject) -> dict[str, Any]:
        """Download one object into place atomically; its manifest entry."""
        target = self.dest / obj.rel
        _make_dirs(self.dest, PurePosixPath(obj.rel).parent, self.owner)
        if target.is_dir() and not target.is_symlink():
            raise SyncError(f"{target} is a directory; the mirror has a file there")
        tmp = target.with_name(f".{target.name}{PART_MARK}{secrets.token_hex(4)}")
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
                    while chunk := body.read(CHUNK):
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
                raise Transient(f"{obj.key}: got {size} bytes, the listing says {obj.size}")
            kms = answer.get("ServerSideEncryption") == "aws:kms"
            if is_plain_md5(obj.etag) and not kms and md5.hexdigest() != obj.etag:
                raise Transient(f"{obj.key}: MD5 {md5.hexdigest()} does not match "
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
        return (dest / MANIFEST_NAME).read_text(encoding="utf-8")
    except OSError:
        return None


def sync(client: Any, bucket: str, prefix: str, dest: str | Path, **options: Any
         ) -> SyncResult:
    """Run one :class:`Sync` (the options are its fields)."""
    return Sync(client=client, bucket=bucket, prefix=prefix, dest=Path(dest), **options).run()
