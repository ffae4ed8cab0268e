"""moto's in-process S3 for the S3 tests (a test double of a bucket): every call is a
real boto3 request, answered by moto, with nothing read from this machine's AWS config."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import module_runner
import pytest

sys.path.insert(0, str(module_runner.ROOT / "module_utils"))
import prefixbench_s3 as s3


@contextmanager
def moto_bucket(monkeypatch: pytest.MonkeyPatch, bucket: str) -> Iterator[Any]:
    """A boto3 client of moto's S3 holding one empty ``bucket``."""
    moto = pytest.importorskip("moto")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with moto.mock_aws():
        cli = s3.make_client(region="us-east-1", retries=1)
        cli.create_bucket(Bucket=bucket)
        yield cli
