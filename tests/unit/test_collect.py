"""A host's fingerprint from the raw facts the benchmark phase reads."""

from __future__ import annotations

import base64
import json

from prefixbench.config import settings
from prefixbench.hosts.collect import fingerprint
from prefixbench.hosts.fingerprint import Fingerprint


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_fingerprint_from_raw_facts() -> None:
    s = settings.validate({"prefixbench_neuron_release": "2.31.1",
                        "prefixbench_instance_type": "trn3.48xlarge",
                           "vllm_service_model": "/m"}, "h").settings
    raw = {
        "facts": {"distribution": "Ubuntu", "distribution_version": "24.04",
                  "kernel": "6.8.0"},
        "packages": {"aws-neuronx-runtime-lib": [{"version": "2.33.10.0-abc"}],
                     "aws-neuronx-dkms": [{"version": "2.29.0.0"}], "bash": [{"version": "5"}]},
        "venv_versions": json.dumps({"vllm": "0.21.0", "vllm-neuron": "0.21.0.1.0.0"}),
        "driver": [{"failed": False, "content": b64("2.29.0.0\n")}, {"failed": True}],
        "units": [{"stat": {"exists": True, "path": "/etc/systemd/system/vllm-baseline.service",
                            "checksum": "aa"}},
                  {"stat": {"exists": False}}],
        "model": [{"content": b64(json.dumps({"source": "hf", "revision": "main"}))}],
    }
    fp = fingerprint("h", s, raw)
    assert fp["family"] == "trn3"
    assert fp["os"] == "Ubuntu 24.04"
    assert fp["neuron_packages"] == {"aws-neuronx-dkms": "2.29.0.0",
                                     "aws-neuronx-runtime-lib": "2.33.10.0-abc"}
    assert fp["neuron_driver"] == "2.29.0.0"
    assert fp["vllm_neuron_version"] == "0.21.0.1.0.0"
    assert fp["units"] == {"vllm-baseline.service": "aa"}
    assert fp["model"] == {"source": "hf", "revision": "main"}
    assert Fingerprint.from_dict(fp).host == "h"


def test_missing_pieces_are_null_not_errors() -> None:
    s = settings.validate({"prefixbench_neuron_release": "2.31.1",
                        "prefixbench_instance_type": "trn2.48xlarge",
                           "vllm_service_model": "/m"}, "h").settings
    fp = fingerprint("h", s, {"venv_versions": "not json", "driver": [{"failed": True}]})
    assert fp["neuron_driver"] is None
    assert fp["vllm_version"] is None
    assert fp["neuron_packages"] == {}


def test_neuron_ls_counts_devices_and_cores_and_names_one_instance_type() -> None:
    from prefixbench.hosts.collect import NeuronLs, neuron_ls  # noqa: PLC0415

    dev = {"nc_count": 4, "instance_type": "trn2.48xlarge"}
    assert neuron_ls({"rc": 0, "stdout": json.dumps([dev, dev])}) == NeuronLs(
        devices=2, cores=8, instance_type="trn2.48xlarge")
    # Two names: no instance type; a device without a whole nc_count: no core count.
    assert neuron_ls({"rc": 0, "stdout": json.dumps(
        [dev, {"nc_count": "4", "instance_type": "trn1.32xlarge"}])}) == NeuronLs(devices=2)
    for failed in ({"rc": 1, "stdout": json.dumps([dev])}, {"rc": None, "stdout": ""},
                   {"rc": 0, "stdout": "not json"}, {"rc": 0, "stdout": '{"a": 1}'}, None):
        assert neuron_ls(failed) == NeuronLs()


def test_the_driver_file_is_recorded_beside_its_version() -> None:
    s = settings.validate({"prefixbench_neuron_release": "2.31.1",
                        "prefixbench_instance_type": "trn2.48xlarge",
                           "vllm_service_model": "/m"}, "h").settings
    fp = fingerprint("h", s, {"driver": [
        {"source": "/sys/module/neuron/version", "failed": True},
        {"source": "/var/lib/prefixbench-sim/neuron-driver-version",
         "content": b64("2.29.0.0\n")}]})
    assert fp["neuron_driver"] == "2.29.0.0"
    assert fp["sources"]["neuron_driver"] == "/var/lib/prefixbench-sim/neuron-driver-version"
    assert not Fingerprint.from_dict(fp).real_driver()
    fp = fingerprint("h", s, {"driver": [
        {"source": "/sys/module/neuron/version", "content": b64("2.29.0.0\n")}]})
    assert Fingerprint.from_dict(fp).real_driver()
    # Only metadata: the host's answer is recorded as coming from it.
    fp = fingerprint("h", s, {"imds": {"instance_type": "trn1.32xlarge"}})
    assert (fp["observed_instance_type"], fp["sources"]["observed_instance_type"]) == (
        "trn1.32xlarge", "imds")
