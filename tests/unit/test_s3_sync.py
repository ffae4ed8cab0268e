"""The S3 model sync (module_utils/prefixbench_s3.py, prefixbench_s3_transfer.py)
against a real local S3 server.

A moto server is started on 127.0.0.1 at a free port for the module's tests and stopped
by its PID; every call is a real boto3 request over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_s3 as s3  # noqa: E402
import prefixbench_s3_transfer as transfer  # noqa: E402

from prefixbench_sim.testing import stop_process  # noqa: E402

BUCKET = "models-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto server of this module's own."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto server did not start, see {log.name}")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture
def client(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A client with explicit test keys, nothing read from this machine's AWS config."""
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cli = s3.make_client(region="us-east-1", endpoint_url=endpoint,
                         access_key_id="testing", secret_access_key="testing",  # noqa: S106 - moto's
                         retries=1)
    existing = {b["Name"] for b in cli.list_buckets().get("Buckets", [])}
    if BUCKET in existing:
        for page in cli.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for obj in page.get("Contents", []):
                cli.delete_object(Bucket=BUCKET, Key=obj["Key"])
    else:
        cli.create_bucket(Bucket=BUCKET)
    return cli


MODEL = {
    "config.json": b'{"model_type": "llama"}\n',
    "tokenizer.json": b'{"version": "1.0"}\n' * 50,
    "model-00001-of-00002.safetensors": os.urandom(300_000),
    "model-00002-of-00002.safetensors": os.urandom(200_000),
    "sub/dir/generation_config.json": b"{}\n",
}


def upload(client: Any, files: dict[str, bytes], prefix: str = "tiny") -> None:
    for rel, data in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}" if prefix else rel, Body=data)


def tree(dest: Path) -> dict[str, bytes]:
    return {p.relative_to(dest).as_posix(): p.read_bytes()
            for p in dest.rglob("*") if p.is_file()}


def run(client: Any, dest: Path, **options: Any) -> transfer.SyncResult:
    options.setdefault("sleep", lambda _s: None)
    return transfer.sync(client, BUCKET, "tiny", dest, **options)


