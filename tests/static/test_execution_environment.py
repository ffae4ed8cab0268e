"""The execution environment: ansible-builder creates its build context offline, with the
bundle's package and run-time dependencies at the controller's pins."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.strip().lower()] = version.strip()
    return out


def test_ee_pins_are_the_controllers() -> None:
    lock = _pins(ROOT / "requirements" / "controller.lock")
    ee = _pins(ROOT / "requirements" / "ee.txt")
    assert ee and all(lock.get(name) == version for name, version in ee.items()), (ee, lock)
    spec = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    deps = spec["dependencies"]
    for key, name in (("ansible_core", "ansible-core"), ("ansible_runner", "ansible-runner")):
        assert deps[key]["package_pip"] == f"{name}=={lock[name]}"


def test_ansible_builder_creates_the_build_context_offline(tmp_path: Path) -> None:
    builder = BIN / "ansible-builder"
    if not builder.exists():
        pytest.skip("ansible-builder is not installed (scripts/bootstrap installs it)")
    ctx = tmp_path / "context"
    proc = subprocess.run([str(builder), "create", "-f", "execution-environment.yml",
                           "-c", str(ctx), "--output-filename", "Containerfile"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
                               "no_proxy": "*", "NO_PROXY": "*"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (ctx / "Containerfile").read_text()
    assert "COPY _build/prefixbench /tmp/prefixbench" in containerfile
    assert "pip install --no-cache-dir --no-deps /tmp/prefixbench" in containerfile
    assert "ansible-core==2.21.5 ansible-runner==2.4.3" in containerfile
    pkg = ctx / "_build" / "prefixbench"
    assert (pkg / "pyproject.toml").is_file()
    assert (pkg / "src" / "prefixbench" / "__init__.py").is_file()
    assert (pkg / "src" / "prefixbench" / "data" / "neuron_releases" / "2.32.0.yml").is_file()
    assert _pins(ctx / "_build" / "requirements.txt") == _pins(ROOT / "requirements" / "ee.txt")
    # The package builds from the context alone (what the image's pip install does).
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(wheels), str(pkg)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.split("-")[0] == "prefixbench"
    # The development tools beside the package in src/ are not installed with it.
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "prefixbench/engines/schedsim.py" in names
    assert not [n for n in names if n.startswith(("prefixbench_sim", "prefixbench_perf"))]
    shutil.rmtree(ctx)
