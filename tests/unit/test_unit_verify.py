"""The rendered vllm units pass ``systemd-analyze verify`` on the controller, Neuron too.

The integration test verifies the units deployed on a simulated (CPU) host; the Neuron
variant (trn2/trn3, DeviceAllow on the neuron device class, Neuron environment) is never
deployed there, so it is rendered here from the role's own template and verified offline.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest

from prefixbench.config import settings
from prefixbench.servers import server

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles" / "vllm_service" / "templates" / "vllm.service.j2"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")

VARIANTS: dict[str, dict[str, Any]] = {
    "neuron-trn2": {"prefixbench_platform": "neuron",
                    "prefixbench_instance_type": "trn2.48xlarge",
                    "vllm_service_model": "openai/gpt-oss-120b"},
    "neuron-trn3": {"prefixbench_platform": "neuron",
                    "prefixbench_instance_type": "trn3.48xlarge",
                    "vllm_service_model": "openai/gpt-oss-120b"},
    "cpu": {"prefixbench_platform": "cpu", "prefixbench_instance_type": "trn2.48xlarge",
            "vllm_service_model": "/opt/models/tiny-llama", "vllm_service_hf_overrides": {}},
}


def render_unit(values: dict[str, Any], configuration: str, vllm_executable: str) -> str:
    """The unit as the role's template task renders it (trim_blocks, as Ansible does)."""
    result = settings.validate({"prefixbench_neuron_release": "2.31.1", **values}, "h")
    assert result.ok, result.problems
    spec = server.unit_spec(result.settings, "baseline" if configuration == "baseline"
                            else "cached", vllm_executable)
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed", vllm_service_user="vllm",
        vllm_service_unit_dir="/etc/systemd/system", __vllm_service_spec=spec.as_dict())


@pytest.fixture
def vllm_executable(tmp_path: Path) -> str:
    """An executable at the ExecStart path, so verify checks the unit, not the install."""
    exe = tmp_path / "venv" / "bin" / "vllm"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("configuration", server.CONFIGURATIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_unit_verifies_cleanly(variant: str, configuration: str, vllm_executable: str,
                               tmp_path: Path) -> None:
    text = render_unit(VARIANTS[variant], configuration, vllm_executable)
    if variant.startswith("neuron"):
        assert "DevicePolicy=closed\nDeviceAllow=char-neuron rw\n" in text
        assert "PrivateDevices=" not in text
        assert "Environment=VLLM_NEURON_COMPILATION_TIMEOUT=1200\n" in text
        assert ("NEURON_RT_ALLOW_LEGACY_NEFF=1" in text) is (variant == "neuron-trn3")
        assert '--additional-config "{\\"neuron_config\\": ' in text
    else:
        assert "PrivateDevices=yes\n" in text and "DeviceAllow=" not in text
    unit = tmp_path / "units" / server.unit_name(configuration)
    unit.parent.mkdir()
    unit.write_text(text)
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    # verify exits 0 on warnings about unknown or malformed directives: stderr must be empty.
    assert (proc.returncode, proc.stderr) == (0, ""), f"{proc.stderr}\n{text}"


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
def test_verify_reports_a_malformed_directive(tmp_path: Path) -> None:
    # The check above can fail: a typo in a directive is reported on stderr, with rc 0.
    unit = tmp_path / "x.service"
    unit.write_text("[Service]\nExecStart=/bin/true\nDeviceAlow=char-neuron rw\n")
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run([SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert "DeviceAlow" in proc.stderr
