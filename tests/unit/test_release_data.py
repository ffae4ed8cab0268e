"""What differs between Neuron releases is read from the host's release manifest: the
unit's library path, the segment sizes its plugin supports, the compile key's
distributions (src/prefixbench/data/neuron_releases/, README.md beside them)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from prefixbench.config import settings
from prefixbench.hosts import release_match, releases

ROOT = Path(__file__).resolve().parents[2]


def _filters() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(
        "prefixbench_filters", ROOT / "plugins" / "filter" / "prefixbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.FilterModule().filters())


def _manifest(release: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((releases.RELEASES_DIR / f"{release}.yml").read_text())
    return data


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["server"].pop("library_path"), "server.library_path must list"),
    (lambda d: d["server"].update(library_path=["opt/aws/neuron/lib"]),
     "server.library_path must list"),
    (lambda d: d["server"].update(library_path=["/a:/b"]), "server.library_path must list"),
    (lambda d: d["server"].update(library_path=["/a", "/a"]), "server.library_path must list"),
    (lambda d: d["server"].pop("library_path_source"), "library_path_source names no public"),
    (lambda d: d.pop("prefix_caching"), "prefix_caching.segment_sizes must list"),
    (lambda d: d["prefix_caching"].update(segment_sizes=[1024, 512]),
     "prefix_caching.segment_sizes must list"),
    (lambda d: d["prefix_caching"].update(segment_sizes=["512"]),
     "prefix_caching.segment_sizes must list"),
    (lambda d: d["prefix_caching"].pop("source"), "prefix_caching.source names no public"),
])
def test_the_loader_refuses_a_manifest_without_the_releases_unit_data(
        change: Any, message: str) -> None:
    data = _manifest("2.32.0")
    change(data)
    with pytest.raises(releases.ReleaseError, match=message):
        releases.parse_release(data, "2.32.0.yml")


def test_each_release_carries_its_own_library_path_and_segment_sizes() -> None:
    by_id = {r.release: r for r in releases.load_all()}
    # aws-neuron/deep-learning-containers: the 0.21 image (2.31.x) sets no EFA directory;
    # the 0.24 image at 2.32.0 adds both after libnrt's.
    assert by_id["2.31.1"].library_path == ("/opt/aws/neuron/lib",)
    assert by_id["2.32.0"].library_path == (
        "/opt/aws/neuron/lib", "/opt/amazon/efa/lib", "/opt/amazon/efa/lib64")
    # The plugin's docs at each tag: {512, 1024, 2048, 4096} (8192 at 2.32.0 only in the
    # configuration reference, not confirmed by its tutorial or design doc).
    for rel in releases.installable(list(by_id.values())):
        assert rel.segment_sizes == (512, 1024, 2048, 4096), rel.release
    # 2.33.0 and 2.34.0: no page readable here states them; unknown, not guessed.
    for name in ("2.33.0", "2.34.0"):
        assert by_id[name].segment_sizes == () and by_id[name].library_path == ()
        assert {"prefix_caching.segment_sizes", "server.library_path"} <= set(
            by_id[name].unknown_facts)
    assert releases.segment_sizes() == (512, 1024, 2048, 4096)


@pytest.fixture
def double_releases_with_8192(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The manifests, with 2.32.0 allowing 8192 (a test double of a release whose
    plugin supports it): the rules read whatever the manifests say."""
    for path in releases.RELEASES_DIR.glob("*.yml"):
        shutil.copy(path, tmp_path / path.name)
    data = _manifest("2.32.0")
    data["prefix_caching"]["segment_sizes"] = [512, 1024, 2048, 4096, 8192]
    (tmp_path / "2.32.0.yml").write_text(yaml.safe_dump(data))
    real_all, real_one = releases.load_all, releases.load_release
    monkeypatch.setattr(releases, "load_all", lambda directory=tmp_path: real_all(directory))
    monkeypatch.setattr(releases, "load_release",
                        lambda name, directory=tmp_path: real_one(name, directory))
    return tmp_path


def _segment_problems(**extra: Any) -> list[str]:
    cfg = {"num_batched_tokens_buckets": [8192], "num_seqs_buckets": [4],
           "kv_segment_size_buckets": [8192], "on_device_sampling_config": {}}
    result = settings.validate({
        "prefixbench_instance_type": "trn2.48xlarge",
        "vllm_service_model": "/opt/models/gpt-oss-120b",
        "vllm_service_neuron_config": cfg, "vllm_service_max_num_batched_tokens": 8192,
        "vllm_service_max_model_len": 16384, **extra}, "h1")
    return [p for p in result.problems if "not supported on" in p]


def test_preflight_holds_a_named_release_to_its_own_segment_sizes(
        double_releases_with_8192: Path) -> None:
    assert _segment_problems(prefixbench_neuron_release="2.32.0") == []
    assert _segment_problems(prefixbench_neuron_release="2.31.1") == [
        "h1: kv_segment_size_buckets [8192] not supported on Neuron 2.31.1: use one of "
        "[512], [1024], [2048], [4096] (prefix_caching.segment_sizes in "
        "prefixbench/data/neuron_releases/)"]
    # auto: any known release's size passes preflight; the host is checked once read.
    assert _segment_problems(prefixbench_neuron_release="auto") == []
    sweep = _segment_problems(prefixbench_neuron_release="2.31.1",
                              prefixbench_sweep_segment_sizes=[4096, 8192])
    assert any(p.startswith("h1: prefixbench_sweep_segment_sizes [8192] not supported on "
                            "Neuron 2.31.1") for p in sweep), sweep


