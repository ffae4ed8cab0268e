"""hosts.doctor_probe run in this process, check by check (test_doctor runs the same file
as the host does, as a script; these reach each branch and each line it prints)."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
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


def test_the_open_files_limit_is_the_hard_one(monkeypatch: pytest.MonkeyPatch) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert probe._check_nofile({"nofile": 1}) == (True, f"soft {soft}, hard {hard}")
    # The limits a unit might get, whatever this process's own are (where the hard limit
    # is unlimited, a test on the real one never reached the failure).
    monkeypatch.setattr(probe.resource, "getrlimit", lambda which: (1024, 16384))
    assert probe._check_nofile({"nofile": 65536}) == (
        False, "open-files limit 16384, the server needs 65536")
    assert probe._check_nofile({"nofile": 16384}) == (True, "soft 1024, hard 16384")
    assert probe._check_nofile({}) == (True, "soft 1024, hard 16384")
    unlimited = (1024, resource.RLIM_INFINITY)
    monkeypatch.setattr(probe.resource, "getrlimit", lambda which: unlimited)
    assert probe._check_nofile({"nofile": 65536})[0]


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


def _sysfs(tmp_path: Path, devices: dict[str, str]) -> Path:
    """/sys/class/infiniband as the kernel lays it out: <dev>/device/driver links to a
    directory named after the driver ("efa" for drivers/infiniband/hw/efa)."""
    root = tmp_path / "infiniband"
    root.mkdir(parents=True)
    for name, driver in devices.items():
        dev = tmp_path / "devices" / name
        dev.mkdir(parents=True)
        if driver:
            target = tmp_path / "drivers" / driver
            target.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(target)
        (root / name).mkdir()
        (root / name / "device").symlink_to(dev)
    return root


def test_efa_is_a_device_bound_to_the_efa_driver_or_the_units_workaround(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS: without EFA the server fails to start unless NEURON_SKIP_EFA_AFFINITY=1
    (deploy/environments/quickstart-deploy-dlc.rst at v2.31.1 and v2.32.0)."""
    monkeypatch.delenv("NEURON_SKIP_EFA_AFFINITY", raising=False)
    assert probe._check_efa({}) == (True, "no EFA needed")
    found = _sysfs(tmp_path / "a", {"rdmap1": "efa", "mlx5_0": "mlx5_core", "rdmap0": "efa"})
    assert probe._check_efa({"efa_dir": str(found)}) == (True,
                                                         "2 EFA device(s): rdmap0, rdmap1")
    bare = _sysfs(tmp_path / "b", {"mlx5_0": "mlx5_core", "unbound": ""})
    fails = (False, f"no EFA device under {bare} and the unit does not set "
                    "NEURON_SKIP_EFA_AFFINITY=1 (NEURON_SKIP_EFA_AFFINITY='{}'): the server "
                    "fails to start")
    assert probe._check_efa({"efa_dir": str(bare)}) == (fails[0], fails[1].format(""))
    monkeypatch.setenv("NEURON_SKIP_EFA_AFFINITY", "0")
    assert probe._check_efa({"efa_dir": str(bare)}) == (fails[0], fails[1].format("0"))
    monkeypatch.setenv("NEURON_SKIP_EFA_AFFINITY", "1")
    assert probe._check_efa({"efa_dir": str(bare)}) == (
        True, f"no EFA device under {bare}; the unit sets NEURON_SKIP_EFA_AFFINITY=1")
    absent = tmp_path / "none"
    assert probe._check_efa({"efa_dir": str(absent)}) == (
        True, f"no EFA device under {absent}; the unit sets NEURON_SKIP_EFA_AFFINITY=1")


@pytest.fixture(scope="module")
def libnrt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding libnrt.so.1 built from tests/fixtures/libnrt_double.c."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the libnrt double")
    lib = tmp_path_factory.mktemp("nrt") / "libnrt.so.1"
    source = Path(__file__).resolve().parents[1] / "fixtures" / "libnrt_double.c"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib.parent


