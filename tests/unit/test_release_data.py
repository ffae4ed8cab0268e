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
    (lambda d: d["server"].pop("library_path_source"),
     "server.library_path_source names no public"),
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
    with pytest.raises(releases.ReleaseError, match=r"^2\.32\.0\.yml: " + message):
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
    from prefixbench.engines.schedconfig import Serving  # noqa: PLC0415
    from prefixbench.frontend import whatif_setup  # noqa: PLC0415
    from prefixbench.frontend.cli_shared import UsageError  # noqa: PLC0415

    serving = Serving(max_num_batched_tokens=8192, max_model_len=16384)
    assert whatif_setup._segment(serving, 32)[0].prefill_segment == 8192
    with pytest.raises(UsageError, match=r"768 is below --max-model-len 16384, so the Neuron "
                                         r"plugin turns segmented prefill on with it as the "
                                         r"segment, and it is not a supported segment size: "
                                         r"use one of 512, 1024, 2048, 4096, 8192"):
        whatif_setup._segment(Serving(max_num_batched_tokens=768, max_model_len=16384), 32)


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


# -- Every refusal of a manifest, its whole line (the manifest format of
# src/prefixbench/data/neuron_releases/README.md; 2.32.0's manifest, one thing broken) --

_PIN = "but apt.origin names no public source for it"


