"""Compile once per fleet through an S3 store (``prefixbench_compile_cache_store:
s3://...``), on the simulated fleet against the fabric's local S3 (:mod:`s3_fabric`).

The hosts publish and fetch the archives themselves, with boto3 put on them the way the
S3 model source does (``model_cache_s3_boto3: venv``); nothing passes through the
controller. Two hosts take part (``--limit``: the leader and one follower are the whole
protocol; a third would only add a server start to this machine's shared cores), and
their compile caches are emptied first (fresh hosts). Only the cached configuration runs
(``prefixbench_configurations``): the protocol is per key, and the baseline's key (on CPU
the same graphs) would only add two server starts per run; test_benchmark covers both
configurations through the directory store.

Checked, on a tiny workload: per configuration and key, one host compiled and uploaded,
every other host of the key restored from S3 and compiled nothing; the bucket holds one
manifest and one archive per key, nothing lands in the controller's store. Then a rerun
on one host whose cache is emptied again (a fresh instance on the next run): it
compiles nothing and restores from S3. The secret key appears in no output.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from s3_fabric import KEY_ID, SECRET, Fabric, s3_fabric

from prefixbench.config.catalogue import BY_NAME
from prefixbench.servers.server import COMPILE_CACHE_SUBDIRS
from prefixbench_sim.layout import SimHost
from prefixbench_sim.testing import SimFleetHandle
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

__all__ = ["s3_fabric"]  # the fixture, found by pytest in this module

BUCKET = "pbsim-compile"
PREFIX = "fleet/graphs"
RUNS = ("integration-compile-s3-1", "integration-compile-s3-2")
CACHE = f"{BY_NAME['vllm_service_cache_root'].default}/{COMPILE_CACHE_SUBDIRS['cpu']}"
LISTING = """
import json, sys
bucket = sys.argv[1]
if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
    s3.create_bucket(Bucket=bucket)
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
print(json.dumps(sorted(o["Key"] for p in pages for o in p.get("Contents", []))))
"""


def starts(run_dir: Path) -> dict[tuple[str, str], dict]:
    """Every host's compile.json, by (host, configuration)."""
    return {(p.parent.parent.name, p.parent.name): json.loads(p.read_text())
            for p in sorted(run_dir.glob("*/*/compile.json"))}


def test_compile_once_through_an_s3_store(sim_fleet: SimFleetHandle, s3_fabric: Fabric,
                                          repo_root: Path, ansible_env: dict[str, str],
                                          tmp_path: Path) -> None:
    fleet = sim_fleet
    hosts = [fleet.hosts[0], fleet.hosts[-1]]
    results = repo_root / "results"
    for run_id in RUNS:
        subprocess.run(["rm", "-rf", str(results / run_id)], check=True)
    assert json.loads(s3_fabric.python(LISTING, BUCKET)) == []
    controller_store = results / ".compile-cache"
    before = sorted(controller_store.glob("*")) if controller_store.exists() else []
    extra = tmp_path / "compile_s3.json"
    extra.write_text(json.dumps({
        "prefixbench_compile_cache_store": f"s3://{BUCKET}/{PREFIX}",
        "prefixbench_compile_cache_s3_region": "us-east-1",
        "prefixbench_compile_cache_s3_endpoint_url": s3_fabric.endpoint,
        "prefixbench_compile_cache_s3_access_key_id": KEY_ID,
        "prefixbench_compile_cache_s3_secret_access_key": SECRET,
        **s3_fabric.boto3_settings(),
        "prefixbench_workloads": [{
            "name": "tiny_overlap", "prefix_repetition_prefix_len": 1024,
            "prefix_repetition_suffix_len": 64, "prefix_repetition_num_prefixes": 2,
            "prefix_repetition_output_len": 4, "num_prompts": 4, "max_concurrency": 1}],
        "prefixbench_fail_on": ["failed_bench"],
        "prefixbench_configurations": ["cached"],
    }))
    outputs: list[str] = []

    def run(run_id: str, on: list[SimHost]) -> dict[tuple[str, str], dict]:
        proc, _ = playbook(repo_root, ansible_env, "benchmark.yml", "--skip-tags",
                           "provision", "--limit", ",".join(h.name for h in on),
                           "-e", f"@{extra}", "-e",
                           f"prefixbench_run_id={run_id}", timeout=1800)
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
        got = starts(results / run_id)
        assert len(got) == len(on), got
        return got

    # 1. Fresh hosts, empty bucket: one compile and one upload per key.
    for host in hosts:
        fleet.sh(host, f"rm -rf {CACHE}")
    first = run(RUNS[0], hosts)
    keys = {s["key"] for s in first.values()}
    assert None not in keys, first
    for key in keys:
        sharing = [s for s in first.values() if s["key"] == key]
        leaders = [s for s in sharing if s["role"] == "leader"]
        assert len(leaders) == 1 and leaders[0]["published"], sharing
        assert sum(s["compiled"] for s in sharing) <= 1, sharing
        # (hosts go at their own pace: one reaching a key its leader already published
        # restores it; one reaching it before waits for the publish)
        for other in (s for s in sharing if s is not leaders[0]):
            assert other["role"] in ("follower", "restore") and not other["compiled"], other
            assert other["restored_files"] + other["kept_files"] > 0, other
    assert any(s["role"] == "follower" for s in first.values()), first
    assert any(s["compiled"] for s in first.values()), first
    listed = json.loads(s3_fabric.python(LISTING, BUCKET))
    manifests = sorted(k for k in listed if k.endswith(".json"))
    # (each leader's claim went with its publish: nothing else is left in the bucket)
    assert manifests == sorted(f"{PREFIX}/{k}.json" for k in keys), listed
    assert len([k for k in listed if k.endswith(".tar.gz")]) == len(keys), listed
    after = sorted(controller_store.glob("*")) if controller_store.exists() else []
    assert after == before, "archives went through the controller's store"

    # 2. The next run on a fresh host (its cache emptied again, as on a new instance):
    # its start restores from S3 and compiles nothing. (Only that host: the other one's
    # start would keep its own cache, which test_benchmark's rerun already shows.)
    fresh = hosts[0]
    fleet.sh(fresh, f"rm -rf {CACHE}")
    second = run(RUNS[1], [fresh])
    assert not [s for s in second.values() if s["compiled"]], second
    assert all(s["role"] == "restore" for s in second.values()), second
    restored = second[(fresh.name, "cached")]
    assert restored["restored_files"] + restored["kept_files"] > 0, restored
    def healthy_after(run_id: str, host: str, conf: str) -> float:
        path = results / run_id / host / conf / "startup.json"
        return float(json.loads(path.read_text())["elapsed_s"])

    for secret in (SECRET, KEY_ID):
        assert not [out for out in outputs if secret in out], secret
    cold = sorted(round(healthy_after(RUNS[0], h, c)) for (h, c), s in first.items()
                  if s["compiled"])
    fetched = [round(healthy_after(RUNS[1], fresh.name, "cached"))]
    print(f"\ncompile store in S3, {len(hosts)} hosts: {len(keys)} keys, "
          f"{sum(s['compiled'] for s in first.values())} compiles in the first run, 0 in "
          f"the second; time to healthy compiling {cold} s, restored from S3 on the "
          f"fresh host {fetched} s")
