"""The model_cache role with source s3, on the simulated fleet, against a local S3.

A moto server runs inside the fabric network namespace (``pbsim-fabric``) on
10.213.0.1:8093, where every simulated host reaches it, like a regional mirror; the tiny
model is uploaded to it. The hosts have no PyPI and no Debian mirror, so boto3 comes
through the role's ``venv`` way: its wheels (downloaded here once from PyPI) are served
by the fabric web server from ``<www>/test-s3-wheels/`` and installed with
``--no-index --find-links``. The role runs through a two-play playbook (preflight, then
model_cache) into its own directory, so the URL-sourced model the other tests use is
untouched.

Checked: check mode on fresh hosts changes nothing; the first run puts the exact bytes on
every host and records the revision computed here from the files; a second run and check
mode change nothing; a changed and an added object are the only files replaced (inode
numbers) and check mode reports them without touching the host; the secret key appears
nowhere (output at -vv, the host's files, its journal).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from prefixbench.sim.layout import FABRIC_ADDRESS, FABRIC_NETNS
from prefixbench.sim.testing import SimFleetHandle, recap, stop_process
from prefixbench.sim.testing import run_playbook as playbook
from prefixbench.sim.tinymodel import MODEL_NAME

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_s3  # noqa: E402

MOTO_PORT = 8093
ENDPOINT = f"http://{FABRIC_ADDRESS}:{MOTO_PORT}"
BUCKET = "pbsim-models"
PREFIX = "mirror/tiny-llama"
DEST = "/opt/models/tiny-llama-s3"
VENV = "/opt/prefixbench-s3/venv"
WHEELS = "test-s3-wheels"
KEY_ID = "PBSIMTESTKEYID7F3A9C"
SECRET = "pbsim-secret-7f3a9c-never-printed"  # noqa: S105 - a test key; moto accepts any

UPLOAD = """
import sys
from pathlib import Path
import boto3
endpoint, bucket, prefix, key_id, secret = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key_id, aws_secret_access_key=secret)
if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
    s3.create_bucket(Bucket=bucket)
for arg in sys.argv[6:]:
    rel, _, path = arg.partition("=")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=Path(path).read_bytes())
"""


def _in_fabric(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", FABRIC_NETNS, *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


def upload(files: dict[str, Path]) -> None:
    """Put ``{relative path: local file}`` under the mirror's prefix."""
    proc = _in_fabric(sys.executable, "-c", UPLOAD, ENDPOINT, BUCKET, PREFIX, KEY_ID, SECRET,
                      *(f"{rel}={path}" for rel, path in files.items()))
    assert proc.returncode == 0, proc.stderr[-3000:]


@dataclass(frozen=True)
class Mirror:
    """The local S3 the hosts reach, and what the fabric web server serves."""

    endpoint: str
    wheels_url: str
    www: Path


def _boto3_wheels(www: Path) -> str:
    """boto3 and its dependencies for the hosts' Python 3.11, served by the fabric."""
    import boto3  # noqa: PLC0415

    wheels = www / WHEELS
    wheels.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
         "--python-version", "3.11", "--implementation", "cp",
         "--platform", "manylinux2014_x86_64", "--dest", str(wheels),
         f"boto3=={boto3.__version__}"],
        capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        shutil.rmtree(wheels, ignore_errors=True)
        pytest.skip(f"cannot download the boto3 wheels from PyPI: {proc.stderr[-500:]}")
    return f"http://{FABRIC_ADDRESS}:8080/{WHEELS}/"