def _set(path: str, value: Any) -> Any:
    def change(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        d[last] = value
    return change


def _drop(path: str) -> Any:
    def change(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        del d[last]
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_set("bogus", 1), "unknown keys ['bogus']"),
    (_set("schema", 1), "schema must be 2, not 1"),
    (_drop("schema"), "schema must be 2, not None"),
    (_set("release", "v2.32"), 'release must be a quoted id like "2.31.0" or '
                               '"2.31.0-vllm-beta"'),
    (_set("release", 2.32), 'release must be a quoted id like "2.31.0" or '
                            '"2.31.0-vllm-beta"'),
    (_set("apt", ["aws-neuronx-dkms"]), "apt and pip must be mappings"),
    (_set("pip", ["vllm"]), "apt and pip must be mappings"),
    (_set("apt.packages", {}), "apt.packages is empty"),
    (_set("apt.packages", ["aws-neuronx-dkms"]),
     "apt.packages: expected a mapping of package name to version"),
    (_set("apt.packages.Bad_Name", "1.0"), "apt.packages: invalid package name 'Bad_Name'"),
    (_set("apt.packages.aws-neuronx-dkms", 2.3),
     "apt.packages.aws-neuronx-dkms: version must be a quoted dotted number or null "
     "(unknown), not 2.3"),
    (_set("apt.packages.aws-neuronx-dkms", "2.30.2.0-a1"),
     "apt.packages.aws-neuronx-dkms: version must be a quoted dotted number or null "
     "(unknown), not '2.30.2.0-a1'"),
    (_set("apt.prerequisites", "linux-headers-{kernel}"),
     "apt.prerequisites must be a list of package names"),
    (_set("apt.prerequisites", [1]), "apt.prerequisites must be a list of package names"),
    (_set("pip.vllm", 0.24), "pip.vllm must be a quoted version or null"),
    (_set("pip.vllm", "0.24.0rc1"), "pip.vllm must be a quoted version or null"),
    (_set("os", ["ubuntu 22.04"]), "os must map '<distribution> <version>' to a note"),
    (_set("apt.origin", ["x"]), "apt.origin must map a package to its source"),
    (_set("pip.origin", ["x"]), "pip.origin must map a package to its source"),
    (_drop("apt.origin.aws-neuronx-dkms"),
     f"apt.packages.aws-neuronx-dkms is pinned to 2.30.2.0 {_PIN}"),
    (_set("apt.origin.aws-neuronx-dkms", "  "),
     f"apt.packages.aws-neuronx-dkms is pinned to 2.30.2.0 {_PIN}"),
    (_drop("pip.origin.nki"), "pip.packages.nki is pinned to 0.6.0 but pip.origin names "
                              "no public source for it"),
    (_drop("pip.origin.vllm"), "pip.vllm is pinned to 0.24.0 but pip.origin names no "
                               "public source for it"),
    (_set("python.supported", "3.12"),
     'python.supported must be a list of quoted versions like "3.12"'),
    (_set("python.supported", ["3.12", 3.13]),
     'python.supported must be a list of quoted versions like "3.12"'),
    (_set("python.supported", ["3.12.1"]),
     'python.supported must be a list of quoted versions like "3.12"'),
    (_set("dlami", ["x"]), "dlami must be a mapping"),
    (_set("pip.sources", ["x"]), "pip.sources must map a package to a direct URL such as "
                                 "git+https://host/repo.git@<commit>"),
    (_set("pip.sources.vllm-neuron", "git+https://github.com/vllm-project/vllm-neuron.git"),
     "pip.sources must map a package to a direct URL such as "
     "git+https://host/repo.git@<commit>"),
    (_set("pip.sources.nkx", "https://github.com/a/b.git@e8242a9"),
     "pip.sources.nkx is not in pip.packages"),
    (_drop("pip.origin.vllm-neuron"), "pip.packages.vllm-neuron is pinned to 0.24.0.1.1.0 "
                                      "but pip.origin names no public source for it"),
    (_set("python", ["3.12"]),
     'python.supported must be a list of quoted versions like "3.12"'),
    (lambda d: (d["pip"]["packages"].update({"vllm-neuron": None}),
                d["pip"]["origin"].pop("vllm-neuron")),
     "pip.sources.vllm-neuron has no public source in pip.origin"),
    (_set("version", ""), 'version must be AWS\'s SDK version the id starts with '
                          '("2.32.0")'),
    (_set("version", "2.31.0"),
     'version must be AWS\'s SDK version the id starts with ("2.32.0")'),
    (_set("version", 2.32), 'version must be AWS\'s SDK version the id starts with '
                            '("2.32.0")'),
    (_set("date", "17 Aug 2026"), 'date must be AWS\'s release date as "YYYY-MM-DD"'),
    (_drop("date"), 'date must be AWS\'s release date as "YYYY-MM-DD"'),
    (_set("server", ["x"]), "server must be a mapping"),
    (_set("bench_client", "pandas"), "bench_client must be a mapping"),
    (_drop("server.source"), "server.source names no public source"),
    (_set("bench_client.source", " "), "bench_client.source names no public source"),
    (_set("provenance", ["read"]), "provenance must map a fact to where it came from"),
    (_set("unknown", 5), "unknown must map one of ['compile_key.cache_dir', "
                         "'compile_key.distributions', 'dlami.venv', 'pip.sources', "
                         "'prefix_caching.segment_sizes', 'python.supported', "
                         "'server.environment', 'server.library_path'] to where it was "
                         "looked for and not found"),
    (_set("server.environment", 5), "server.environment must map an environment variable "
                                    "name to a quoted value"),
    (_set("server.trn3_environment", 5), "server.trn3_environment must map an environment "
                                         "variable name to a quoted value"),
    (_set("bench_client.requirements", 5), "bench_client.requirements must be a list of "
                                           "strings"),
    (_set("compile_key", {"distributions": 5, "source": "s"}),
     "compile_key.distributions must be a list of strings"),
    (_set("compile_route", {"environment": 5, "source": "s"}),
     "compile_route.environment must map an environment variable name to a quoted value"),
    (_set("gpu_only", {"packages": 5, "source": "s"}),
     "gpu_only.packages must map a distribution to the quoted version pip resolves"),
    (_set("compile_key", {"cache_dir": "/abs/dir", "source": "s"}),
     "compile_key.cache_dir must be a relative directory such as neuron/compile_cache"),
    (_set("compile_key", {"cache_dir": "neuron/../up", "source": "s"}),
     "compile_key.cache_dir must be a relative directory such as neuron/compile_cache"),
    (_set("compile_key", {"cache_dir": 5, "source": "s"}),
     "compile_key.cache_dir must be a relative directory such as neuron/compile_cache"),
])
def test_each_refusal_of_a_manifest_is_its_own_whole_line(change: Any, message: str) -> None:
    data = _manifest("2.32.0")
    change(data)
    with pytest.raises(releases.ReleaseError) as err:
        releases.parse_release(data, "x.yml")
    assert str(err.value) == f"x.yml: {message}"


