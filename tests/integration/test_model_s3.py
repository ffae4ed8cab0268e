"""The model_cache role with source s3, on the simulated fleet, against a local S3.

The local S3 is the fabric's moto server (:mod:`s3_fabric`), where the tiny model is
uploaded; boto3 reaches the hosts through the role's ``venv`` way. The role runs through
a two-play playbook (preflight, then model_cache) into its own directory, so the
URL-sourced model the other tests use is untouched. One host (``--limit``): the role's
work is per host.

Checked: check mode on a fresh host changes nothing; the first run puts the exact bytes on
the host and records the revision computed here from the files; a second run and check
mode change nothing; a changed and an added object are the only files replaced (inode
numbers) and check mode reports them without touching the host; the secret key appears
nowhere (output at -vv, the host's files, its journal).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from s3_fabric import KEY_ID, SECRET, VENV, Fabric, s3_fabric

from prefixbench_sim.testing import SimFleetHandle, recap
from prefixbench_sim.testing import run_playbook as playbook
from prefixbench_sim.tinymodel import MODEL_NAME

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_s3  # noqa: E402

__all__ = ["s3_fabric"]  # the fixture, found by pytest in this module

BUCKET = "pbsim-models"
PREFIX = "mirror/tiny-llama"
DEST = "/opt/models/tiny-llama-s3"

UPLOAD = """
import sys
from pathlib import Path
bucket, prefix = sys.argv[1:3]
if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
    s3.create_bucket(Bucket=bucket)
for arg in sys.argv[3:]:
    rel, _, path = arg.partition("=")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=Path(path).read_bytes())
"""


def upload(fabric: Fabric, files: dict[str, Path]) -> None:
    """Put ``{relative path: local file}`` under the mirror's prefix."""
    fabric.python(UPLOAD, BUCKET, PREFIX, *(f"{rel}={path}" for rel, path in files.items()))


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


def test_model_from_s3(sim_fleet: SimFleetHandle, s3_fabric: Fabric, repo_root: Path,
                       ansible_env: dict[str, str], tmp_path: Path) -> None:
    fleet = sim_fleet
    # One host (--limit): the role's work is per host, and a second or third host would
    # add only forks of the same tasks to every one of the six runs.
    hosts = [fleet.hosts[1]]
    source = s3_fabric.www / "models" / MODEL_NAME
    model = {p.name: p for p in sorted(source.iterdir()) if p.is_file()}
    upload(s3_fabric, model)

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
        "model_cache_s3_endpoint_url": s3_fabric.endpoint,
        **s3_fabric.boto3_settings(),
        "model_cache_s3_access_key_id": KEY_ID,
        "model_cache_s3_secret_access_key": SECRET,
    }))
    outputs: list[str] = []

    def run(*args: str) -> tuple[dict[str, dict[str, int]], float]:
        proc, seconds = playbook(repo_root, ansible_env, str(play), "-vvv", "--limit",
                                 ",".join(h.name for h in hosts), "-e", f"@{extra}", *args)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
        # The preflight play also runs on the controller (localhost).
        rec = {h: r for h, r in recap(proc.stdout).items() if h != "localhost"}
        assert set(rec) == {h.name for h in hosts}, proc.stdout[-3000:]
        return rec, seconds

    def cleanup() -> None:
        for host in hosts:
            fleet.sh(host, f"rm -rf {DEST} {Path(VENV).parent}")

    cleanup()
    try:
        # 1. Check mode on fresh hosts reports the work and does none of it.
        rec, _ = run("--check")
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in hosts:
            assert fleet.sh(host, f"test -e {DEST} || test -e {VENV} || echo absent"
                            ).strip() == "absent"

        # 2. The first run puts the exact bytes on every host and records their revision.
        rec, first = run()
        assert all(r["changed"] > 0 and r["failed"] == 0 for r in rec.values()), rec
        entries = {rel: {"size": p.stat().st_size, "sha256": sha256(p)}
                   for rel, p in model.items()}
        revision = prefixbench_s3.revision_of(entries)
        before = {}
        for host in hosts:
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
        upload(s3_fabric, {"config.json": changed, "NOTICE.txt": added})
        rec, _ = run("--check")
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in hosts:
            assert host_files(fleet, host) == before[host.name]
        rec, third = run()
        assert all(r["changed"] > 0 for r in rec.values()), rec
        for host in hosts:
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
            for host in hosts:
                found = fleet.sh(host, f"grep -rlF {secret} {DEST} /etc /var/log /root "
                                       "/tmp /var/tmp 2>/dev/null || true; journalctl "
                                       f"--no-pager -o cat | grep -cF {secret} || true")
                assert found.strip() == "0", (secret, found)
        print(f"\nmodel from S3 on {len(hosts)} simulated hosts "
              f"({sum(e['size'] for e in entries.values())} bytes each): first run "
              f"{first:.0f} s (boto3 install + sync), second {second:.0f} s, check mode "
              f"{check:.0f} s, one changed + one new object {third:.0f} s")
    finally:
        cleanup()