def test_first_sync_downloads_all_second_nothing(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    upload(client, {"other.bin": b"not ours"}, prefix="tiny-other")
    dest = tmp_path / "model"
    first = run(client, dest)
    assert first.changed and sorted(first.downloaded) == sorted(MODEL)
    assert first.bytes_downloaded == sum(map(len, MODEL.values())) == first.bytes_total
    assert {k: v for k, v in tree(dest).items() if k != s3.MANIFEST_NAME} == MODEL
    manifest = json.loads((dest / s3.MANIFEST_NAME).read_text())
    entry = manifest["files"]["config.json"]
    assert entry == {"etag": hashlib.md5(MODEL["config.json"]).hexdigest(),  # noqa: S324
                     "size": len(MODEL["config.json"]),
                     "sha256": hashlib.sha256(MODEL["config.json"]).hexdigest()}
    assert first.revision == s3.revision_of(manifest["files"])

    mtimes = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    second = run(client, dest)
    assert not second.changed, second.as_dict()
    assert second.downloaded == [] and second.bytes_downloaded == 0
    assert second.revision == first.revision
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == mtimes


def test_revision_names_the_bytes_not_the_bucket(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    upload(client, MODEL, prefix="mirror-b/tiny")
    a = transfer.sync(client, BUCKET, "tiny", tmp_path / "a", sleep=lambda _s: None)
    b = transfer.sync(client, BUCKET, "mirror-b/tiny/", tmp_path / "b", sleep=lambda _s: None)
    assert a.revision == b.revision and a.revision is not None
    assert a.revision.startswith("sha256:")


def test_changed_object_is_downloaded_again_alone(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    first = run(client, dest)
    upload(client, {"config.json": b'{"model_type": "llama", "rev": 2}\n'})
    check = run(client, dest, check_mode=True)
    assert check.changed and check.downloaded == ["config.json"] and check.revision is None
    assert (dest / "config.json").read_bytes() == MODEL["config.json"]
    again = run(client, dest)
    assert again.downloaded == ["config.json"]
    assert (dest / "config.json").read_bytes().endswith(b'"rev": 2}\n')
    assert again.revision != first.revision


def test_check_mode_changes_nothing(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    fresh = run(client, dest, check_mode=True)
    assert fresh.changed and sorted(fresh.downloaded) == sorted(MODEL)
    assert fresh.bytes_downloaded == fresh.bytes_total
    assert not dest.exists()

    run(client, dest)
    (dest / "stale.txt").write_text("left by hand\n")
    part = dest / f".config.json{s3.PART_MARK}dead"
    part.write_bytes(b"half")
    before = tree(dest)
    check = run(client, dest, check_mode=True, delete_extra=True)
    assert check.changed and check.downloaded == []
    assert check.deleted == ["stale.txt"] and check.removed_parts == [part.name]
    assert tree(dest) == before


def test_interrupted_download_leaves_no_partial_file(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    big = "model-00001-of-00002.safetensors"

    def cut(rel: str, _n: int) -> None:
        if rel == big:
            raise KeyboardInterrupt("power cut")

    with pytest.raises(KeyboardInterrupt):
        run(client, dest, concurrency=1, progress=cut)
    assert not (dest / big).exists()
    assert not [p for p in dest.rglob("*") if s3.PART_MARK in p.name]
    # What was finished before the cut is in the manifest and is not fetched again.
    done = set(json.loads((dest / s3.MANIFEST_NAME).read_text())["files"])
    assert big not in done
    resumed = run(client, dest)
    assert set(resumed.downloaded) == set(MODEL) - done
    assert (dest / big).read_bytes() == MODEL[big]


def test_part_files_of_a_killed_run_are_removed(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    run(client, dest)
    part = dest / "sub" / f".x{s3.PART_MARK}0bad"
    part.write_bytes(b"partial")
    result = run(client, dest)
    assert result.removed_parts == [f"sub/{part.name}"] and result.downloaded == []
    assert not part.exists()


class _Flaky:
    """A client whose first ``failures`` bodies break mid-stream."""

    def __init__(self, client: Any, failures: int, error: type[Exception]) -> None:
        self._client = client
        self.failures = failures
        self.error = error
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = self._client.get_object(**kwargs)
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            body, error = answer["Body"], self.error

            class Broken:
                def read(self, n: int = -1) -> bytes:
                    raise error("connection reset by peer")

                def close(self) -> None:
                    body.close()

            answer["Body"] = Broken()
        return answer


def test_transient_errors_are_retried(client: Any, tmp_path: Path) -> None:
    upload(client, {"config.json": MODEL["config.json"]})
    flaky = _Flaky(client, failures=2, error=ConnectionResetError)
    sleeps: list[float] = []
    result = transfer.sync(flaky, BUCKET, "tiny", tmp_path / "m", retries=3, sleep=sleeps.append)
    assert result.downloaded == ["config.json"] and flaky.calls == 3
    assert sleeps == [0.5, 1.0]


def test_failure_after_retries_names_the_file(client: Any, tmp_path: Path) -> None:
    upload(client, {"config.json": MODEL["config.json"]})
    flaky = _Flaky(client, failures=9, error=ConnectionResetError)
    dest = tmp_path / "m"
    with pytest.raises(s3.SyncError, match=r"1 of 1 file\(s\) failed: tiny/config.json"):
        transfer.sync(flaky, BUCKET, "tiny", dest, retries=2, sleep=lambda _s: None)
    assert flaky.calls == 3
    assert not (dest / "config.json").exists()
    assert not [p for p in dest.rglob("*") if s3.PART_MARK in p.name]


def test_object_replaced_during_the_sync_fails_that_file(client: Any, tmp_path: Path) -> None:
    upload(client, {"config.json": MODEL["config.json"]})
    objects = s3.list_objects(client, BUCKET, "tiny")
    upload(client, {"config.json": b"replaced\n"})
    job = transfer.Sync(client=client, bucket=BUCKET, prefix="tiny", dest=tmp_path / "m")
    (tmp_path / "m").mkdir()
    with pytest.raises(s3.SyncError, match="changed in the bucket during the sync"):
        job._fetch_with_retries(objects[0])
    assert list((tmp_path / "m").iterdir()) == []


def test_extra_files_are_kept_unless_asked(client: Any, tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    (dest / "mine" / "deep").mkdir(parents=True)
    (dest / "mine" / "deep" / "notes.txt").write_text("keep me\n")
    kept = run(client, dest)
    assert kept.extra == ["mine/deep/notes.txt"] and kept.deleted == []
    assert (dest / "mine/deep/notes.txt").exists()
    gone = run(client, dest, delete_extra=True)
    assert gone.deleted == ["mine/deep/notes.txt"] and gone.changed
    assert not (dest / "mine").exists()
    assert (dest / s3.MANIFEST_NAME).exists()


def test_files_already_there_are_adopted_without_download(client: Any,
                                                          tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    for rel, data in MODEL.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    (dest / "config.json").write_bytes(b"something else, same size?")
    result = run(client, dest)
    assert result.downloaded == ["config.json"]
    assert sorted(result.adopted) == sorted(set(MODEL) - {"config.json"})
    assert run(client, dest).changed is False


def test_a_local_edit_of_the_same_size_is_found_with_verify(client: Any,
                                                            tmp_path: Path) -> None:
    upload(client, MODEL)
    dest = tmp_path / "model"
    run(client, dest)
    data = bytearray(MODEL["config.json"])
    data[0] ^= 1
    (dest / "config.json").write_bytes(bytes(data))
    assert run(client, dest).downloaded == []
    assert run(client, dest, verify=True).downloaded == ["config.json"]
    assert (dest / "config.json").read_bytes() == MODEL["config.json"]


def test_pagination_lists_every_object(client: Any, tmp_path: Path) -> None:
    many = {f"shard-{i:04d}.bin": f"{i}\n".encode() for i in range(23)}
    upload(client, many)
    pages: list[int] = []
    real = client.get_paginator

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def get_paginator(self, name: str) -> Any:
            paginator = real(name)
            original = paginator.paginate

            def paginate(**kwargs: Any) -> Iterator[dict[str, Any]]:
                for page in original(**kwargs):
                    pages.append(len(page.get("Contents", [])))
                    yield page

            paginator.paginate = paginate
            return paginator

    objects = s3.list_objects(Counting(), BUCKET, "tiny", page_size=5)
    assert len(objects) == 23 and pages == [5, 5, 5, 5, 3]
    result = transfer.sync(client, BUCKET, "tiny", tmp_path / "m", concurrency=4, page_size=5)
    assert result.files == 23 and len(result.downloaded) == 23


def test_an_empty_or_missing_mirror_is_an_error(client: Any, tmp_path: Path) -> None:
    with pytest.raises(s3.SyncError, match="holds no objects"):
        run(client, tmp_path / "m")
    with pytest.raises(s3.SyncError, match="cannot list s3://no-such-bucket/tiny/"):
        transfer.sync(client, "no-such-bucket", "tiny", tmp_path / "m")


@pytest.mark.parametrize("key", ["tiny/../etc/passwd", "tiny/a//b", "tiny/./x",
                                 f"tiny/{s3.RECORD_NAME}"])
def test_keys_that_do_not_map_to_a_safe_path_are_refused(client: Any, tmp_path: Path,
                                                         key: str) -> None:
    client.put_object(Bucket=BUCKET, Key=key, Body=b"x")
    with pytest.raises(s3.SyncError, match=r"safe local path|the bundle's own"):
        run(client, tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_names() -> None:
    assert s3.parse_s3_uri("s3://models-us/gpt-oss-120b/") == ("models-us", "gpt-oss-120b")
    assert s3.parse_s3_uri("s3://models-us") == ("models-us", "")
    for bad in ("https://b/x", "s3://Bad_Bucket/x", "s3://a..b/x"):
        with pytest.raises(s3.SyncError):
            s3.parse_s3_uri(bad)
    assert s3.relative_path("p/q/", "p") is None
    assert s3.relative_path("p/a/b.json", "p") == "a/b.json"
    assert s3.relative_path("a.json", "") == "a.json"
    assert s3.is_plain_md5("0" * 32) and not s3.is_plain_md5("0" * 32 + "-3")
    assert s3.is_transient(ConnectionResetError()) and not s3.is_transient(ValueError())


def test_keys_must_come_in_pairs() -> None:
    with pytest.raises(s3.SyncError, match="both access_key_id and secret_access_key"):
        s3.make_client(access_key_id="AKIA", secret_access_key="")


def test_the_ansible_module_end_to_end(client: Any, endpoint: str, tmp_path: Path,
                                       ansible_env: dict[str, str]) -> None:
    """The module through Ansible (module_utils wiring, check mode, no_log of the keys)."""
    upload(client, MODEL)
    dest = tmp_path / "model"
    secret = "s3cr3t-never-printed"  # noqa: S105 - a test key; moto accepts any
    args = json.dumps({"uri": f"s3://{BUCKET}/tiny", "dest": str(dest),
                       "endpoint_url": endpoint, "region": "us-east-1",
                       "access_key_id": "AKIATESTING", "secret_access_key": secret})

    def ansible(*extra: str) -> dict[str, Any]:
        proc = subprocess.run(
            ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-vvv", "-o",
             "-e", f"ansible_python_interpreter={sys.executable}",
             "-m", "prefixbench_s3_sync", "-a", args, *extra],
            cwd=ROOT, env={**ansible_env, "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
            capture_output=True, text=True, timeout=120, check=False)
        assert secret not in proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("localhost | "))
        result: dict[str, Any] = json.loads(line.split(" => ", 1)[1])
        return result

    check = ansible("--check")
    assert check["changed"] and sorted(check["downloaded"]) == sorted(MODEL)
    assert not dest.exists()
    first = ansible()
    assert first["changed"] and first["revision"].startswith("sha256:")
    assert first["bytes_downloaded"] == sum(map(len, MODEL.values()))
    second = ansible()
    assert not second["changed"] and second["revision"] == first["revision"]


def test_ansible_doc_reads_the_modules(ansible_env: dict[str, str]) -> None:
    names = ["prefixbench_s3_sync", "prefixbench_hf_revision"]
    proc = subprocess.run(["ansible-doc", "-j", *names], cwd=ROOT, env=ansible_env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    for name in names:
        assert docs[name]["doc"]["module"] == name
        assert docs[name]["return"] and docs[name]["examples"]
    options = docs["prefixbench_s3_sync"]["doc"]["options"]
    assert {"bucket", "prefix", "uri", "dest", "region", "endpoint_url", "access_key_id",
            "secret_access_key", "delete_extra"} <= set(options)
