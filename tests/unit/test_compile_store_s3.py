"""The shared compile cache's S3 store (module_utils/prefixbench_compile_store_s3.py and
the module's S3 paths), against moto's in-process S3: every call is a real boto3
request, answered by moto."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import module_runner
import pytest
from moto_s3 import moto_bucket

sys.path.insert(0, str(module_runner.ROOT / "module_utils"))
import prefixbench_compile_cache as cc
import prefixbench_compile_store_s3 as s3store
import prefixbench_s3 as s3

from prefixbench.config import settings as pb_settings
from prefixbench.servers import compile_cache

moto = pytest.importorskip("moto")

BUCKET = "pbtest-compile"
STORE = f"s3://{BUCKET}/fleet/graphs"
#: What every validation needs besides the settings under test.
BASE: dict[str, Any] = {"prefixbench_instance_type": "trn2.48xlarge",
                        "vllm_service_model": "/opt/models/m"}
UTILS = ("prefixbench_s3", "prefixbench_compile_cache", "prefixbench_compile_claim",
         "prefixbench_compile_store_s3")


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_bucket(monkeypatch, BUCKET) as cli:
        yield cli


def make_cache(root: Path, graph: bytes = b"graph-1") -> Path:
    cache = root / "inductor"
    (cache / "fxgraph" / "ab").mkdir(parents=True)
    (cache / "fxgraph" / "ab" / "entry").write_bytes(graph)
    (cache / "kernel.so").write_bytes(b"\x7fELF" + bytes(100))
    return cache


def packed(tmp_path: Path, name: str = "leader", graph: bytes = b"graph-1"
           ) -> tuple[Path, dict[str, Any]]:
    archive = tmp_path / f"{name}.tar.gz"
    return archive, cc.pack(str(make_cache(tmp_path / name, graph)), str(archive))


def objects(client: Any) -> list[str]:
    listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return sorted(o["Key"] for o in listed)


def test_publish_then_fetch_and_restore_on_a_fresh_host(client: Any, tmp_path: Path) -> None:
    archive, info = packed(tmp_path)
    assert s3store.lookup(client, STORE, "ck-1") is None
    done, manifest = s3store.publish(client, str(archive), info["sha256"], STORE, "ck-1",
                                     details={"host": "h1", "files": info["files"]})
    assert done and manifest["host"] == "h1" and manifest["size"] == info["size"]
    # The archive is named by its checksum; the manifest, written last, names it.
    assert objects(client) == ["fleet/graphs/ck-1.json",
                               f"fleet/graphs/ck-1/{info['sha256']}.tar.gz"]
    assert s3store.lookup(client, STORE, "ck-1") == manifest
    fresh = tmp_path / "fresh" / "inductor"
    got = s3store.fetch(client, STORE, manifest, str(fresh.parent))
    try:
        assert cc.restore(got, manifest["sha256"], str(fresh), "ck-1") == \
            {"restored": 2, "kept": 0}
    finally:
        Path(got).unlink()
    assert (fresh / "fxgraph" / "ab" / "entry").read_bytes() == b"graph-1"
    assert sorted(p.name for p in fresh.parent.iterdir()) == ["inductor"]  # no temp left


def test_the_first_publisher_wins_even_when_both_looked_first(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, info1 = packed(tmp_path, "a", b"graph-a")
    second, info2 = packed(tmp_path, "b", b"graph-b")
    s3store.publish(client, str(first), info1["sha256"], STORE, "ck-1", details={"host": "a"})
    # A later publisher that checks first is told the key is there.
    done, manifest = s3store.publish(client, str(second), info2["sha256"], STORE, "ck-1",
                                     details={"host": "b"})
    assert not done and manifest["host"] == "a"
    # A racing one that looked before the first manifest landed: the conditional write
    # of its manifest fails, and it reports the winner's.
    real = s3store.lookup
    calls: list[int] = []

    def stale_then_real(*args: Any) -> dict[str, Any] | None:
        calls.append(1)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(s3store, "lookup", stale_then_real)
    done, manifest = s3store.publish(client, str(second), info2["sha256"], STORE, "ck-1",
                                     details={"host": "b"})
    assert not done and manifest["host"] == "a" and manifest["sha256"] == info1["sha256"]
    body = client.get_object(Bucket=BUCKET, Key="fleet/graphs/ck-1.json")["Body"].read()
    assert json.loads(body)["host"] == "a"


def test_a_manifest_without_its_whole_archive_is_not_in_the_store(
        client: Any, tmp_path: Path) -> None:
    archive, info = packed(tmp_path)
    _, manifest = s3store.publish(client, str(archive), info["sha256"], STORE, "ck-1", details={})
    client.put_object(Bucket=BUCKET, Key=manifest["object"], Body=b"short")
    assert s3store.lookup(client, STORE, "ck-1") is None
    client.delete_object(Bucket=BUCKET, Key=manifest["object"])
    assert s3store.lookup(client, STORE, "ck-1") is None
    client.put_object(Bucket=BUCKET, Key="fleet/graphs/ck-2.json", Body=b"{not json")
    assert s3store.lookup(client, STORE, "ck-2") is None


def test_a_packed_archive_that_changed_before_upload_is_not_published(
        client: Any, tmp_path: Path) -> None:
    archive, info = packed(tmp_path)
    archive.write_bytes(b"other bytes")
    with pytest.raises(cc.CompileCacheError, match="sha256"):
        s3store.publish(client, str(archive), info["sha256"], STORE, "ck-1", details={})
    assert objects(client) == []


def test_an_unreachable_store_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cli = s3.make_client(region="us-east-1", endpoint_url="http://127.0.0.1:9", retries=1)
    with pytest.raises(cc.CompileCacheError, match="cannot read s3://") as err:
        s3store.lookup(cli, STORE, "ck-1")
    assert "\n" not in str(err.value)
    with pytest.raises(cc.CompileCacheError, match="not a valid S3 bucket"):
        s3store.lookup(cli, "s3://No_Such/x", "ck-1")


def run(args: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from ansible.module_utils import _internal  # noqa: PLC0415
    monkeypatch.setattr(_internal, "is_controller", False)  # warnings into the result
    return module_runner.run_module(
        "prefixbench_compile_cache",
        {"store": STORE, "region": "us-east-1", "access_key_id": "testing",
         "secret_access_key": "testing", **args}, monkeypatch, capsys, utils=UTILS)


def test_the_module_publishes_and_restores_from_s3_on_the_host(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    archive, info = packed(tmp_path)
    assert run({"state": "lookup", "key": "ck-1"}, monkeypatch, capsys)["manifest"] is None
    out = run({"state": "restore", "key": "ck-1", "path": str(tmp_path / "h" / "inductor")},
              monkeypatch, capsys)
    assert out["missing"] and out["restored"] == 0 and not out["changed"]
    pub = run({"state": "publish", "key": "ck-1", "archive": str(archive),
               "sha256": info["sha256"], "details": {"host": "h1"}}, monkeypatch, capsys)
    assert pub["changed"] and pub["manifest"]["host"] == "h1", pub
    again = run({"state": "publish", "key": "ck-1", "archive": str(archive),
                 "sha256": info["sha256"]}, monkeypatch, capsys)
    assert not again["changed"]
    out = run({"state": "restore", "key": "ck-1", "path": str(tmp_path / "h" / "inductor")},
              monkeypatch, capsys)
    assert out["changed"] and out["restored"] == 2, out
    assert cc.has_marker(str(tmp_path / "h" / "inductor"), "ck-1")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["inductor"]
    # A corrupt archive in the store: one warning, nothing changed, the server compiles.
    manifest = pub["manifest"]
    client.put_object(Bucket=BUCKET, Key=manifest["object"], Body=b"x" * manifest["size"])
    out = run({"state": "restore", "key": "ck-1", "path": str(tmp_path / "g" / "inductor")},
              monkeypatch, capsys)
    assert not out.get("failed") and out["restored"] == 0 and "sha256" in out["corrupt"]
    assert len(out["warnings"]) == 1 and "compiles instead" in json.dumps(out["warnings"][0])
    assert not (tmp_path / "g" / "inductor").exists() or \
        cc.scan(str(tmp_path / "g" / "inductor"))["files"] == 0
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) in ([], ["inductor"])


def test_the_store_setting_says_who_talks_to_it() -> None:
    base = {"model_cache_s3_boto3": "apt", "model_cache_s3_venv": "/opt/s3/venv"}
    local = compile_cache.store_of(base, "/r/.compile-cache", "/usr/bin/python3")
    assert local["store"] == "/r/.compile-cache" and not local["s3"] and local["python"] is None
    remote = compile_cache.store_of({**base, "prefixbench_compile_cache_store": STORE},
                                    "/r/.compile-cache", "/usr/bin/python3")
    assert remote["s3"] and remote["python"] == "/usr/bin/python3"
    venv = compile_cache.store_of({**base, "model_cache_s3_boto3": "venv",
                                   "prefixbench_compile_cache_store": STORE}, "", "/p")
    assert venv["python"] == "/opt/s3/venv/bin/python"
    mine = compile_cache.store_of({**base, "prefixbench_compile_cache_store": STORE,
                                   "prefixbench_compile_cache_s3_python": "/x/python"}, "", "/p")
    assert mine["python"] == "/x/python"


@pytest.mark.parametrize(("store", "error"), [
    ("s3://No_Such/x", "prefixbench_compile_cache_store"),
    ("s3://xn--bad/x", "prefixbench_compile_cache_store: bucket"),
])
def test_a_bad_s3_store_is_refused_before_any_host_changes(store: str, error: str) -> None:
    result = pb_settings.validate({**BASE, "prefixbench_compile_cache_store": store})
    assert any(error in e for e in result.problems), result.problems


def test_s3_store_keys_come_in_pairs() -> None:
    result = pb_settings.validate({**BASE, "prefixbench_compile_cache_store": STORE,
                                   "prefixbench_compile_cache_s3_access_key_id": "AKIA"})
    assert any("go together" in e for e in result.problems), result.problems
    fine = pb_settings.validate({**BASE, "prefixbench_compile_cache_store": STORE})
    assert not [e for e in fine.problems if "compile_cache" in e], fine.problems


def test_a_racing_conditional_write_is_a_lost_race_not_an_error(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3 answers one of two simultaneous If-None-Match writes with 409: that host then
    reports the winner's manifest, as for a 412."""
    from botocore.exceptions import ClientError  # noqa: PLC0415

    first, info1 = packed(tmp_path, "a", b"graph-a")
    second, info2 = packed(tmp_path, "b", b"graph-b")
    s3store.publish(client, str(first), info1["sha256"], STORE, "ck-1", details={"host": "a"})
    real_put, real_lookup = client.put_object, s3store.lookup
    calls: list[int] = []

    def racing_put(**kwargs: Any) -> Any:
        if kwargs.get("IfNoneMatch"):
            raise ClientError({"Error": {"Code": "ConditionalRequestConflict"},
                               "ResponseMetadata": {"HTTPStatusCode": 409}}, "PutObject")
        return real_put(**kwargs)

    def stale_then_real(*args: Any) -> dict[str, Any] | None:
        calls.append(1)
        return None if len(calls) == 1 else real_lookup(*args)

    monkeypatch.setattr(client, "put_object", racing_put)
    monkeypatch.setattr(s3store, "lookup", stale_then_real)
    done, manifest = s3store.publish(client, str(second), info2["sha256"], STORE, "ck-1",
                                     details={"host": "b"})
    assert not done and manifest["host"] == "a"
