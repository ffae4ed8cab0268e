"""Who compiles a key the store lacks (module_utils/prefixbench_compile_claim.py and the
module's claim, release and wait): one claim per key and scope, in a directory store on
the controller and in S3 (moto's in-process S3, every call a real boto3 request)."""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import module_runner
import pytest
from moto_s3 import moto_bucket

sys.path.insert(0, str(module_runner.ROOT / "module_utils"))
import prefixbench_compile_cache as cc
import prefixbench_compile_claim as claims

BUCKET = "pbtest-claims"
STORE = f"s3://{BUCKET}/fleet/graphs"
UTILS = ("prefixbench_s3", "prefixbench_compile_cache", "prefixbench_compile_claim",
         "prefixbench_compile_store_s3")


def _race(store: str, host: str) -> bool:
    return claims.DirClaims(store, "run-a").claim("ck-1", host)[0]


def test_of_hosts_claiming_one_key_at_once_exactly_one_wins(tmp_path: Path) -> None:
    hosts = [f"h{i}" for i in range(8)]
    with multiprocessing.get_context("fork").Pool(8) as pool:
        won = pool.starmap(_race, [(str(tmp_path), h) for h in hosts])
    assert won.count(True) == 1
    winner = hosts[won.index(True)]
    book = claims.DirClaims(str(tmp_path), "run-a")
    assert (book.holder("ck-1") or {})["host"] == winner
    # Asking again gives the same answer: the holder is still the holder.
    assert book.claim("ck-1", winner)[0] is True
    assert book.claim("ck-1", "late")[0] is False


def test_claims_are_per_key_and_per_scope(tmp_path: Path) -> None:
    run_a = claims.DirClaims(str(tmp_path), "run-a")
    assert run_a.claim("ck-1", "h1")[0] and run_a.claim("ck-2", "h2")[0]
    # A claim a dead controller left in another invocation holds nobody up.
    assert claims.DirClaims(str(tmp_path), "run-b").claim("ck-1", "h2")[0]
    assert claims.DirClaims(str(tmp_path), "run-c").holder("ck-1") is None


def test_only_the_holder_releases_and_the_outcome_is_kept(tmp_path: Path) -> None:
    book = claims.DirClaims(str(tmp_path), "run-a")
    book.claim("ck-1", "h1")
    assert (book.release("ck-1", "h2", "failed") or {})["outcome"] is None
    done = book.release("ck-1", "h1", "failed", "the server did not become healthy")
    assert done is not None and done["outcome"] == "failed"
    assert (book.holder("ck-1") or {})["why"] == "the server did not become healthy"
    with pytest.raises(ValueError, match="outcome"):
        book.release("ck-1", "h1", "maybe")


class FakeClock:
    """A test double for time: sleeping moves it on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1

    def clock(self) -> float:
        return self.now


def test_waiting_ends_at_the_publish_at_the_holders_failure_or_after_a_slice() -> None:
    clock = FakeClock()
    holder: dict[str, Any] = {"host": "h1", "outcome": None}
    manifest: list[dict[str, Any]] = []

    def look() -> dict[str, Any] | None:
        if clock.now >= 6:
            manifest.append({"sha256": "ab"})
        return manifest[0] if manifest else None

    out = claims.wait(look, lambda: holder, slice_s=4, poll_s=2, sleep=clock.sleep,
                      clock=clock.clock)
    assert out["state"] == "waiting" and clock.now == 4
    out = claims.wait(look, lambda: holder, slice_s=4, poll_s=2, sleep=clock.sleep,
                      clock=clock.clock)
    assert out["state"] == "published" and out["manifest"] == {"sha256": "ab"}
    assert clock.now == 6

    failed = {"host": "h1", "outcome": "failed", "why": "no start"}
    out = claims.wait(lambda: None, lambda: failed, slice_s=60, poll_s=2,
                      sleep=clock.sleep, clock=clock.clock)
    assert out["state"] == "failed" and out["holder"]["why"] == "no start"
    # Nobody holds the claim (the store lost it): nothing to wait for either.
    assert claims.wait(lambda: None, lambda: None, slice_s=60, poll_s=2,
                       sleep=clock.sleep, clock=clock.clock)["state"] == "failed"


def run(args: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return module_runner.run_module("prefixbench_compile_cache", args, monkeypatch, capsys,
                                    utils=UTILS)


def test_the_module_claims_waits_and_releases_in_a_directory_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = {"store": str(tmp_path), "key": "ck-1", "scope": "run-a"}
    first = run({**base, "state": "claim", "host": "h1"}, monkeypatch, capsys)
    second = run({**base, "state": "claim", "host": "h2"}, monkeypatch, capsys)
    assert first["won"] is True and second["won"] is False
    assert second["holder"]["host"] == "h1"
    waited = run({**base, "state": "wait", "slice": 0}, monkeypatch, capsys)
    assert waited["waited"] == "waiting" and waited["manifest"] is None
    late = run({**base, "state": "wait", "slice": 60, "deadline": 1.0}, monkeypatch, capsys)
    assert late["waited"] == "timeout"
    archive = tmp_path / "in.tar.gz"
    cache = tmp_path / "cache"
    (cache / "g").mkdir(parents=True)
    (cache / "g" / "graph").write_bytes(b"graph")
    packed = cc.pack(str(cache), str(archive))
    cc.publish(str(archive), packed["sha256"], str(tmp_path), "ck-1", {"host": "h1"})
    run({**base, "state": "release", "host": "h1", "outcome": "published"}, monkeypatch,
        capsys)
    done = run({**base, "state": "wait", "slice": 60}, monkeypatch, capsys)
    assert done["waited"] == "published" and done["manifest"]["sha256"] == packed["sha256"]
    # A published key's claim is gone: the store holds the manifest and nothing else.
    assert not list((tmp_path / ".claims").rglob("*.json"))


moto = pytest.importorskip("moto")


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with moto_bucket(monkeypatch, BUCKET) as cli:
        yield cli


def test_in_s3_the_second_claim_is_told_who_holds_it(
        client: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    base = {"store": STORE, "key": "ck-1", "scope": "run-a", "region": "us-east-1",
            "access_key_id": "testing", "secret_access_key": "testing"}
    first = run({**base, "state": "claim", "host": "h1"}, monkeypatch, capsys)
    second = run({**base, "state": "claim", "host": "h2"}, monkeypatch, capsys)
    assert (first["won"], second["won"]) == (True, False)
    assert second["holder"]["host"] == "h1"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["fleet/graphs/.claims/run-a/ck-1.json"]
    run({**base, "state": "release", "host": "h2", "outcome": "failed"}, monkeypatch, capsys)
    assert run({**base, "state": "wait", "slice": 0}, monkeypatch, capsys)["waited"] == \
        "waiting"
    run({**base, "state": "release", "host": "h1", "outcome": "failed", "why": "no start"},
        monkeypatch, capsys)
    out = run({**base, "state": "wait", "slice": 60}, monkeypatch, capsys)
    assert out["waited"] == "failed" and out["holder"]["why"] == "no start"
    # A later run's leader publishes: its claim leaves nothing behind in the bucket.
    later = {**base, "scope": "run-b"}
    assert run({**later, "state": "claim", "host": "h2"}, monkeypatch, capsys)["won"]
    run({**later, "state": "release", "host": "h2", "outcome": "published"}, monkeypatch,
        capsys)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["fleet/graphs/.claims/run-a/ck-1.json"]