def test_a_manifest_that_is_not_a_mapping_and_the_default_origin() -> None:
    with pytest.raises(releases.ReleaseError) as err:
        releases.parse_release(["2.32.0"])
    assert str(err.value) == "<manifest>: not a mapping"


def test_a_manifest_is_read_as_it_is_written() -> None:
    data = _manifest("2.32.0")
    rel = releases.parse_release(data, "2.32.0.yml")
    assert rel.release == rel.version == "2.32.0" and rel.date == "2026-08-17"
    assert rel.title == "Neuron 2.32.0" and rel.series == "2.32"
    assert rel.apt_prerequisites == ("linux-headers-{kernel}",)
    assert rel.prerequisites_for("6.8.0-1021-aws") == ["linux-headers-6.8.0-1021-aws"]
    assert rel.vllm == "0.24.0" and rel.pip_packages["nki"] == "0.6.0"
    assert rel.pip_sources == {
        "vllm-neuron": "git+https://github.com/vllm-project/vllm-neuron.git@e8242a9"}
    assert rel.python_supported == ("3.11", "3.12", "3.13")
    assert rel.python_source.startswith("aws-neuron/aws-neuron-sdk src/helperscripts/"
                                        "n2-manifest.json at v2.32.0:")
    assert rel.origin["aws-neuronx-dkms"] == ("aws-neuron/aws-neuron-sdk src/helperscripts/"
                                              "n2-manifest.json at v2.32.0")
    assert rel.origin["vllm"].startswith("aws-neuron/aws-neuron-sdk deploy/environments/")
    assert rel.sources == tuple(data["sources"]) and len(rel.sources) == 5
    assert rel.server_environment == {"NEURON_LIBTORCH_COMPILATION_TIMEOUT": "1200",
                                      "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1200"}
    assert rel.trn3_environment == {"NEURON_RT_ALLOW_LEGACY_NEFF": "1"}
    assert rel.bench_requirements == ("pandas==2.3.3",)
    assert rel.segment_sizes == (512, 1024, 2048, 4096)
    assert rel.os_support == {str(k): str(v) for k, v in data["os"].items()}
    assert rel.dlami == {str(k): str(v) for k, v in data["dlami"].items()}
    assert rel.notes == str(data.get("notes") or "")
    assert rel.provenance == {} and rel.unknown() == []
    assert rel.label() == "2.32.0 (Neuron 2.32.0, 2026-08-17)"
    assert rel.apt_pins()[0] == "aws-neuronx-dkms=2.30.2.0*"
    assert rel.python_refusal("3.12.3") is None and rel.python_refusal("3.13") is None
    assert rel.python_refusal("3.10.12") == (
        "Python 3.10 cannot run Neuron SDK 2.32.0's wheels (built for Python 3.11, 3.12, "
        "3.13)")


def test_debian_versions_against_the_manifests_upstream_version() -> None:
    # Debian Policy 5.6.12: [epoch:]upstream[-revision].
    assert releases.upstream_version("1:2.31.15.0-5c7949a6a") == "2.31.15.0"
    assert releases.upstream_version("2.31.15.0-5c7949a6a-1") == "2.31.15.0"
    assert releases.upstream_version("2:1:2.0") == "1:2.0"
    assert releases.version_matches("2.30.2.0-a1b2c3", "2.30.2.0")
    assert not releases.version_matches("2.30.20.0-a1b2c3", "2.30.2.0")
    assert releases.version_tuple("2.31.15.0+abc.1") == (2, 31, 15, 0)
    assert releases.version_tuple("10.2") == (10, 2)


def _write(directory: Path, name: str, data: Any) -> None:
    (directory / f"{name}.yml").write_text(yaml.safe_dump(data))


