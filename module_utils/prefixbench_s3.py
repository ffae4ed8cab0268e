"""The S3 model mirror's names, remote side and local files, for prefixbench_s3_sync.

Runs on the host (Python >= 3.11, boto3 imported only when a client is made), imports
nothing from Ansible, and is unit-tested as plain Python against a local S3 server. The
sync itself (plan, downloads, manifest) is ``prefixbench_s3_transfer``, which imports
this module.

- Names: an ``s3://`` URI, a bucket, a prefix, the local path of a key (never outside
  ``dest``, never a name the bundle reserves), the revision of a set of files (a sha256
  over their sorted path, size and sha256).
- Remote: the S3 client (boto3's credential chain unless keys are given), the listing of
  every object under the prefix (paginated), which errors are worth another attempt.
- Local: the manifest ``<dest>/.prefixbench-s3-manifest.json`` (size, ETag and sha256
  of every file synced), file digests, the files and leftover parts under ``dest``, the
  owner of what the sync writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
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


def not_found(exc: BaseException) -> bool:
    """True when the object (or its bucket's key) does not exist."""
    return _error_code(exc) in ("NoSuchKey", "NotFound", "404")


def conflict(exc: BaseException) -> bool:
    """True when a conditional write raced another one on the same key (S3's 409)."""
    return _error_code(exc) in ("ConditionalRequestConflict", "409")


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
