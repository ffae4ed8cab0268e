"""Optional upload of a run directory to S3 (boto3 is imported only when used)."""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

__all__ = ["UploadError", "parse_s3_uri", "upload_run"]


class UploadError(RuntimeError):
    """The upload could not be done; the message says why in one line."""


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (prefix may be '')."""
    if not uri.startswith("s3://"):
        raise UploadError(f"not an s3:// URI: {uri!r}")
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise UploadError(f"no bucket in {uri!r}")
    return bucket, prefix.strip("/")


def upload_run(run_dir: str | Path, s3_uri: str, client: Any = None) -> list[str]:
    """Upload every file of ``run_dir`` to ``s3://bucket/prefix/<run_id>/...``.

    Temporary files of interrupted writes (``.*.tmp``) are skipped. ``client`` is a
    boto3 S3 client; by default one is made from the environment's credentials.
    Returns the keys written, in order.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise UploadError(f"{root}: not a directory")
    bucket, prefix = parse_s3_uri(s3_uri)
    if client is None:
        try:
            import boto3  # type: ignore[import-untyped]  # noqa: PLC0415 - optional, uploads only
        except ImportError as exc:
            raise UploadError("boto3 is not installed (pip install 'prefixbench[controller]')"
                              ) from exc
        client = boto3.client("s3")
    base = f"{prefix}/{root.name}" if prefix else root.name
    keys: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            continue
        key = f"{base}/{path.relative_to(root).as_posix()}"
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if path.suffix == ".md":
            ctype = "text/markdown"
        try:
            client.upload_file(str(path), bucket, key, ExtraArgs={"ContentType": ctype})
        except Exception as exc:
            raise UploadError(f"upload of {path.name} to s3://{bucket}/{key} failed: "
                              f"{exc}") from exc
        keys.append(key)
    return keys
