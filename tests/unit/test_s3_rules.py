"""Preflight rules of the model's S3 mirror (prefixbench.config.rules_s3.model_s3_mirror)."""

from __future__ import annotations

from typing import Any

import pytest

from prefixbench.config import settings
from prefixbench.config.rules_s3 import s3_bucket_problem

BASE: dict[str, Any] = {"prefixbench_instance_type": "trn2.48xlarge",
                        "vllm_service_model": "/opt/models/m"}


def problems(**values: Any) -> list[str]:
    return settings.validate({**BASE, **values}, host="h1").problems


def test_a_named_bucket_is_enough() -> None:
    assert problems(model_cache_source="s3", model_cache_s3_bucket="models-us-east-2",
                    model_cache_s3_prefix="gpt-oss-120b/",
                    model_cache_s3_region="us-east-2") == []
    assert problems(model_cache_source="s3", model_cache_s3_uri="s3://models/gpt-oss") == []


def test_source_s3_needs_a_bucket() -> None:
    assert problems(model_cache_source="s3") == [
        "h1: model_cache_source is s3 but no bucket is named: set model_cache_s3_bucket "
        "(and model_cache_s3_prefix), or model_cache_s3_uri"]


def test_bucket_and_uri_are_not_both_set() -> None:
    assert problems(model_cache_source="s3", model_cache_s3_bucket="models",
                    model_cache_s3_uri="s3://models/x") == [
        "h1: model_cache_s3_bucket and model_cache_s3_uri are both set; keep one"]
    assert problems(model_cache_source="s3", model_cache_s3_prefix="p",
                    model_cache_s3_uri="s3://models/x") == [
        "h1: model_cache_s3_prefix is set with model_cache_s3_uri, which holds the "
        "prefix; keep one"]


def test_keys_come_in_pairs() -> None:
    # Preflight passes secrets redacted: only their presence counts.
    assert problems(model_cache_source="s3", model_cache_s3_bucket="models",
                    model_cache_s3_secret_access_key=settings.REDACTED) == [
        "h1: model_cache_s3_access_key_id and model_cache_s3_secret_access_key go "
        "together: set both, or neither to use the host's credentials"]
    assert problems(model_cache_source="s3", model_cache_s3_bucket="models",
                    model_cache_s3_access_key_id=settings.REDACTED,
                    model_cache_s3_secret_access_key=settings.REDACTED) == []


@pytest.mark.parametrize(("bucket", "why"), [
    ("10.0.0.1", "IP address"),
    ("a..b", "'..'"),
    ("ab-.cd", "'-.'"),
    ("xn--models", "reserves"),
    ("models-s3alias", "reserves"),
    ("ab", "3 to 63"),
    ("Models", "lowercase"),
    ("-models", "begin and end"),
])
def test_bucket_name_form(bucket: str, why: str) -> None:
    problem = s3_bucket_problem(bucket)
    assert problem is not None and why in problem


def test_bad_bucket_is_reported_by_name() -> None:
    assert problems(model_cache_source="s3", model_cache_s3_bucket="10.1.2.3") == [
        "h1: model_cache_s3_bucket '10.1.2.3' must not be formatted as an IP address"]
    assert problems(model_cache_source="s3", model_cache_s3_uri="s3://Models/x")[0].startswith(
        "h1: model_cache_s3_uri 's3://Models/x' does not match")


def test_region_and_endpoint_forms() -> None:
    assert problems(model_cache_s3_region="us-east-2",
                    model_cache_s3_endpoint_url="http://10.213.0.1:8081") == []
    assert "model_cache_s3_region" in problems(model_cache_s3_region="US East")[0]
    assert "model_cache_s3_endpoint_url" in problems(
        model_cache_s3_endpoint_url="ftp://x")[0]
    assert "model_cache_s3_boto3" in problems(model_cache_s3_boto3="brew")[0]