def test_the_loader_reads_a_directory_oldest_first_and_names_what_is_wrong(
        tmp_path: Path) -> None:
    older, newer = _manifest("2.31.1"), _manifest("2.32.0")
    _write(tmp_path, "2.32.0", newer)
    _write(tmp_path, "2.31.1", older)
    (tmp_path / "notes.yml").write_text("not: a release\n")  # not a release id: skipped
    assert releases.available_releases(tmp_path) == ["2.31.1", "2.32.0"]
    assert releases.load_release("2.32", tmp_path).release == "2.32.0"
    assert releases.load_release("2.31.1", tmp_path).release == "2.31.1"
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_release("2.30", tmp_path)
    assert str(err.value) == (f"unknown Neuron SDK release 2.30 (known: 2.31.1, 2.32.0); "
                              f"add its manifest to {tmp_path} to support it")
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_release("2.32.9", tmp_path)
    assert str(err.value) == (
        "unknown Neuron SDK release 2.32.9: no manifest 2.32.9.yml (known: 2.31.1, "
        f"2.32.0); add {tmp_path / '2.32.9.yml'} to support it")
    for bad in ("2", "v2.32", "2.32.0.1", "latest"):
        with pytest.raises(releases.ReleaseError) as err:
            releases.load_release(bad, tmp_path)
        assert str(err.value) == (f"not a Neuron SDK release: {bad!r} (expected e.g. "
                                  "2.32.0, or auto to read it from each host)")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(releases.ReleaseError, match=r"\(known: none\)"):
        releases.load_release("2.32.0", empty)
    # A file whose release is not its name, and one that is not YAML.
    _write(tmp_path, "2.33.0", newer)
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_all(tmp_path)
    assert str(err.value) == "2.33.0.yml: release 2.32.0 does not match its file name"
    _write(tmp_path, "2.33.0", {**newer, "schema": 1})
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_all(tmp_path)
    assert str(err.value) == "2.33.0.yml: schema must be 2, not 1"
    (tmp_path / "2.33.0.yml").write_text("schema: [2\n")
    with pytest.raises(releases.ReleaseError, match=r"^2\.33\.0\.yml: not YAML \("):
        releases.load_all(tmp_path)


def test_auto_and_host_read_are_not_names_of_manifests() -> None:
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_release("auto")
    assert str(err.value) == (
        "prefixbench_neuron_release is auto and this host's release has not been read yet "
        "(roles/neuron_sdk tasks_from: release reads it; it runs before the vLLM "
        "environment is chosen)")
    with pytest.raises(releases.ReleaseError) as err:
        releases.load_release("host-read")
    assert str(err.value) == ("this host's release was read from the host: pass the "
                              "host's settings (releases.for_settings), not its id")
    # Settings: the release read from the host beside the id, else the id's manifest.
    read = _manifest("2.31.1")
    read["release"], read["version"], read["date"] = "host-read", "", ""  # hosts.host_read
    assert releases.for_settings({"neuron_release_read": read}).release == "host-read"
    assert releases.release_of({"neuron_release_read": {},
                                "prefixbench_neuron_release": "2.31.1"}).release == "2.31.1"
    assert releases.release_of("2.32.0").release == "2.32.0"
    with pytest.raises(releases.ReleaseError, match="is auto"):
        releases.for_settings({})


def test_newest_installable_and_what_is_unknown() -> None:
    rels = releases.load_all()
    with pytest.raises(releases.ReleaseError) as err:
        releases.newest([])
    assert str(err.value) == "no Neuron SDK release manifest is known"
    old, new = releases.load_release("2.31.1"), releases.load_release("2.32.0")
    assert releases.newest([new, old]) is new and releases.newest([old, new]) is new
    # 2.33.0 and 2.34.0 leave facts unknown (their manifests' unknown: sections).
    assert [r.release for r in releases.installable(rels)] == [
        "2.31.0", "2.31.0-vllm-beta", "2.31.1", "2.32.0"]
    from dataclasses import replace  # noqa: PLC0415

    partial = replace(new, apt_packages={"aws-neuronx-dkms": None, "aws-neuronx-tools": "1"},
                      pip_packages={"nki": None}, vllm=None,
                      unknown_facts={"server.library_path": "x", "a.b": "y"})
    assert partial.unknown() == ["apt:aws-neuronx-dkms", "pip:nki", "pip:vllm", "a.b",
                                 "server.library_path"]
    assert partial.known_apt() == {"aws-neuronx-tools": "1"}
    with pytest.raises(releases.ReleaseError) as err:
        partial.apt_pins()
    assert str(err.value) == (
        "Neuron SDK 2.32.0: versions unknown for apt:aws-neuronx-dkms, pip:nki, pip:vllm, "
        "a.b, server.library_path; fill them in 2.32.0.yml before installing this release")
    assert replace(new, python_supported=()).python_refusal("2.7") is None
    assert replace(new, title="", date="").label() == "2.32.0 (2.32.0, undated)"
    # Ordered by AWS's version, then date: a labelled set of a version after its plain one.
    assert new.order == ((2, 32, 0), "2026-08-17")
    assert replace(new, version="").order == ((2, 32, 0), "2026-08-17")


