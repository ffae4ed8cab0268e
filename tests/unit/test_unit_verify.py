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
    "neuron-trn2-strict": {"prefixbench_platform": "neuron",
                           "prefixbench_instance_type": "trn2.48xlarge",
                           "vllm_service_model": "openai/gpt-oss-120b",
                           "vllm_service_sandbox": "strict"},
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
        # As AWS's container runs it, at every level (prefixbench.servers.sandbox).
        assert ("AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN\n"
                "LimitMEMLOCK=infinity\n") in text
        # 2.31.1's: AWS's 0.21 image at that tag sets no EFA directory.
        assert "Environment=LD_LIBRARY_PATH=/opt/aws/neuron/lib\n" in text
        assert ("DevicePolicy=closed\nDeviceAllow=char-neuron rw\n" in text) is (
            variant.endswith("strict"))
        assert "PrivateDevices=" not in text
        assert "Environment=VLLM_NEURON_COMPILATION_TIMEOUT=1200\n" in text
        assert ("NEURON_RT_ALLOW_LEGACY_NEFF=1" in text) is (variant == "neuron-trn3")
        assert '--additional-config "{\\"neuron_config\\": ' in text
    else:
        assert "PrivateDevices=yes\n" in text and "DeviceAllow=" not in text
        # A CPU server is granted nothing: no capability, no library path.
        assert "CapabilityBoundingSet=\n" in text and "Ambient" not in text
        assert "LD_LIBRARY_PATH" not in text and "LimitMEMLOCK" not in text
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


#: [Service] keys the doctor's transient unit leaves out, and why: how the server process
#: is started, restarted and stopped (the probe is a one-shot), and its RuntimeDirectory,
#: which systemd would create and remove under a running server.
NOT_IN_THE_DOCTOR = {"Type", "ExecStart", "Restart", "RestartSec", "TimeoutStopSec",
                     "KillMode", "RuntimeDirectory", "RuntimeDirectoryMode"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_doctor_runs_every_line_of_the_units_sandbox(variant: str) -> None:
    from prefixbench.hosts import doctor  # noqa: PLC0415

    text = render_unit(VARIANTS[variant], "cached", "/opt/venv/bin/vllm")
    service = text.split("[Service]\n", 1)[1].split("\n[Install]", 1)[0]
    lines = [x for x in service.splitlines() if x and not x.startswith("#")]
    values = {"vllm_service_user": "vllm", "prefixbench_neuron_release": "2.31.1",
              **VARIANTS[variant]}
    result = settings.validate(values, "h")
    plan = doctor.plan(result.settings, "/opt/venv/bin/vllm")
    ran = {p.replace("EnvironmentFile=-", "EnvironmentFile=", 1)
           for p in [*plan["properties"], *plan["directives"]]}
    missing = [x for x in lines if x.split("=", 1)[0] not in NOT_IN_THE_DOCTOR
               and x not in ran]
    assert missing == []
    assert any(x.startswith("LimitMEMLOCK=") for x in lines) is variant.startswith("neuron")
