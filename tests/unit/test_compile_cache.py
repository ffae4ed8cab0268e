"""The shared compile cache: its key, who compiles, and the archives (pack, publish,
lookup, restore) of module_utils/prefixbench_compile_cache.py."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import module_runner
import pytest

from prefixbench.hosts import releases
from prefixbench.servers import compile_cache, server

sys.path.insert(0, str(module_runner.ROOT / "module_utils"))
import prefixbench_compile_cache as cc

#: What the module imports (its S3 store's utils too).
CC_UTILS = ("prefixbench_s3", "prefixbench_compile_cache", "prefixbench_compile_claim",
            "prefixbench_compile_store_s3")

FINGERPRINT: dict[str, Any] = {
    "host": "sim-1", "collected_at": "2026-12-01T00:00:00Z", "platform": "cpu",
    "family": "trn2", "neuron_packages": {"aws-neuronx-runtime-lib": "2.29.45.0"},
    "neuron_release": "2.32.0", "vllm_version": "0.32.0",
    "units": {"vllm-baseline.service": "a" * 64, "vllm-cached.service": "b" * 64},
    "model": {"source": "url", "revision": "sha256:" + "c" * 64}}
#: Every distribution any key reads (each release's and the cpu list), null but two.
ALL_NAMES = (*compile_cache.CPU_COMPILER_DISTRIBUTIONS,
             *(n for r in releases.load_all() for n in r.compile_distributions))
VERSIONS: dict[str, Any] = {**dict.fromkeys(ALL_NAMES), "vllm": "0.32.0", "torch": "2.13.0"}
SETTINGS: dict[str, Any] = {"prefixbench_platform": "cpu",
                            "vllm_service_cache_root": "/var/cache/vllm-prefixbench",
                            "vllm_service_environment": {"VLLM_CPU_KVCACHE_SPACE": "1"}}


def key(fingerprint: dict[str, Any] | None = None, versions: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None, configuration: str = "cached") -> str:
    return compile_cache.compile_key(compile_cache.key_material(
        fingerprint or FINGERPRINT, versions or VERSIONS, settings or SETTINGS,
        configuration))


def test_the_key_follows_what_changes_the_graphs_and_nothing_else() -> None:
    base = key()
    assert base.startswith("ck-") and len(base) == 35
    # Who and when do not change the graphs; nor, on CPU, the simulated instance family.
    assert key({**FINGERPRINT, "host": "sim-2", "collected_at": "later"}) == base
    assert key({**FINGERPRINT, "family": "trn3"}) == base
    # On Neuron the NeuronCore generation is: Trn2 and Trn3 never share graphs.
    neuron = {**SETTINGS, "prefixbench_platform": "neuron", "prefixbench_neuron_release": "2.32.0"}
    assert key({**FINGERPRINT, "platform": "neuron"}, settings=neuron) != key(
        {**FINGERPRINT, "platform": "neuron", "family": "trn3"}, settings=neuron)
    changed = [
        key(configuration="baseline"),
        key(versions={**VERSIONS, "torch": "2.13.1"}),
        key({**FINGERPRINT, "platform": "neuron"}, versions={**VERSIONS, "neuronx-cc": "2.22.0"}),
        key({**FINGERPRINT, "units": {"vllm-cached.service": "d" * 64}}),
        key({**FINGERPRINT, "model": {"revision": "sha256:" + "e" * 64}}),
        key({**FINGERPRINT, "platform": "neuron"}),
        key({**FINGERPRINT, "platform": "neuron", "family": "trn3"}, settings=neuron),
        key({**FINGERPRINT, "neuron_packages": {"aws-neuronx-runtime-lib": "2.30.0"}}),
        key(settings={**SETTINGS, "vllm_service_environment": {"NEURON_CC_FLAGS": "-O1"}}),
        key(settings={**SETTINGS, "vllm_service_cache_root": "/srv/cache"}),
    ]
    assert len({base, *changed}) == len(changed) + 1


def test_the_0_21_stacks_compiler_packages_are_in_the_key() -> None:
    # AWS's vLLM 0.21 container installs neuronx-cc, nki and libtorch-neuronx-lite
    # (deep-learning-containers@2.31.1 vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx).
    neuron = {**VERSIONS, "vllm": "0.21.0", "vllm-neuron": "0.21.0.1.0.0+794754d",
              "neuronx-cc": "2.26.6360.0+6f180f47", "nki": "0.5.0+28631259367.ga768afa6",
              "libtorch-neuronx-lite": "2.11.0.1.0.696+3ee64b38"}
    host = {**FINGERPRINT, "platform": "neuron", "neuron_release": "2.31.1"}
    base = key(host, versions=neuron)
    assert key(host, versions={**neuron, "nki": "0.6.0"}) != base
    assert key(host, versions={**neuron, "libtorch-neuronx-lite": "2.11.0.1.0.700"}) != base
    material = compile_cache.key_material(host, neuron, SETTINGS, "cached")
    assert material["distributions"]["nki"] == "0.5.0+28631259367.ga768afa6"
    assert material["key_version"] == 3


def test_a_neuron_hosts_key_reads_its_releases_distributions_and_only_those() -> None:
    # The release manifest's compile_key.distributions: a release's key has exactly its
    # names, in its order, whatever else the venv holds; on cpu, the package's own list.
    # (A manifest that leaves them unknown, 2.33.0 and 2.34.0, keys a host read from itself.)
    for rel in releases.installable(releases.load_all()):
        host = {**FINGERPRINT, "platform": "neuron", "neuron_release": rel.release}
        material = compile_cache.key_material(host, VERSIONS, SETTINGS, "cached")
        assert tuple(material["distributions"]) == rel.compile_distributions, rel.release
        # A distribution outside the release's list changes nothing.
        outside = next(n for n in ALL_NAMES if n not in rel.compile_distributions)
        assert key(host, versions={**VERSIONS, outside: "9.9"}) == key(host), rel.release
    cpu = compile_cache.key_material(FINGERPRINT, VERSIONS, SETTINGS, "cached")
    assert tuple(cpu["distributions"]) == compile_cache.CPU_COMPILER_DISTRIBUTIONS
    assert key(versions={**VERSIONS, "nki": "0.6.0"}) == key()  # no NKI on cpu
    with pytest.raises(ValueError, match="names no Neuron release"):
        key({**FINGERPRINT, "platform": "neuron", "neuron_release": None})
    with pytest.raises(ValueError, match=r"unknown Neuron SDK release 9\.9\.9"):
        key({**FINGERPRINT, "platform": "neuron", "neuron_release": "9.9.9"})


def test_the_key_follows_the_manifest_not_a_list_in_code(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A test double of a release whose manifest names other distributions.
    real = releases.load_release

    def load(name: str) -> releases.Release:
        rel = real("2.32.0")
        return replace(rel, release=name, compile_distributions=("vllm", "neuronx-cc"))

    monkeypatch.setattr(releases, "load_release", load)
    host = {**FINGERPRINT, "platform": "neuron", "neuron_release": "2.99.0"}
    material = compile_cache.key_material(host, VERSIONS, SETTINGS, "cached")
    assert material["distributions"] == {"vllm": "0.32.0", "neuronx-cc": None}
    assert compile_cache.read_distributions(
        {"prefixbench_platform": "neuron", "prefixbench_neuron_release": "2.99.0"}) == \
        ["vllm", "vllm-neuron", "neuronx-cc"]


def test_a_releases_key_is_stable() -> None:
    # The same host on the same release keys the same graphs run after run: the key of a
    # fixed material, pinned (a changed value here means every store entry is orphaned;
    # say why in the change, as KEY_VERSION's comment does).
    host = {**FINGERPRINT, "platform": "neuron", "neuron_release": "2.32.0"}
    assert key(host) == key(dict(reversed(list(host.items()))))
    assert key(host) == "ck-bd08d11f719538cc1185ad413972830c"


def test_a_host_whose_venv_was_not_asked_for_a_distribution_does_not_share() -> None:
    # An unread version is not an absent one: keying on it as null would let hosts with
    # different NKI builds load each other's graphs.
    unread = {k: v for k, v in VERSIONS.items() if k != "nki"}
    with pytest.raises(ValueError, match=r"versions of nki were not read"):
        key({**FINGERPRINT, "platform": "neuron"}, versions=unread)
    with pytest.raises(ValueError, match=r"versions of vllm, vllm-cpu, .* were not read"):
        compile_cache.key_material(FINGERPRINT, {}, SETTINGS, "cached")


def test_the_fingerprint_task_reads_every_distribution_the_key_needs() -> None:
    import yaml  # noqa: PLC0415

    tasks = yaml.safe_load((module_runner.ROOT / "roles" / "prefix_bench" / "tasks" /
                            "fingerprint.yml").read_text())
    read = next(t["prefixbench_fingerprint_read"] for t in tasks
                if "prefixbench_fingerprint_read" in t)
    assert read["distributions"] == (
        "{{ prefixbench_settings | prefixbench_fingerprint_distributions }}")
    # What that filter answers covers the key's names on every installable release, and on
    # cpu (a host read from itself: servers.compile_cache reads its settings' release).
    for rel in releases.installable(releases.load_all()):
        names = compile_cache.read_distributions(
            {"prefixbench_platform": "neuron", "prefixbench_neuron_release": rel.release})
        assert set(rel.compile_distributions) <= set(names), rel.release
        assert {"vllm", "vllm-neuron"} <= set(names)  # the fingerprint's own
        host = {**FINGERPRINT, "platform": "neuron", "neuron_release": rel.release}
        compile_cache.key_material(host, dict.fromkeys(names), SETTINGS, "cached")
    cpu = compile_cache.read_distributions({"prefixbench_platform": "cpu"})
    compile_cache.key_material(FINGERPRINT, dict.fromkeys(cpu), SETTINGS, "cached")


def test_a_host_without_a_unit_checksum_or_model_revision_does_not_share() -> None:
    with pytest.raises(ValueError, match=r"no checksum of vllm-cached\.service"):
        key({**FINGERPRINT, "units": {}})
    with pytest.raises(ValueError, match="no model revision"):
        key({**FINGERPRINT, "model": {}})


def test_the_cache_directory_is_the_platforms() -> None:
    assert compile_cache.cache_dir(SETTINGS) == "/var/cache/vllm-prefixbench/inductor"
    # vLLM Neuron's local cache: $VLLM_CACHE_ROOT/neuron/compile_cache/<hash>/.
    # (vllm-neuron/docs/design/compilation/compilation_cache.md as at v2.32.0).
    for rel in ("2.31.1", "2.32.0"):
        assert compile_cache.cache_dir({**SETTINGS, "prefixbench_platform": "neuron",
                                        "prefixbench_neuron_release": rel}) == \
            "/var/cache/vllm-prefixbench/neuron/compile_cache"
    # The unit puts Inductor's cache exactly there on the simulated fleet.
    env = server.environment({**SETTINGS, "vllm_service_host": "127.0.0.1"}, "cached", "/r")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == compile_cache.cache_dir(SETTINGS)


def test_the_host_that_claims_a_missing_key_leads_and_the_others_follow() -> None:
    role = compile_cache.role
    assert role(None, stored=False, local=False, won=False) == "off"
    assert role("k1", stored=True, local=True, won=False) == "restore"
    assert role("k1", stored=False, local=False, won=True) == "leader"
    assert role("k1", stored=False, local=True, won=True) == "leader"
    assert role("k1", stored=False, local=False, won=False) == "follower"
    # A host whose own cache has the key never waits for the holder of its claim.
    assert role("k1", stored=False, local=True, won=False) == "self"


def test_with_the_compile_policy_nobody_waits_and_one_host_publishes() -> None:
    role = compile_cache.role
    assert role("k1", stored=False, local=False, won=True, cold="compile") == "leader"
    assert role("k1", stored=False, local=False, won=False, cold="compile") == "self"
    with pytest.raises(ValueError, match="cold policy"):
        role("k1", stored=False, local=False, won=False, cold="maybe")


def test_a_follower_waits_for_the_leaders_longest_start_and_its_publish() -> None:
    deadline = compile_cache.follower_deadline(1000.0, {"vllm_service_health_timeout": 600})
    assert deadline == 1000.0 + 600 + compile_cache.PUBLISH_ALLOWANCE_S


def make_cache(root: Path) -> Path:
    cache = root / "inductor"
    (cache / "fxgraph" / "ab").mkdir(parents=True)
    (cache / "fxgraph" / "ab" / "entry").write_bytes(b"graph-1")
    (cache / "kernel.so").write_bytes(b"\x7fELF" + bytes(100))
    return cache


def published(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    packed = cc.pack(str(make_cache(tmp_path / "leader")), str(tmp_path / "out.tar.gz"))
    assert packed["files"] == 2
    store = tmp_path / "store"
    done, manifest = cc.publish(str(tmp_path / "out.tar.gz"), packed["sha256"], str(store),
                                "ck-1", {"host": "h1"})
    assert done and manifest["host"] == "h1" and manifest["sha256"] == packed["sha256"]
    return store, manifest


def test_pack_publish_lookup_restore_round_trip(tmp_path: Path) -> None:
    store, manifest = published(tmp_path)
    assert cc.lookup(str(store), "ck-1") == manifest
    assert cc.lookup(str(store), "ck-2") is None
    fresh = tmp_path / "fresh" / "inductor"
    got = cc.restore(str(store / "ck-1.tar.gz"), manifest["sha256"], str(fresh), "ck-1")
    assert got == {"restored": 2, "kept": 0}
    assert (fresh / "fxgraph" / "ab" / "entry").read_bytes() == b"graph-1"
    assert cc.has_marker(str(fresh), "ck-1") and not cc.has_marker(str(fresh), "ck-2")
    # The bundle's marker is not a compiled file: the scan does not count it.
    assert cc.scan(str(fresh)) == {"files": 2, "bytes": 7 + 104}
    assert not list(fresh.glob(".prefixbench-incoming*"))
    # Files already in the cache are kept as they are (same name, same graph).
    (fresh / "kernel.so").write_bytes(b"mine")
    again = cc.restore(str(store / "ck-1.tar.gz"), manifest["sha256"], str(fresh), "ck-1")
    assert again == {"restored": 0, "kept": 2}
    assert (fresh / "kernel.so").read_bytes() == b"mine"


def test_the_first_publisher_wins_and_a_half_published_key_is_absent(tmp_path: Path) -> None:
    store, manifest = published(tmp_path)
    other = make_cache(tmp_path / "other")
    (other / "extra").write_bytes(b"x")
    packed = cc.pack(str(other), str(tmp_path / "other.tar.gz"))
    done, kept = cc.publish(str(tmp_path / "other.tar.gz"), packed["sha256"], str(store),
                            "ck-1", {"host": "h2"})
    assert not done and kept == manifest
    # An archive without its manifest (a publish cut short) is not in the store.
    (store / "ck-3.tar.gz").write_bytes(b"partial")
    assert cc.lookup(str(store), "ck-3") is None
    # Nor is one whose size disagrees with the manifest.
    (store / "ck-1.tar.gz").write_bytes(b"truncated")
    assert cc.lookup(str(store), "ck-1") is None
    # A fetched archive that is not what the host packed is never published.
    with pytest.raises(cc.CompileCacheError, match="is not the packed"):
        cc.publish(str(tmp_path / "other.tar.gz"), "0" * 64, str(store), "ck-4", {})
    assert cc.lookup(str(store), "ck-4") is None
    assert sorted(p.name for p in store.iterdir()) == [
        "ck-1.json", "ck-1.tar.gz", "ck-3.tar.gz"]


def test_a_corrupt_archive_changes_nothing(tmp_path: Path) -> None:
    store, manifest = published(tmp_path)
    cache = tmp_path / "host" / "inductor"
    archive = store / "ck-1.tar.gz"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    with pytest.raises(cc.CompileCacheError, match="is not the store's"):
        cc.restore(str(archive), manifest["sha256"], str(cache), "ck-1")
    assert not cache.exists() or cc.scan(str(cache))["files"] == 0
    # Matching sha256 but not a gzipped tar (a store written by something else).
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(b"not an archive")
    with pytest.raises(cc.CompileCacheError, match="unreadable archive"):
        cc.restore(str(bogus), cc.sha256_file(bogus), str(cache), "ck-1")
    assert not cc.has_marker(str(cache), "ck-1")
    assert not (cache / ".prefixbench-incoming").exists()


@pytest.mark.parametrize(("name", "kind", "message"), [
    ("../escape", tarfile.REGTYPE, "outside the cache"),
    ("/etc/passwd", tarfile.REGTYPE, "outside the cache"),
    ("link", tarfile.SYMTYPE, "not a file or folder"),
    (".prefixbench-keys/ck-9", tarfile.REGTYPE, "the bundle's own"),
])
def test_members_outside_the_cache_or_not_plain_files_are_refused(
        tmp_path: Path, name: str, kind: bytes, message: str) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo(name)
        member.type = kind
        member.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        member.size = 0 if kind == tarfile.SYMTYPE else 3
        tar.addfile(member, None if kind == tarfile.SYMTYPE else io.BytesIO(b"bad"))
    cache = tmp_path / "c" / "inductor"
    with pytest.raises(cc.CompileCacheError, match=message):
        cc.restore(str(archive), cc.sha256_file(archive), str(cache), "ck-1")
    assert not (tmp_path / "escape").exists()
    assert cc.scan(str(cache))["files"] == 0


def test_packing_an_empty_cache_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(cc.CompileCacheError, match="no compiled files"):
        cc.pack(str(tmp_path / "none"), str(tmp_path / "a.tar.gz"))
    assert not (tmp_path / "a.tar.gz").exists()


def test_the_module_warns_once_and_goes_on_for_a_corrupt_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, manifest = published(tmp_path)
    (store / "ck-1.tar.gz").write_bytes(b"garbage")
    # As on a host: warnings go into the result (once a controller module has been
    # imported in this process, Ansible would print them instead).
    from ansible.module_utils import _internal  # noqa: PLC0415
    monkeypatch.setattr(_internal, "is_controller", False)
    out = module_runner.run_module(
        "prefixbench_compile_cache",
        {"state": "restore", "path": str(tmp_path / "h" / "inductor"),
         "archive": str(store / "ck-1.tar.gz"), "sha256": manifest["sha256"], "key": "ck-1"},
        monkeypatch, capsys, utils=CC_UTILS)
    assert not out.get("failed") and out["changed"] is False and out["restored"] == 0
    assert len(out["warnings"]) == 1
    assert "the server compiles instead" in json.dumps(out["warnings"][0])
    found = module_runner.run_module(
        "prefixbench_compile_cache", {"state": "lookup", "store": str(store), "key": "ck-1"},
        monkeypatch, capsys, utils=CC_UTILS)
    assert found["manifest"] is None  # the size no longer matches the manifest
    assert json.loads((store / "ck-1.json").read_text())["key"] == "ck-1"


def test_a_release_that_does_not_say_where_its_graphs_are_never_shares(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A test double of a release whose data has no compile_key.cache_dir (2.33's native
    # route and its precompile cache are not located by any page read; a release read
    # from the host would only assume one): its hosts compile their own.
    real = releases.load_release

    def load(name: str) -> releases.Release:
        rel = real("2.32.0")
        return replace(rel, release=name, compile_cache_dir="") if name == "2.99.0" else rel

    monkeypatch.setattr(releases, "load_release", load)
    host = {**FINGERPRINT, "platform": "neuron", "neuron_release": "2.99.0"}
    with pytest.raises(ValueError, match="does not say where its server keeps compiled"):
        compile_cache.key_material(host, VERSIONS, SETTINGS, "cached")
    neuron = {**SETTINGS, "prefixbench_platform": "neuron",
              "prefixbench_neuron_release": "2.99.0"}
    # Counted in VLLM_CACHE_ROOT itself, so the record still says whether it compiled.
    assert compile_cache.cache_dir(neuron) == "/var/cache/vllm-prefixbench"
    assert compile_cache.unshared_reason("neuron", "2.32.0") == ""
    assert compile_cache.unshared_reason("cpu", "2.99.0") == ""
    # Never across releases: the same host on another known release keys differently.
    assert key({**host, "neuron_release": "2.32.0"}) != key(
        {**host, "neuron_release": "2.31.1"})


def test_a_host_on_2_33_compiles_its_own_and_the_fingerprint_still_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 2.33.0's data say no compile_key.cache_dir (its native route's location is not
    # published): the key says why, and the fingerprint task still gets its list.
    neuron = {**SETTINGS, "prefixbench_platform": "neuron",
              "prefixbench_neuron_release": "2.33.0"}
    host = {**FINGERPRINT, "platform": "neuron", "neuron_release": "2.33.0"}
    with pytest.raises(ValueError, match=r"Neuron 2\.33\.0 does not say where"):
        compile_cache.key_material(host, VERSIONS, neuron, "cached")
    assert compile_cache.read_distributions(neuron)[:2] == ["vllm", "vllm-neuron"]
    assert compile_cache.cache_dir(neuron) == "/var/cache/vllm-prefixbench"
