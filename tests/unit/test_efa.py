"""EFA read from the host: the module, the host's settings, the units, the doctor, the plan.

The expected variable and value are AWS's: "If EFA (Elastic Fabric Adapter) is not
installed on your host instance, the server will fail to start. To work around this,
prepend NEURON_SKIP_EFA_AFFINITY=1 to the vllm serve command" (aws-neuron/aws-neuron-sdk
deploy/environments/quickstart-deploy-dlc.rst at v2.31.1 and v2.32.0).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from module_runner import run_module

from prefixbench.config import plan, settings
from prefixbench.hosts import doctor
from prefixbench.servers import server

ROOT = Path(__file__).resolve().parents[2]


def _host_efa() -> Any:
    spec = importlib.util.spec_from_file_location(
        "prefixbench_filters_efa", ROOT / "plugins" / "filter" / "prefixbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()["prefixbench_host_efa"]

AWS_LINE = "NEURON_SKIP_EFA_AFFINITY=1"


def sysfs(tmp_path: Path, devices: dict[str, str]) -> Path:
    """A /sys/class/infiniband double: each device's device/driver links to a driver
    directory named as the kernel names it (drivers/infiniband/hw/efa registers "efa")."""
    root = tmp_path / "class" / "infiniband"
    root.mkdir(parents=True)
    for name, driver in devices.items():
        dev = tmp_path / "devices" / name
        dev.mkdir(parents=True)
        if driver:
            target = tmp_path / "bus" / "pci" / "drivers" / driver
            target.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(target)
        (root / name).mkdir()
        (root / name / "device").symlink_to(dev)
    return root


def valid(**overrides: Any) -> dict[str, Any]:
    result = settings.validate({"prefixbench_neuron_release": "2.32.0",
                                "prefixbench_instance_type": "trn2.3xlarge",
                                "vllm_service_model": "openai/gpt-oss-20b",
                                "vllm_service_tensor_parallel_size": 4, **overrides},
                               host="h")
    assert result.ok, result.problems
    return result.settings


def test_the_module_reads_each_device_and_its_driver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = sysfs(tmp_path, {"rdmap16s27": "efa", "mlx5_0": "mlx5_core", "stray": ""})
    out = run_module("prefixbench_host_efa", {"sysfs_dir": str(root)}, monkeypatch, capsys)
    assert out["drivers"] == {"mlx5_0": "mlx5_core", "rdmap16s27": "efa", "stray": ""}
    assert out["changed"] is False
    gone = run_module("prefixbench_host_efa", {"sysfs_dir": str(tmp_path / "absent")},
                      monkeypatch, capsys)
    assert gone["drivers"] == {}


def test_the_host_read_decides_the_setting_and_says_why() -> None:
    s = valid()
    assert s["vllm_service_efa"] == "auto"
    host_efa = _host_efa()
    without = host_efa(s, {"drivers": {"mlx5_0": "mlx5_core"}})
    assert without["settings"] == {"vllm_service_efa": "absent"}
    assert AWS_LINE in without["note"] and "efa driver" in without["note"]
    with_efa = host_efa(s, {"drivers": {"rdmap16s27": "efa"}})
    assert with_efa["settings"] == {"vllm_service_efa": "present"}
    assert "rdmap16s27" in with_efa["note"] and AWS_LINE not in with_efa["note"]
    # A named value is the inventory's: nothing read replaces it.
    named = valid(vllm_service_efa="present")
    assert host_efa(named, {"drivers": {}})["settings"] == {}


@pytest.mark.parametrize(("efa", "skips"), [("absent", True), ("present", False),
                                            ("auto", False)])
def test_only_a_host_without_efa_gets_the_variable_in_its_units(efa: str, skips: bool
                                                                ) -> None:
    s = valid(vllm_service_efa=efa)
    for configuration in server.CONFIGURATIONS:
        spec = server.unit_spec(s, configuration, "/opt/venv/bin/vllm")
        assert (AWS_LINE in spec.environment) is skips, spec.environment
    # Off Neuron nothing: the variable is the Neuron runtime's.
    cpu = valid(vllm_service_efa=efa, prefixbench_platform="cpu",
                prefixbench_instance_type="trn2sim.48xlarge")
    assert AWS_LINE not in server.unit_spec(cpu, "cached", "/v/bin/vllm").environment


def test_the_plan_says_why_before_any_host_is_read() -> None:
    lines = plan.render([plan.host_plan("h", valid())])
    efa_lines = [line for line in lines if "EFA" in line]
    assert len(efa_lines) == 1 and AWS_LINE in efa_lines[0]
    assert "read from the host" in efa_lines[0]
    cpu = valid(prefixbench_platform="cpu", prefixbench_instance_type="trn2sim.48xlarge")
    assert not [line for line in plan.render([plan.host_plan("h", cpu)]) if "EFA" in line]


def run_probe(tmp_path: Path, efa_dir: str, env: dict[str, str]) -> dict[str, Any]:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"only": ["efa"], "efa_dir": efa_dir}))
    base = {k: v for k, v in os.environ.items() if k != "NEURON_SKIP_EFA_AFFINITY"}
    proc = subprocess.run([sys.executable, str(doctor.PROBE_FILE), str(cfg)],
                          capture_output=True, text=True, check=True, env={**base, **env})
    out: dict[str, Any] = json.loads(proc.stdout.split("PREFIXBENCH-DOCTOR ", 1)[1])
    return out["efa"]


def test_the_doctor_reads_efa_and_the_units_workaround(tmp_path: Path) -> None:
    bare = str(sysfs(tmp_path / "bare", {}))
    failed = run_probe(tmp_path, bare, {})
    assert not failed["ok"] and "fails to start" in failed["detail"]
    assert run_probe(tmp_path, bare, {"NEURON_SKIP_EFA_AFFINITY": "1"})["ok"]
    assert not run_probe(tmp_path, str(tmp_path / "none"), {})["ok"]
    efa = str(sysfs(tmp_path / "efa", {"rdmap16s27": "efa"}))
    found = run_probe(tmp_path, efa, {})
    assert found["ok"] and found["detail"] == "1 EFA device(s): rdmap16s27"
    # The doctor runs it on Neuron with the unit's own environment, which carries the
    # variable where the host's read said absent.
    s = valid(vllm_service_efa="absent")
    p = doctor.plan(s, "/opt/venv/bin/vllm")
    assert p["config"]["efa_dir"] == "/sys/class/infiniband"
    assert f"Environment={AWS_LINE}" in p["properties"]
    cpu = doctor.plan(valid(prefixbench_platform="cpu",
                            prefixbench_instance_type="trn2sim.48xlarge"), "/v/bin/vllm")
    assert cpu["config"]["efa_dir"] == ""