@pytest.fixture
def s3_mirror(sim_fleet: SimFleetHandle, sim_artifacts: Path, tmp_path: Path
              ) -> Iterator[Mirror]:
    """A moto S3 server on the fabric address (stopped by its PID) and boto3's wheels."""
    wheels_url = _boto3_wheels(sim_artifacts)
    log = (tmp_path / "moto.log").open("w")
    # `ip netns exec` execs the command: the PID is moto's own.
    proc = subprocess.Popen(["ip", "netns", "exec", FABRIC_NETNS, sys.executable, "-m",
                             "moto.server", "-H", FABRIC_ADDRESS, "-p", str(MOTO_PORT)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while _in_fabric("nc", "-z", "-w", "1", FABRIC_ADDRESS, str(MOTO_PORT)).returncode:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto did not start in {FABRIC_NETNS}: "
                            f"{(tmp_path / 'moto.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield Mirror(ENDPOINT, wheels_url, sim_artifacts)
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(sim_artifacts / WHEELS, ignore_errors=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def host_files(fleet: SimFleetHandle, host: Any) -> dict[str, tuple[str, str]]:
    """``{relative path: (sha256, inode)}`` of the model files on ``host``."""
    out = fleet.sh(host, f"cd {DEST} && find . -type f ! -name '.prefixbench-*' "
                         "-printf '%P %i\\n' | sort")
    inodes = dict(line.split() for line in out.splitlines())
    sums = fleet.sh(host, f"cd {DEST} && sha256sum -- {' '.join(sorted(inodes))}")
    digests = {line.split()[1]: line.split()[0] for line in sums.splitlines()}
    return {rel: (digests[rel], inodes[rel]) for rel in inodes}


def test_model_from_s3(sim_fleet: SimFleetHandle, s3_mirror: Mirror, repo_root: Path,
                       ansible_env: dict[str, str], tmp_path: Path) -> None:
    fleet = sim_fleet
    source = s3_mirror.www / "models" / MODEL_NAME
    model = {p.name: p for p in sorted(source.iterdir()) if p.is_file()}
    upload(model)

    play = tmp_path / "model_s3.yml"
    play.write_text(
        "---\n"
        f"- name: Run the preflight checks\n"
        f"  ansible.builtin.import_playbook: {repo_root}/playbooks/preflight.yml\n"
        "- name: Put the model on local disk from the S3 mirror\n"
        "  hosts: neuron_fleet\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Run the model_cache role\n"
        "      ansible.builtin.include_role:\n"
        "        name: model_cache\n")
    extra = tmp_path / "s3.json"
    extra.write_text(json.dumps({
        "model_cache_source": "s3",
        "model_cache_dir": DEST,
        "model_cache_s3_bucket": BUCKET,
        "model_cache_s3_prefix": PREFIX,
        "model_cache_s3_region": "us-east-1",
        "model_cache_s3_endpoint_url": s3_mirror.endpoint,
        "model_cache_s3_boto3": "venv",
        "model_cache_s3_venv": VENV,
        # pip ignores plain-HTTP links of hosts it is not told to trust.
        "model_cache_s3_pip_args": ["--no-index", "--find-links", s3_mirror.wheels_url,
                                    "--trusted-host", FABRIC_ADDRESS],
        "model_cache_s3_access_key_id": KEY_ID,
        "model_cache_s3_secret_access_key": SECRET,
    }))
    outputs: list[str] = []

    def run(*args: str) -> tuple[dict[str, dict[str, int]], float]:
        proc, seconds = playbook(repo_root, ansible_env, str(play), "-vvv",
                                 "-e", f"@{extra}", *args)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        # The preflight play also runs on the controller (localhost).
        rec = {h: r for h, r in recap(proc.stdout).items() if h != "localhost"}
        assert set(rec) == {h.name for h in fleet.hosts}, proc.stdout[-3000:]
        return rec, seconds

    def cleanup() -> None:
        for host in fleet.hosts:
            fleet.sh(host, f"rm -rf {DEST} {Path(VENV).parent}")

    cleanup()
    try:
        # 1. Check mode on fresh hosts reports the work and does none of it.
        rec, _ = run("--check")
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in fleet.hosts:
            assert fleet.sh(host, f"test -e {DEST} || test -e {VENV} || echo absent"
                            ).strip() == "absent"

        # 2. The first run puts the exact bytes on every host and records their revision.
        rec, first = run()
        assert all(r["changed"] > 0 and r["failed"] == 0 for r in rec.values()), rec
        entries = {rel: {"size": p.stat().st_size, "sha256": sha256(p)}
                   for rel, p in model.items()}
        revision = prefixbench_s3.revision_of(entries)
        before = {}
        for host in fleet.hosts:
            files = host_files(fleet, host)
            assert {rel: d for rel, (d, _) in files.items()} == \
                {rel: e["sha256"] for rel, e in entries.items()}
            before[host.name] = files
            record = json.loads(fleet.sh(host, f"cat {DEST}/.prefixbench-model.json"))
            assert record == {"source": "s3", "uri": f"s3://{BUCKET}/{PREFIX}",
                              "revision": revision, "files": len(model),
                              "bytes": sum(e["size"] for e in entries.values())}

        # 3. A second run and check mode change nothing.
        rec, second = run()
        assert all(r["changed"] == 0 for r in rec.values()), rec
        rec, check = run("--check")
        assert all(r["changed"] == 0 for r in rec.values()), rec

        # 4. A changed object and a new one: check mode reports them and touches nothing;
        #    the run replaces exactly those two files.
        changed = tmp_path / "config.json"
        changed.write_bytes(model["config.json"].read_bytes() + b"\n")
        added = tmp_path / "NOTICE.txt"
        added.write_text("mirrored for the simulated fleet\n")
        upload({"config.json": changed, "NOTICE.txt": added})
        rec, _ = run("--check")
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in fleet.hosts:
            assert host_files(fleet, host) == before[host.name]
        rec, third = run()
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in fleet.hosts:
            after = host_files(fleet, host)
            assert after["config.json"][0] == sha256(changed)
            assert after["NOTICE.txt"][0] == sha256(added)
            replaced = {rel for rel, (_, inode) in after.items()
                        if before[host.name].get(rel, ("", ""))[1] != inode}
            assert replaced == {"config.json", "NOTICE.txt"}
            record = json.loads(fleet.sh(host, f"cat {DEST}/.prefixbench-model.json"))
            assert record["revision"] != revision and record["files"] == len(model) + 1

        # 5. Neither key is anywhere, at -vvv: output, the host's files, its journal.
        for secret in (SECRET, KEY_ID):
            assert not [i for i, out in enumerate(outputs) if secret in out], secret
            for host in fleet.hosts:
                found = fleet.sh(host, f"grep -rlF {secret} {DEST} /etc /var/log /root "
                                       "/tmp /var/tmp 2>/dev/null || true; journalctl "
                                       f"--no-pager -o cat | grep -cF {secret} || true")
                assert found.strip() == "0", (secret, found)
        print(f"\nmodel from S3 on {len(fleet.hosts)} simulated hosts "
              f"({sum(e['size'] for e in entries.values())} bytes each): first run "
              f"{first:.0f} s (boto3 install + sync), second {second:.0f} s, check mode "
              f"{check:.0f} s, one changed + one new object {third:.0f} s")
    finally:
        cleanup()
