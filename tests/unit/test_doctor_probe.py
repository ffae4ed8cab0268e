"""hosts.doctor_probe run in this process, check by check (test_doctor runs the same file
as the host does, as a script; these reach each branch and each line it prints)."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import pytest

from prefixbench.hosts import doctor_probe as probe


def test_imports_and_distributions_are_named_with_their_versions() -> None:
    ok, detail = probe._check_imports({"imports": ["json"], "distributions": ["pytest"]})
    assert ok and detail.startswith(f"json {json.__version__}, pytest ")
    ok, detail = probe._check_imports({"imports": ["no_such_module_x"]})
    assert not ok
    assert detail == ("import no_such_module_x: ModuleNotFoundError: "
                      "No module named 'no_such_module_x'")
    ok, detail = probe._check_imports({"distributions": ["no-such-dist-x"]})
    assert (ok, detail) == (False, f"no-such-dist-x is not installed in {sys.prefix}")
    assert probe._check_imports({}) == (True, "")


def test_the_compiler_is_looked_up_on_the_units_path(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    tool = tmp_path / "neuronx-cc"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probe._check_compiler({"compiler": "neuronx-cc"}) == (True, str(tool))
    assert probe._check_compiler({"compiler": "g++"}) == (
        False, f"g++ is not on the unit's PATH ({tmp_path})")
    assert probe._check_compiler({}) == (False, f" is not on the unit's PATH ({tmp_path})")


def test_every_device_node_is_opened_read_write(tmp_path: Path) -> None:
    assert probe._check_devices({}) == (True, "no device needed")
    pattern = str(tmp_path / "neuron*")
    assert probe._check_devices({"devices": pattern}) == (
        False, f"no {pattern} visible to the service user")
    for i in range(3):
        (tmp_path / f"neuron{i}").write_text("")
    assert probe._check_devices({"devices": pattern}) == (True, "3 opened read-write")
    # A node nobody can open read-write, root included (a mode 0400 file root opens
    # anyway, so a test on one never failed where the tests run as root): a directory.
    (tmp_path / "neuron3").mkdir()
    assert probe._check_devices({"devices": pattern}) == (
        False, f"cannot open {tmp_path / 'neuron3'}: Is a directory")


def test_the_cache_check_writes_in_the_configured_root(tmp_path: Path) -> None:
    assert probe._check_cache({"cache_dir": str(tmp_path)}) == (True, f"{tmp_path} writable")
    assert list(tmp_path.iterdir()) == []  # the probe's file is gone
    missing = tmp_path / "absent"
    ok, detail = probe._check_cache({"cache_dir": str(missing)})
    assert not ok and detail.startswith(f"cannot write in {missing}: ")


def test_the_open_files_limit_is_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert probe._check_nofile({"nofile": 1}) == (True, f"soft {soft}, hard {hard}")
    if hard != resource.RLIM_INFINITY:
        assert probe._check_nofile({"nofile": hard + 1}) == (
            False, f"open-files limit {hard}, the server needs {hard + 1}")
        assert probe._check_nofile({"nofile": hard})[0]


def test_the_model_is_its_config_and_weights(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert probe._check_model({"model_dir": str(model)}) == (
        False, f"{model} has config.json but no *.safetensors")
    (model / "a.safetensors").write_bytes(b"\0" * 2**20)
    (model / "b.safetensors").write_bytes(b"\0" * 2**20)
    assert probe._check_model({"model_dir": str(model)}) == (
        True, f"{model}: 2 weight files, 0.00 GiB")
    absent = tmp_path / "x" / "y"
    ok, detail = probe._check_model({"model_dir": str(absent), "model_bytes": 2**30})
    assert not ok
    assert detail.startswith(f"{absent} absent (")
    assert detail.endswith(f"GiB free on {tmp_path}, 1.0 GiB to download); "
                           "the provision phase downloads it")
    ok, detail = probe._check_model({"model_dir": str(absent)})
    assert "the model's size is unknown (model_cache_checkpoint_gib)" in detail


def test_the_vocabulary_is_a_directory_with_a_file(tmp_path: Path) -> None:
    assert probe._check_vocab({}) == (True, "the model needs no separate vocabulary")
    assert probe._check_vocab({"vocab_dir": str(tmp_path)}) == (
        False, f"no vocabulary file in {tmp_path}")
    (tmp_path / "sub").mkdir()
    assert not probe._check_vocab({"vocab_dir": str(tmp_path)})[0]  # a directory is not one
    (tmp_path / "o200k_base.tiktoken").write_text("x")
    assert probe._check_vocab({"vocab_dir": str(tmp_path)}) == (True, f"{tmp_path}: 1 file(s)")
    ok, detail = probe._check_vocab({"vocab_dir": str(tmp_path / "absent")})
    assert not ok and detail.startswith(f"cannot read {tmp_path / 'absent'}: ")


def test_no_runtime_is_started_when_none_is_asked() -> None:
    assert probe._check_runtime({}) == (True, "no runtime to start")


def test_main_runs_the_checks_asked_and_prints_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"only": ["cache", "vocabulary"], "cache_dir": str(tmp_path)}))
    assert probe.main(["probe", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PREFIXBENCH-DOCTOR ") and out.count("\n") == 1
    result = json.loads(out.removeprefix("PREFIXBENCH-DOCTOR "))
    assert result == {"cache": {"ok": True, "detail": f"{tmp_path} writable"},
                      "vocabulary": {"ok": True,
                                     "detail": "the model needs no separate vocabulary"}}
    # A check that crashes is a failed check, named by its exception.
    cfg.write_text(json.dumps({"only": ["open_files", "devices"], "nofile": "many",
                               "devices": "", "neuron_ls": str(tmp_path / "absent")}))
    assert probe.main(["probe", str(cfg)]) == 0
    result = json.loads(capsys.readouterr().out.removeprefix("PREFIXBENCH-DOCTOR "))
    assert result["open_files"] == {
        "ok": False, "detail": "ValueError: invalid literal for int() with base 10: 'many'"}
    assert result["devices"]["ok"] and result["neuron_ls"] == ""


def test_neuron_ls_output_or_its_error(tmp_path: Path) -> None:
    tool = tmp_path / "neuron-ls"
    tool.write_text('#!/bin/sh\n[ "$1" = -j ] && echo "[]" && exit 0\necho bad >&2\nexit 1\n')
    tool.chmod(0o755)
    assert probe._neuron_ls({"neuron_ls": str(tool)}) == "[]\n"
    tool.write_text("#!/bin/sh\necho 'no device' >&2\nexit 1\n")
    assert probe._neuron_ls({"neuron_ls": str(tool)}) == "error: no device"
    assert probe._neuron_ls({}) == ""