def test_the_neuron_runtime_starts_through_the_library_path(
        monkeypatch: pytest.MonkeyPatch, libnrt: Path) -> None:
    """AWS's libnrt skeleton (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW = 1, "", "") then
    nrt_close) against the libnrt double; a failing nrt_init named by its NRT_STATUS."""
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    monkeypatch.delenv("LIBNRT_DOUBLE_STATUS", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libnrt))
    neuron = {"runtime": "neuron"}
    assert probe._check_runtime(neuron) == (True, "nrt_init and nrt_close on one NeuronCore")
    monkeypatch.setenv("LIBNRT_DOUBLE_STATUS", "9")
    assert probe._check_runtime(neuron) == (
        False, "exit 3: libnrt double: framework 1, NEURON_RT_NUM_CORES=1 | nrt_init "
               "returned NRT status 9 (NRT_LOAD_NOT_ENOUGH_NC)")
    monkeypatch.setenv("LIBNRT_DOUBLE_STATUS", "4")
    assert probe._check_runtime(neuron)[1].endswith("NRT status 4 (NRT_RESOURCE)")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    ok, detail = probe._check_runtime(neuron)
    assert not ok and detail.startswith(
        "exit 2: libnrt not loadable with LD_LIBRARY_PATH=/nonexistent: libnrt.so")


class _Run:
    """subprocess.run's double: records the call, returns or raises what it is given."""

    def __init__(self, result: object) -> None:
        self.result = result
        self.calls: list[tuple[list[str], dict[str, object]]] = []

    def __call__(self, args: list[str], **kwargs: object) -> object:
        self.calls.append((args, kwargs))
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def test_the_cpu_runtime_and_the_runtimes_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    done = _Run(subprocess.CompletedProcess([], 0, "loading\ntorch 2.9.0 and vLLM's cpu "
                                            "platform\n", ""))
    monkeypatch.setattr(probe.subprocess, "run", done)
    assert probe._check_runtime({"runtime": "cpu"}) == (
        True, "torch 2.9.0 and vLLM's cpu platform")
    args, kwargs = done.calls[0]
    assert args == [sys.executable, "-c", probe.CPU_RUNTIME]
    assert kwargs["timeout"] == 300 and kwargs["check"] is False
    assert kwargs["capture_output"] is True and kwargs["text"] is True
    monkeypatch.setattr(probe.subprocess, "run",
                        _Run(subprocess.CompletedProcess([], 0, "  \n", "")))
    assert probe._check_runtime({"runtime": "cpu"}) == (True, "ok")
    # A failure without stderr: the last three lines of stdout.
    monkeypatch.setattr(probe.subprocess, "run", _Run(subprocess.CompletedProcess(
        [], 1, "a\nb\nc\nd\n", "")))
    assert probe._check_runtime({"runtime": "cpu"}) == (False, "exit 1: b | c | d")
    # Only the last 500 characters of a long failure.
    monkeypatch.setattr(probe.subprocess, "run", _Run(subprocess.CompletedProcess(
        [], 1, "", "x" * 400 + "y" * 200)))
    assert probe._check_runtime({"runtime": "cpu"}) == (False,
                                                        "exit 1: " + "x" * 300 + "y" * 200)
    slow = _Run(subprocess.TimeoutExpired(["python"], 7))
    monkeypatch.setattr(probe.subprocess, "run", slow)
    assert probe._check_runtime({"runtime": "neuron", "runtime_timeout": 7}) == (
        False, "the runtime did not start within 7 s")
    assert slow.calls[0][0][2] == probe.NEURON_RUNTIME and slow.calls[0][1]["timeout"] == 7


