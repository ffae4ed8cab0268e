"""S3 upload of a run directory, against moto."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run

from prefixbench.report.cli import report_main
from prefixbench.report.upload import UploadError, parse_s3_uri, upload_run

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Any:
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        yield client


def test_parse_uri() -> None:
    assert parse_s3_uri("s3://b/x/y/") == ("b", "x/y")
    assert parse_s3_uri("s3://b") == ("b", "")
    with pytest.raises(UploadError):
        parse_s3_uri("https://b/x")


def test_upload_run_dir(tmp_path: Path, s3: Any) -> None:
    run = make_run(tmp_path, benches=(("cached", "high_overlap"),))
    (run / ".summary.json.x.tmp").write_text("partial")
    keys = upload_run(run, "s3://bench/fleet/", client=s3)
    assert "fleet/run-1/run.json" in keys
    assert "fleet/run-1/host-a/cached/high_overlap/rep1.json" in keys
    assert not any(k.endswith(".tmp") for k in keys)
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket="bench")["Contents"]}
    assert listed == set(keys)


def test_report_cli_uploads_after_writing(tmp_path: Path, s3: Any) -> None:
    run = make_run(tmp_path, benches=(("baseline", "high_overlap"),
                                      ("cached", "high_overlap")))
    out = io.StringIO()
    # 6: the run has no no-overlap result, so that verdict is INCONCLUSIVE.
    assert report_main([str(run), "--upload", "s3://bench/p"], out=out,
                       err=io.StringIO()) == 6
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket="bench")["Contents"]}
    assert {"p/run-1/report.html", "p/run-1/summary.json", "p/run-1/results.csv"} <= listed
    head = s3.head_object(Bucket="bench", Key="p/run-1/report.html")
    assert head["ContentType"] == "text/html"
    assert report_main([str(run), "--upload", "s3://missing-bucket/p"], out=io.StringIO(),
                       err=io.StringIO()) == 5
