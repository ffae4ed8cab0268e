"""The shared compile cache's store in S3: the hosts publish and fetch archives themselves.

Plain Python, run on the hosts by ``library/prefixbench_compile_cache.py`` (boto3 is
imported only when a client is made, by ``prefixbench_s3.make_client``) and unit-tested
against a local S3 server.

A store ``s3://bucket/prefix`` holds, per key:

* ``<prefix>/<key>/<sha256>.tar.gz``: the archive, named by its own checksum, so two
  hosts that publish the same key at once never overwrite each other's bytes;
* ``<prefix>/<key>.json``: the manifest (sha256, size, files, what the key was made of,
  who published it, the archive's object key).

S3 makes an object visible only once its upload is whole, so publishing uploads the
archive first and the manifest last: a key is in the store once its manifest is, and the
archive the manifest names is then complete. The manifest is written with
``If-None-Match: *`` (Amazon S3 User Guide, "How to prevent object overwrites with
conditional writes", userguide/conditional-writes.html: the PUT fails with 412
Precondition Failed when the key exists, and one of two racing PUTs with 409
ConditionalRequestConflict): the first publisher of a key wins and a later one is told
so. A store that ignores the condition leaves the last manifest, which
still names a whole archive of the same key.

Fetching downloads the manifest's archive beside the cache under a temporary name; the
restore step then checks its sha256 against the manifest before reading a byte of it
(``prefixbench_compile_cache.restore``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

# On a host the siblings are ansible.module_utils.*: Ansible ships them because it finds
# these imports. The unit tests import module_utils as top-level modules.
if TYPE_CHECKING:
    import prefixbench_compile_cache as cc
    import prefixbench_s3 as s3
else:
    try:
        from ansible.module_utils import prefixbench_compile_cache as cc
        from ansible.module_utils import prefixbench_s3 as s3
    except ImportError:
        import prefixbench_compile_cache as cc
        import prefixbench_s3 as s3

SCHEME = "s3://"
CompileCacheError = cc.CompileCacheError


def is_s3(store: str) -> bool:
    return str(store).startswith(SCHEME)


def location(store: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix); a one-line error for anything else."""
    try:
        return s3.parse_s3_uri(store)
    except s3.SyncError as exc:
        raise CompileCacheError(str(exc)) from None


def _object(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def manifest_key(prefix: str, key: str) -> str:
    return _object(prefix, f"{key}.json")


def archive_key(prefix: str, key: str, sha256: str) -> str:
    return _object(prefix, f"{key}/{sha256}.tar.gz")


def lookup(client: Any, store: str, key: str) -> dict[str, Any] | None:
    """The manifest of ``key`` when the store holds it and its archive whole, else None."""
    bucket, prefix = location(store)
    try:
        body = client.get_object(Bucket=bucket, Key=manifest_key(prefix, key))["Body"]
        data = json.loads(body.read().decode("utf-8"))
    except ValueError:
        return None
    except Exception as exc:  # noqa: BLE001 - botocore's errors, told apart by code
        if s3.not_found(exc):
            return None
        raise CompileCacheError(f"cannot read {SCHEME}{bucket}/{manifest_key(prefix, key)}: "
                                f"{s3.describe(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        return None
    try:
        head = client.head_object(Bucket=bucket, Key=str(data.get("object")))
    except Exception as exc:  # noqa: BLE001
        if s3.not_found(exc):
            return None
        raise CompileCacheError(f"cannot find the archive of key {key}: {s3.describe(exc)}"
                                ) from None
    if head.get("ContentLength") != data.get("size"):
        return None
    return data


def publish(client: Any, archive: str, sha256: str, store: str, key: str, *,
            details: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Upload a packed archive and then its manifest, unless the key is already there.
    Returns (published, manifest)."""
    existing = lookup(client, store, key)
    if existing is not None:
        return False, existing
    got = cc.sha256_file(archive)
    if got != sha256:
        raise CompileCacheError(f"the packed archive's sha256 {got[:12]}... is not "
                                f"{sha256[:12]}...")
    bucket, prefix = location(store)
    obj = archive_key(prefix, key, sha256)
    manifest = {"key": key, "sha256": sha256, "size": Path(archive).stat().st_size,
                "object": obj,
                "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **dict(details)}
    try:
        client.upload_file(archive, bucket, obj)
        client.put_object(Bucket=bucket, Key=manifest_key(prefix, key), IfNoneMatch="*",
                          ContentType="application/json",
                          Body=(json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    except Exception as exc:  # noqa: BLE001
        if s3.precondition_failed(exc) or s3.conflict(exc):  # another host published first
            won = lookup(client, store, key)
            if won is not None:
                return False, won
        raise CompileCacheError(f"cannot publish key {key} to {SCHEME}{bucket}/{prefix}: "
                                f"{s3.describe(exc)}") from None
    return True, manifest


def fetch(client: Any, store: str, manifest: Mapping[str, Any], beside: str) -> str:
    """Download the manifest's archive to a temporary file in ``beside`` (created when
    missing); returns its path. The caller checks its sha256 and removes it."""
    bucket, _ = location(store)
    folder = Path(beside)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".prefixbench-fetch-", suffix=".tar.gz", dir=folder)
    os.close(fd)
    try:
        client.download_file(bucket, str(manifest["object"]), tmp)
    except Exception as exc:  # noqa: BLE001
        Path(tmp).unlink(missing_ok=True)
        raise CompileCacheError(f"cannot fetch {manifest.get('object')}: {s3.describe(exc)}"
                                ) from None
    return tmp