def test_preflight_refuses_a_size_no_release_supports() -> None:
    problems = _segment_problems(prefixbench_neuron_release="auto")
    assert problems == [
        "h1: kv_segment_size_buckets [8192] not supported on any Neuron release this "
        "bundle knows the sizes of (2.31.0, 2.31.0-vllm-beta, 2.31.1, 2.32.0): use one of "
        "[512], [1024], "
        "[2048], [4096] (prefix_caching.segment_sizes in prefixbench/data/neuron_releases/)"]


def test_a_host_read_on_a_release_without_the_size_is_refused_before_any_change(
        double_releases_with_8192: Path) -> None:
    host_settings = {"vllm_service_neuron_config": {"kv_segment_size_buckets": [8192]}}
    by_id = {r.release: r for r in releases.load_all()}
    on_2_31 = release_match.HostRelease(by_id["2.31.1"], "matched", venv="/opt/v")
    refused = release_match.checked("trn2-a", on_2_31, host_settings)
    assert refused.release is None and refused.venv == ""
    assert refused.refusal == (
        "trn2-a: kv_segment_size_buckets [8192] not supported on Neuron 2.31.1: use one of "
        "[512], [1024], [2048], [4096] (prefix_caching.segment_sizes in "
        "prefixbench/data/neuron_releases/); nothing was changed")
    on_2_32 = release_match.HostRelease(by_id["2.32.0"], "matched")
    assert release_match.checked("trn2-b", on_2_32, host_settings) == on_2_32


def test_the_host_release_filter_applies_the_segment_check() -> None:
    # Through the filter the role calls (roles/neuron_sdk/tasks/release.yml): a bare host
    # named onto 2.32.0 with a size no manifest lists is refused, its settings untouched.
    found = _filters()["prefixbench_host_release"](
        {"prefixbench_neuron_release": "2.32.0",
         "vllm_service_neuron_config": {"kv_segment_size_buckets": [768]}},
        "trn2-a", {}, {})
    assert found["refusal"].startswith("trn2-a: kv_segment_size_buckets [768] not "
                                       "supported on Neuron 2.32.0: use one of [512]")
    assert found["settings"] == {}
    fine = _filters()["prefixbench_host_release"](
        {"prefixbench_neuron_release": "2.32.0",
         "vllm_service_neuron_config": {"kv_segment_size_buckets": [1024]}},
        "trn2-a", {}, {})
    assert fine["refusal"] == "" and fine["settings"]["prefixbench_neuron_release"] == "2.32.0"


def test_the_whatif_accepts_a_size_some_release_supports(
        double_releases_with_8192: Path) -> None:
    from prefixbench.frontend import whatif_setup  # noqa: PLC0415
    from prefixbench.frontend.cli_shared import UsageError  # noqa: PLC0415

    class Serving:  # a test double of whatif_setup's serving settings
        max_num_batched_tokens = 8192

    assert whatif_setup._segment(Serving(), 32)[0] == 8192  # type: ignore[arg-type]
    Serving.max_num_batched_tokens = 768
    with pytest.raises(UsageError, match=r"768 is not a Neuron prefill segment size any "
                                         r"known release supports: use one of 512, 1024, "
                                         r"2048, 4096, 8192"):
        whatif_setup._segment(Serving(), 32)  # type: ignore[arg-type]


def test_teardown_removes_the_doctors_proof_without_reading_the_release() -> None:
    from prefixbench.bench.client_launch import HOST_SCRIPT  # noqa: PLC0415
    from prefixbench.servers import sandbox, server, teardown  # noqa: PLC0415

    # A Neuron host whose release was never read (teardown does not read it).
    removed = teardown.paths({"prefixbench_platform": "neuron",
                              "prefixbench_neuron_release": "auto",
                              "vllm_service_cache_root": "/srv/vllm-cache/"})
    assert sandbox.PROOF_FILE in removed  # by name: a strict deploy trusts it otherwise
    assert removed == ["/var/lib/vllm-prefixbench", "/srv/vllm-cache", sandbox.PROOF_FILE,
                       "/var/lib/prefixbench", "/etc/vllm-prefixbench"]
    # Every file the server's roles leave on a host is under something removed.
    for left in (sandbox.PROOF_FILE, HOST_SCRIPT, server.ENV_FILE, server.STATE_DIR):
        assert any(left == p or left.startswith(p + "/") for p in removed), left
    # A cache root on a system directory is not taken with it.
    assert "/var/cache" not in teardown.paths({"vllm_service_cache_root": "/var/cache/"})


def test_the_teardown_role_removes_what_the_package_lists() -> None:
    tasks = yaml.safe_load((ROOT / "roles" / "vllm_service" / "tasks" /
                            "teardown.yml").read_text())
    removal = next(t for t in tasks if t["name"].startswith("Remove the service's state"))
    assert removal["ansible.builtin.file"] == {"path": "{{ item }}", "state": "absent"}
    assert removal["loop"] == ("{{ vllm_service_settings | default(prefixbench_settings, "
                               "true) | prefixbench_teardown_paths('vllm_service') }}")
    assert _filters()["prefixbench_teardown_paths"]({}, "vllm_service") == [
        "/var/lib/vllm-prefixbench", "/var/cache/vllm-prefixbench",
        "/var/lib/prefixbench/sandbox-proof.json", "/var/lib/prefixbench",
        "/etc/vllm-prefixbench"]
