"""Preflight rules of the S3 stores: the model's mirror (roles/model_cache, source s3) and
the shared compile cache's s3:// store. Registered with the catalogue on import
(:mod:`prefixbench.config.settings` imports this module)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from prefixbench.config import catalogue

# --- the model's S3 mirror (roles/model_cache, source s3) -------------------------------

_BUCKET_FORBIDDEN_PREFIXES: Final = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_FORBIDDEN_SUFFIXES: Final = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_problem(bucket: str) -> str | None:
    """Why ``bucket`` cannot be an S3 bucket name (general purpose buckets), or None."""
    if not 3 <= len(bucket) <= 63:
        return f"{bucket!r} must be 3 to 63 characters long"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", bucket):
        return (f"{bucket!r} may hold only lowercase letters, digits, dots and hyphens, "
                "and must begin and end with a letter or digit")
    if ".." in bucket or ".-" in bucket or "-." in bucket:
        return f"{bucket!r} must not hold '..', '.-' or '-.'"
    if re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", bucket):
        return f"{bucket!r} must not be formatted as an IP address"
    if bucket.startswith(_BUCKET_FORBIDDEN_PREFIXES) \
            or bucket.endswith(_BUCKET_FORBIDDEN_SUFFIXES):
        return f"{bucket!r} uses a prefix or suffix that S3 reserves"
    return None


@catalogue.rule
def model_s3_mirror(s: Mapping[str, Any]) -> Iterator[str]:
    """Source s3 names one bucket (by bucket or by URI), well formed; keys come in pairs."""
    bucket = str(s.get("model_cache_s3_bucket", ""))
    uri = str(s.get("model_cache_s3_uri", ""))
    if bucket and uri:
        yield "model_cache_s3_bucket and model_cache_s3_uri are both set; keep one"
    if uri and s.get("model_cache_s3_prefix"):
        yield ("model_cache_s3_prefix is set with model_cache_s3_uri, which holds the "
               "prefix; keep one")
    if uri:
        uri_bucket = uri[len("s3://"):].partition("/")[0]
        problem = s3_bucket_problem(uri_bucket)
        if problem:
            yield f"model_cache_s3_uri: bucket {problem}"
    if bucket:
        problem = s3_bucket_problem(bucket)
        if problem:
            yield f"model_cache_s3_bucket {problem}"
    if s.get("model_cache_source") == "s3" and not bucket and not uri:
        yield ("model_cache_source is s3 but no bucket is named: set model_cache_s3_bucket "
               "(and model_cache_s3_prefix), or model_cache_s3_uri")
    if bool(s.get("model_cache_s3_access_key_id")) \
            != bool(s.get("model_cache_s3_secret_access_key")):
        yield ("model_cache_s3_access_key_id and model_cache_s3_secret_access_key go "
               "together: set both, or neither to use the host's credentials")


@catalogue.rule
def compile_store_s3(s: Mapping[str, Any]) -> Iterator[str]:
    """An s3:// compile store names a valid bucket; its keys come in pairs."""
    store = str(s.get("prefixbench_compile_cache_store", ""))
    if store.startswith("s3://"):
        problem = s3_bucket_problem(store[len("s3://"):].partition("/")[0])
        if problem:
            yield f"prefixbench_compile_cache_store: bucket {problem}"
    if bool(s.get("prefixbench_compile_cache_s3_access_key_id")) \
            != bool(s.get("prefixbench_compile_cache_s3_secret_access_key")):
        yield ("prefixbench_compile_cache_s3_access_key_id and "
               "prefixbench_compile_cache_s3_secret_access_key go together: set both, or "
               "neither to use the host's credentials")
