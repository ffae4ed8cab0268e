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
    s = settings.validate({"prefixbench_instance_type": "trn3.48xlarge",
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
    s = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                           "vllm_service_model": "/m"}, "h").settings
    fp = fingerprint("h", s, {"venv_versions": "not json", "driver": [{"failed": True}]})
    assert fp["neuron_driver"] is None
    assert fp["vllm_version"] is None
    assert fp["neuron_packages"] == {}