def test_a_module_without_a_version_and_a_long_import_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "long_failure_x.py").write_text(f"raise RuntimeError({'e' * 300!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert probe._check_imports({"imports": ["long_failure_x"]}) == (
        False, "import long_failure_x: RuntimeError: " + "e" * 200)
    assert probe._check_imports({"imports": ["os", "json"]}) == (
        True, f"os, json {json.__version__}")


def test_without_path_the_compiler_message_shows_an_empty_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATH")
    assert probe._check_compiler({"compiler": "no-such-compiler-x"}) == (
        False, "no-such-compiler-x is not on the unit's PATH ()")


def test_without_a_cache_dir_nothing_is_written_and_the_check_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert probe._check_cache({}) == (False, "no cache directory to check (cache_dir is "
                                             "empty)")
    assert list(tmp_path.iterdir()) == []


class _Disk:
    def __init__(self, free: int) -> None:
        self.free = free


def test_the_model_check_in_gib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with (model / "w.safetensors").open("wb") as f:  # 3 GiB, sparse
        f.truncate(3 * 2**30)
    assert probe._check_model({"model_dir": str(model)}) == (
        True, f"{model}: 1 weight files, 3.00 GiB")
    absent = tmp_path / "x" / "y"
    monkeypatch.setattr(probe.shutil, "disk_usage", lambda path: _Disk(5 * 2**29))
    assert probe._check_model({"model_dir": str(absent), "model_bytes": 3 * 2**30}) == (
        False, f"{absent} absent and only 2.5 GiB free on {tmp_path}: the model needs "
               "3.0 GiB; free space or move model_cache_dir")
    # Exactly the room needed is enough.
    assert probe._check_model({"model_dir": str(absent), "model_bytes": 5 * 2**29}) == (
        False, f"{absent} absent (2.5 GiB free on {tmp_path}, 2.5 GiB to download); the "
               "provision phase downloads it")
    assert probe._check_model({"model_dir": str(absent)}) == (
        False, f"{absent} absent (2.5 GiB free on {tmp_path}, the model's size is unknown "
               "(model_cache_checkpoint_gib)); the provision phase downloads it")
    assert probe._check_model({}) == (
        False, "/nonexistent absent (2.5 GiB free on /, the model's size is unknown "
               "(model_cache_checkpoint_gib)); the provision phase downloads it")


def test_neuron_ls_is_run_with_a_time_limit_and_its_failures_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "neuron-ls"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o644)  # not executable, for root too
    detail = probe._neuron_ls({"neuron_ls": str(tool)})
    assert detail == f"error: [Errno 13] Permission denied: '{tool}'"
    run = _Run(subprocess.CompletedProcess([], 1, "", "x" * 400 + "\n"))
    monkeypatch.setattr(probe.subprocess, "run", run)
    assert probe._neuron_ls({"neuron_ls": str(tool)}) == "error: " + "x" * 300
    assert run.calls[0][0] == [str(tool), "-j"] and run.calls[0][1]["timeout"] == 60
    monkeypatch.setattr(probe.subprocess, "run",
                        _Run(subprocess.TimeoutExpired([str(tool), "-j"], 60)))
    assert probe._neuron_ls({"neuron_ls": str(tool)}) == (
        f"error: Command '['{tool}', '-j']' timed out after 60 seconds")


def test_main_checks_efa_only_where_an_efa_directory_is_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEURON_SKIP_EFA_AFFINITY", raising=False)
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"only": ["efa"]}))
    assert probe.main(["probe", str(cfg)]) == 0
    assert capsys.readouterr().out == "PREFIXBENCH-DOCTOR {}\n"
    root = _sysfs(tmp_path / "s", {"rdmap0": "efa"})
    cfg.write_text(json.dumps({"only": ["efa"], "efa_dir": str(root)}))
    assert probe.main(["probe", str(cfg)]) == 0
    out = json.loads(capsys.readouterr().out.removeprefix("PREFIXBENCH-DOCTOR "))
    assert out == {"efa": {"ok": True, "detail": "1 EFA device(s): rdmap0"}}