def test_a_segment_size_outside_the_releases_list_is_one_line() -> None:
    assert releases.segment_refusal("kv_segment_size_buckets", [1024], [512, 1024],
                                    "Neuron 2.32.0") == ""
    assert releases.segment_refusal("kv_segment_size_buckets", [768, 1024, 8192],
                                    [512, 1024], "Neuron 2.32.0") == (
        "kv_segment_size_buckets [768, 8192] not supported on Neuron 2.32.0: use one of "
        "[512], [1024] (prefix_caching.segment_sizes in prefixbench/data/neuron_releases/)")
    a = replace_sizes("2.31.1", (1024,))
    b = replace_sizes("2.32.0", (2048, 512))
    assert releases.segment_sizes([a, b]) == (512, 1024, 2048)
    assert releases.segment_sizes([]) == ()


def replace_sizes(release: str, sizes: tuple[int, ...]) -> releases.Release:
    from dataclasses import replace  # noqa: PLC0415

    return replace(releases.load_release(release), segment_sizes=sizes)


def test_what_a_manifest_leaves_out_is_empty() -> None:
    data = _manifest("2.32.0")
    for key in ("python", "dlami", "os", "sources", "notes", "provenance", "compile_key",
                "title"):
        data.pop(key, None)
    rel = releases.parse_release(data, "2.32.0.yml")
    assert rel.title == "" and rel.label() == "2.32.0 (2.32.0, 2026-08-17)"
    read = releases.parse_release({**data, "provenance": {"vllm": "read from the host"}})
    assert read.provenance == {"vllm": "read from the host"}
    assert (rel.python_supported, rel.python_source) == ((), "")
    assert (rel.dlami, rel.os_support, rel.sources, rel.notes) == ({}, {}, (), "")
    assert (rel.compile_distributions, rel.compile_cache_dir) == ((), "")
    # Every segment size some known release supports: the manifests' own lists.
    sizes = {v for p in releases.RELEASES_DIR.glob("2.*.yml")
             for v in (yaml.safe_load(p.read_text()).get("prefix_caching") or {}).get(
                 "segment_sizes") or []}
    assert releases.segment_sizes() == tuple(sorted(sizes))
    assert releases.available_releases() == [
        "2.31.0", "2.31.0-vllm-beta", "2.31.1", "2.32.0", "2.33.0", "2.33.1", "2.34.0"]


def test_a_broken_release_read_from_the_host_is_named_as_such() -> None:
    with pytest.raises(releases.ReleaseError) as err:
        releases.for_settings({"neuron_release_read": {"schema": 1}})
    assert str(err.value) == "the release read from the host: schema must be 2, not 1"


def test_a_labelled_release_is_told_its_version_without_the_label() -> None:
    data = _manifest("2.31.0-vllm-beta")
    data["version"] = "2.31.1"
    with pytest.raises(releases.ReleaseError) as err:
        releases.parse_release(data, "x.yml")
    assert str(err.value) == ('x.yml: version must be AWS\'s SDK version the id starts with '
                              '("2.31.0")')


def test_the_compile_route_environment_is_the_manifests() -> None:
    data = _manifest("2.33.0")
    rel = releases.parse_release(data, "2.33.0.yml")
    assert rel.compile_route_environment == data["compile_route"]["environment"]
    assert rel.compile_route_environment  # 2.33.0 names its native route


def test_an_invalid_pip_package_name_is_refused_with_where_it_is() -> None:
    # A name pip would not accept (PEP 508: letters, digits, ".", "_", "-"), with its
    # origin given so the earlier provenance check lets it through.
    data = _manifest("2.32.0")
    data["pip"]["packages"]["Bad Name!"] = "1.0"
    data["pip"]["origin"]["Bad Name!"] = "a page"
    with pytest.raises(releases.ReleaseError) as err:
        releases.parse_release(data, "x.yml")
    assert str(err.value) == "x.yml: pip.packages: invalid package name 'Bad Name!'"
