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

from prefixbench_sim.pip_index import build_shim_wheel  # noqa: E402


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


def test_a_converged_venv_is_answered_from_its_stamp_until_anything_changes(
        tmp_path: Path, wheelhouse: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess  # noqa: PLC0415

    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("vllm==0.21.0\n")
    args = {"venv": str(venv), "requirements": ["torch-neuronx==2.11.0.2.16.1"],
            "requirements_file": str(reqs),
            "pip_args": ["--no-index", "--find-links", str(wheelhouse)]}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "--no-index", "--find-links",
                    str(wheelhouse), "-r", str(reqs), "torch-neuronx==2.11.0.2.16.1"],
                   check=True)

    def ask(check: bool = False, **more: object) -> dict[str, object]:
        return module_runner.run_module("prefixbench_pip_resolve", {**args, **more},
                                        monkeypatch, capsys, check=check,
                                        utils=("prefixbench_pip",))

    # Check mode asks pip and leaves no stamp; a real dry run leaves one.
    assert ask(check=True)["from_stamp"] is False
    assert not (venv / pipcheck.STAMP_NAME).exists()
    first = ask()
    assert first["resolvable"] is True and first["would_install"] == []
    assert first["from_stamp"] is False and (venv / pipcheck.STAMP_NAME).exists()
    assert ask()["from_stamp"] is True

    # Another pin, another requirement file, other pip options: pip runs again.
    changed = ask(requirements=["torch-neuronx==2.9.0.2.15.32035"])
    assert changed["from_stamp"] is False and changed["resolvable"] is False
    reqs.write_text("vllm==0.21.0\ntorch==2.11.0\n")
    assert ask()["from_stamp"] is False
    assert ask()["from_stamp"] is True
    assert ask(pip_args=["--no-index", "--find-links", str(wheelhouse), "--no-deps"]
               )["from_stamp"] is False
    assert ask()["from_stamp"] is False  # the stamp now answers the --no-deps question
    assert ask()["from_stamp"] is True

    # A distribution moved by hand: the venv no longer is what was stamped.
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "--no-index", "--find-links",
                    str(wheelhouse), "--no-deps", "torch==2.9.0"], check=True)
    moved = ask()
    assert moved["from_stamp"] is False and moved["would_install"] == ["torch==2.11.0"]


def test_the_stamp_keys() -> None:
    key = pipcheck.request_key(["a==1"], "", ["--no-index"], "py")
    assert key == pipcheck.request_key(["a==1"], "", ["--no-index"], "py")
    assert key != pipcheck.request_key(["a==1"], "b==2\n", ["--no-index"], "py")
    assert key != pipcheck.request_key(["a==1"], "", ["--no-index"], "py2")
    assert pipcheck.request_key(["a==1"], None, [], "py") is None
    installed = pipcheck.installed_key(["a-1.dist-info", "b-2.dist-info"])
    assert installed == pipcheck.installed_key(["b-2.dist-info", "a-1.dist-info"])
    saved = pipcheck.stamp(key or "", installed)
    assert pipcheck.stamp_answers(saved, key, installed)
    assert not pipcheck.stamp_answers(saved, None, installed)
    assert not pipcheck.stamp_answers(saved, key, pipcheck.installed_key(["a-1.dist-info"]))
    assert not pipcheck.stamp_answers({**saved, "format": 0}, key, installed)
    assert not pipcheck.stamp_answers("garbage", key, installed)


def _report(*dists: tuple[str, str]) -> dict[str, object]:
    return {"install": [{"metadata": {"name": n, "version": v}} for n, v in dists]}


def test_gpu_wheels_are_named_and_refused_in_one_line() -> None:
    # Names and versions vLLM 0.21.0's PyPI metadata requires (pip install --dry-run
    # --no-deps --report of vllm==0.21.0: torch==2.11.0, flashinfer-python==0.6.8.post1,
    # nvidia-cutlass-dsl==4.4.2, nvidia-cudnn-frontend), and the CUDA torch's own.
    report = _report(("vllm", "0.21.0"), ("torch", "2.11.0+cu128"),
                     ("flashinfer-python", "0.6.8.post1"), ("nvidia-cutlass-dsl", "4.4.2"),
                     ("nvidia_cublas_cu12", "12.8.4.1"), ("triton", "3.5.0"),
                     ("numpy", "2.2.6"), ("cuda-bindings", "12.9.4"))
    found = pipcheck.gpu_wheels(report)
    assert found == ["cuda-bindings==12.9.4", "flashinfer-python==0.6.8.post1",
                     "nvidia-cutlass-dsl==4.4.2", "nvidia_cublas_cu12==12.8.4.1",
                     "torch==2.11.0+cu128", "triton==3.5.0"]
    line = pipcheck.gpu_refusal(found)
    assert line.startswith("the pip set would install 6 CUDA/GPU distributions")
    assert "vllm_env_gpu_wheels: allow" in line and "\n" not in line
    # The CPU torch and the Neuron packages are not GPU wheels.
    assert pipcheck.gpu_wheels(_report(("torch", "2.11.0+cpu"), ("neuronx-cc", "2.26.6360.0"),
                                       ("libtorch-neuronx-lite", "2.11.0.1.0.696"))) == []
    assert pipcheck.gpu_refusal([]) == ""
