"""The resolution check before a vLLM environment changes (prefixbench_pip_resolve).

pip really runs here, offline, on code-free wheels built for the test, with the shapes
of the real clash: vLLM 0.21.0 requires torch==2.11.0 while a torch-2.9 build of
torch-neuronx requires torch==2.9.0 (REFERENCE.md, read from PyPI's metadata).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import module_runner  # noqa: E402
import prefixbench_pip as pipcheck  # noqa: E402

from prefixbench.sim.pip_index import build_shim_wheel  # noqa: E402


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    build_shim_wheel(d, "vllm", "0.21.0", ["torch==2.11.0"], "test double")
    build_shim_wheel(d, "torch", "2.11.0", [], "test double")
    build_shim_wheel(d, "torch", "2.9.0", [], "test double")
    build_shim_wheel(d, "torch-neuronx", "2.9.0.2.15.32035", ["torch==2.9.0"], "test double")
    build_shim_wheel(d, "torch-neuronx", "2.11.0.2.16.1", ["torch==2.11.0"], "test double")
    return d


def resolve(tmp_path: Path, wheels: Path, requirements: list[str], *,
            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            extra: tuple[str, ...] = ()) -> dict[str, object]:
    # This machine's own pip configuration (constraints, local indexes) stays out.
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    return module_runner.run_module(
        "prefixbench_pip_resolve",
        {"venv": str(tmp_path / "absent-venv"), "python": sys.executable,
         "requirements": requirements,
         "pip_args": ["--no-index", "--find-links", str(wheels), *extra]},
        monkeypatch, capsys, utils=("prefixbench_pip",))


def test_a_clash_is_one_line_naming_both_requirements(
        tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = resolve(tmp_path, wheelhouse, ["vllm==0.21.0", "torch-neuronx==2.9.0.2.15.32035"],
                  monkeypatch=monkeypatch, capsys=capsys)
    assert out["failed"] is True and out["resolvable"] is False
    msg = str(out["msg"])
    assert "\n" not in msg
    assert "vllm 0.21.0 depends on torch==2.11.0" in msg
    assert "torch-neuronx 2.9.0.2.15.32035 depends on torch==2.9.0" in msg
    assert not (tmp_path / "absent-venv").exists()


def test_a_set_that_resolves_lists_what_would_be_installed(
        tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = resolve(tmp_path, wheelhouse, ["vllm==0.21.0", "torch-neuronx==2.11.0.2.16.1"],
                  monkeypatch=monkeypatch, capsys=capsys)
    assert out.get("failed") is not True, out
    assert sorted(out["would_install"]) == ["torch-neuronx==2.11.0.2.16.1", "torch==2.11.0",
                                            "vllm==0.21.0"]
    assert out["ran_in"] == "throwaway" and out["changed"] is False


def test_direct_pins_that_clash_under_no_deps(
        tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = resolve(tmp_path, wheelhouse, ["torch==2.11.0", "torch==2.9.0"],
                  monkeypatch=monkeypatch, capsys=capsys, extra=("--no-deps",))
    assert out["failed"] is True
    assert "torch==2.11.0" in str(out["msg"]) and "torch==2.9.0" in str(out["msg"])


def test_summaries_of_other_failures() -> None:
    assert pipcheck.summarize_failure(
        "ERROR: Could not find a version that satisfies the requirement nki==0.5.0 "
        "(from versions: none)\nERROR: No matching distribution found for nki==0.5.0\n"
    ) == ("pip: Could not find a version that satisfies the requirement nki==0.5.0 "
          "(from versions: none)")
    assert pipcheck.summarize_failure("") == "pip failed: no output"
