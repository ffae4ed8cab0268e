"""library/prefixbench_fingerprint_read.py: one round trip reads what the fingerprint is
made of, in the shapes the filter takes (the eight reads it replaced gave the same)."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
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


class ImdsDouble(http.server.BaseHTTPRequestHandler):
    """A test double of EC2's instance metadata service (IMDSv2): a token for a PUT to
    /latest/api/token, the instance type only for a GET that carries that token."""

    TOKEN = "token-of-the-double"  # noqa: S105 (a test double's, not a secret)
    instance_type = "trn2.48xlarge"

    def do_PUT(self) -> None:
        if (self.path != "/latest/api/token"
                or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")):
            self.send_error(400)
            return
        self._answer(self.TOKEN)

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != self.TOKEN:
            self.send_error(401)
        elif self.path != "/latest/meta-data/instance-type":
            self.send_error(404)
        else:
            self._answer(self.instance_type)

    def _answer(self, body: str) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def imds() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ImdsDouble)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _neuron_ls_double(tmp_path: Path, devices: list[dict[str, object]]) -> str:
    """A test double of neuron-ls: prints ``devices`` for -j."""
    path = tmp_path / "neuron-ls"
    path.write_text(f"#!/bin/sh\n[ \"$1\" = -j ] || exit 2\ncat <<'END'\n"
                    f"{json.dumps(devices)}\nEND\n")
    path.chmod(0o755)
    return str(path)


def _read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str], **args: object) -> dict[str, object]:
    record = tmp_path / "model.json"
    record.write_text("{}")
    out = run_module("prefixbench_fingerprint_read", {
        "python": sys.executable, "distributions": [], "model_record": str(record), **args},
        monkeypatch, capsys)
    assert not out.get("failed"), out
    return collect.fingerprint("h1", {"prefixbench_neuron_release": "2.31",
                                      "prefixbench_instance_type": "trn2.48xlarge",
                                      "prefixbench_platform": "neuron"}, out)


TRN2_DEVICE = {"neuron_device": 0, "nc_count": 4, "instance_type": "trn2.48xlarge"}


def test_the_host_reports_its_instance_type_devices_and_driver_file(
        tmp_path: Path, dpkg_query: None, imds: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    driver = tmp_path / "version"
    driver.write_text("2.25.4.0\n")
    ImdsDouble.instance_type = "trn2.48xlarge"
    listed = [{**TRN2_DEVICE, "neuron_device": i, "instance_type": "trn1.32xlarge"}
              for i in range(16)]
    fp = _read(tmp_path, monkeypatch, capsys, imds_url=imds,
               neuron_ls=_neuron_ls_double(tmp_path, listed),
               driver_files=[str(tmp_path / "absent"), str(driver)])
    # The metadata service wins over the instance type neuron-ls names.
    assert fp["observed_instance_type"] == "trn2.48xlarge"
    assert (fp["neuron_devices"], fp["neuron_cores"]) == (16, 64)
    assert fp["sources"] == {"instance_type": "inventory", "observed_instance_type": "imds",
                             "neuron_devices": "neuron-ls", "neuron_cores": "neuron-ls",
                             "neuron_driver": str(driver)}


def test_off_ec2_neuron_ls_names_the_instance_type(
        tmp_path: Path, dpkg_query: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fp = _read(tmp_path, monkeypatch, capsys, imds_url=_closed_port(),
               neuron_ls=_neuron_ls_double(tmp_path, [TRN2_DEVICE]))
    assert fp["observed_instance_type"] == "trn2.48xlarge"
    assert fp["sources"]["observed_instance_type"] == "neuron-ls"  # type: ignore[index]


def test_a_host_that_reports_nothing_has_no_observed_values(
        tmp_path: Path, dpkg_query: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fp = _read(tmp_path, monkeypatch, capsys, imds_url=_closed_port(),
               neuron_ls=str(tmp_path / "no-neuron-ls"))
    assert (fp["observed_instance_type"], fp["neuron_devices"], fp["neuron_cores"],
            fp["neuron_driver"]) == (None, None, None, None)
    assert fp["sources"] == {"instance_type": "inventory"}
