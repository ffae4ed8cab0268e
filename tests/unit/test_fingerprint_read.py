"""library/prefixbench_fingerprint_read.py: one round trip reads what the fingerprint is
made of, in the shapes the filter takes (the eight reads it replaced gave the same)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from module_runner import run_module

from prefixbench.hosts import collect


@pytest.fixture
def dpkg_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test double of dpkg-query: two Neuron packages installed, one removed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = tmp_path / "listing"
    listing.write_text("aws-neuronx-dkms\t2.25.4.0\tinstall ok installed\n"
                       "aws-neuronx-tools\t2.27.33.0\thold ok installed\n"
                       "aws-neuronx-collectives\t2.29.0.0\tdeinstall ok config-files\n")
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\ncat {listing}\n")
    (bin_dir / "dpkg-query").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_one_read_gives_what_the_fingerprint_needs(
        tmp_path: Path, dpkg_query: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    unit = tmp_path / "vllm-cached.service"
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    driver = tmp_path / "driver-version"
    driver.write_text("2.25.4.0\n")
    record = tmp_path / "model.json"
    record.write_text(json.dumps({"source": "url", "revision": "sha256:abc"}))
    out = run_module("prefixbench_fingerprint_read", {
        "python": sys.executable, "distributions": ["pytest", "no-such-distribution"],
        "driver_files": [str(tmp_path / "absent"), str(driver)],
        "units": [str(unit), str(tmp_path / "vllm-baseline.service")],
        "model_record": str(record)}, monkeypatch, capsys)
    assert not out.get("failed"), out
    assert json.loads(out["venv_versions"]) == {"pytest": pytest.__version__,
                                               "no-such-distribution": None}
    assert set(out["packages"]) == {"aws-neuronx-dkms", "aws-neuronx-tools"}
    assert out["facts"]["kernel"] == os.uname().release
    fp = collect.fingerprint("h1", {"prefixbench_neuron_release": "2.31",
                                    "prefixbench_instance_type": "trn2.48xlarge",
                                    "prefixbench_platform": "neuron"}, out)
    assert fp["neuron_packages"] == {"aws-neuronx-dkms": "2.25.4.0",
                                     "aws-neuronx-tools": "2.27.33.0"}
    assert fp["neuron_driver"] == "2.25.4.0"
    assert fp["units"] == {
        "vllm-cached.service": hashlib.sha256(unit.read_bytes()).hexdigest()}
    assert fp["model"] == {"source": "url", "revision": "sha256:abc"}
