"""prefixbench doctor: the probe, the directive search, the plan and the screen."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_doctor as search  # noqa: E402

from prefixbench.config import settings  # noqa: E402
from prefixbench.frontend import cli  # noqa: E402
from prefixbench.hosts import doctor, instances  # noqa: E402
from prefixbench.servers import server  # noqa: E402


def probe(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """Run the real probe with this interpreter (no sandbox) on a config in tmp_path."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 1024)
    vocab = tmp_path / "vocab"
    vocab.mkdir(exist_ok=True)
    (vocab / "o200k_base.tiktoken").write_text("x")
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for i in range(2):
        (dev / f"neuron{i}").write_text("")
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    cfg = {"platform": "neuron", "imports": ["json"], "distributions": ["pytest"],
           "compiler": "sh", "devices": str(dev / "neuron*"), "neuron_ls": "",
           "cache_dir": str(cache), "nofile": 64, "model_dir": str(model),
           "vocab_dir": str(vocab), **overrides}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    proc = subprocess.run([sys.executable, str(doctor.PROBE_FILE), str(path)],
                          capture_output=True, text=True, check=True)
    result = search.parse_output(proc.returncode, proc.stdout, proc.stderr)
    assert not result.error
    return result.checks


def test_the_probe_passes_a_ready_host(tmp_path: Path) -> None:
    checks = probe(tmp_path)
    assert {n: c["ok"] for n, c in checks.items() if n != "neuron_ls"} == dict.fromkeys(
        ("imports", "compiler", "devices", "cache", "open_files", "model", "vocabulary",
         "runtime"), True)
    assert checks["devices"]["detail"] == "2 opened read-write"


@pytest.mark.parametrize(("override", "check", "detail"), [
    ({"imports": ["vllm_neuron_absent"]}, "imports", "import vllm_neuron_absent"),
    ({"distributions": ["libtorch-neuronx-lite"]}, "imports",
     "libtorch-neuronx-lite is not installed"),
    ({"compiler": "neuronx-cc-absent"}, "compiler", "is not on the unit's PATH"),
    ({"devices": "/nonexistent/neuron*"}, "devices", "no /nonexistent/neuron*"),
    ({"cache_dir": "/nonexistent/cache"}, "cache", "cannot write in /nonexistent/cache"),
    ({"nofile": 1 << 40}, "open_files", "the server needs"),
    ({"model_dir": "/nonexistent/model"}, "model", "absent"),
    ({"vocab_dir": "/nonexistent"}, "vocabulary", "cannot read /nonexistent"),
])
def test_each_probe_check_fails_on_its_own(tmp_path: Path, override: dict[str, Any],
                                           check: str, detail: str) -> None:
    checks = probe(tmp_path, **override)
    assert [n for n, c in checks.items() if n != "neuron_ls" and not c["ok"]] == [check]
    assert detail in checks[check]["detail"]


def test_an_empty_vocabulary_directory_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    checks = probe(tmp_path, vocab_dir=str(empty))
    assert not checks["vocabulary"]["ok"]
    assert checks["vocabulary"]["detail"].startswith("no vocabulary file")


class SandboxDouble:
    """Test double of the transient unit: a directive breaks some checks, the host
    others."""

    def __init__(self, breaks: dict[str, str], host_fails: Sequence[str] = ()) -> None:
        self.breaks = breaks  # {directive: check it breaks}
        self.host_fails = set(host_fails)
        self.calls: list[tuple[list[str], list[str] | None]] = []

    def __call__(self, properties: Sequence[str], only: Sequence[str] | None
                 ) -> search.Probe:
        self.calls.append((list(properties), None if only is None else list(only)))
        names = list(only) if only is not None else [*doctor.FIXES]
        broken = {c for d, c in self.breaks.items() if d in properties} | self.host_fails
        return search.Probe({n: {"ok": n not in broken, "detail": n} for n in names
                             if n != "neuron_ls"})


def test_a_failure_the_sandbox_causes_is_tied_to_its_directive() -> None:
    directives = ["ProtectSystem=strict", "DevicePolicy=closed", "IPAddressDeny=any"]
    double = SandboxDouble({"DevicePolicy=closed": "devices"}, host_fails=["compiler", "model"])
    result = search.diagnose(["User=vllm"], directives, double)
    assert result["causes"] == {"devices": "DevicePolicy=closed", "compiler": "host"}
    assert not result["checks"]["devices"]["ok"]
    # full sandbox, again, no sandbox, one directive at a time until devices is explained,
    # then the full sandbox less that directive
    assert [c[0] for c in double.calls] == [
        ["User=vllm", *directives], ["User=vllm", *directives], ["User=vllm"],
        ["User=vllm", "ProtectSystem=strict"], ["User=vllm", "DevicePolicy=closed"],
        ["User=vllm", "ProtectSystem=strict", "IPAddressDeny=any"]]
    assert double.calls[1][1] == ["compiler", "devices"]
    assert double.calls[2][1] == ["compiler", "devices"]
    assert double.calls[5][1] == ["devices"]


def test_a_passing_host_costs_one_probe_run() -> None:
    double = SandboxDouble({})
    assert search.diagnose(["User=vllm"], ["ProtectSystem=strict"], double)["runs"] == 1


def test_probe_output_without_its_line_is_an_error() -> None:
    bad = search.parse_output(1, "", "Failed to determine user credentials: No such process")
    assert bad.checks == {} and "exit 1" in bad.error and "user credentials" in bad.error


def valid(**overrides: Any) -> dict[str, Any]:
    result = settings.validate({"prefixbench_neuron_release": "2.31.1",
                        "prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "openai/gpt-oss-120b", **overrides},
                               host="h")
    assert result.ok, result.problems
    return result.settings


def test_the_plan_is_the_server_units_own_sandbox() -> None:
    s = valid()
    plan = doctor.plan(s, "/opt/venv/bin/vllm")
    spec = server.unit_spec(s, "cached", "/opt/venv/bin/vllm")
    assert plan["directives"] == list(spec.hardening)
    assert "DeviceAllow=char-neuron rw" not in plan["directives"]
    strict = doctor.plan(valid(vllm_service_sandbox="strict"), "/opt/venv/bin/vllm")
    assert "DeviceAllow=char-neuron rw" in strict["directives"]
    assert "LimitNOFILE=65536" in plan["properties"]
    assert any(p.startswith("Environment=PATH=/opt/venv/bin:") for p in plan["properties"])
    assert plan["python"] == "/opt/venv/bin/python"
    assert plan["config"]["compiler"] == "neuronx-cc"
    assert plan["config"]["imports"][:2] == ["vllm", "vllm_neuron"]
    off = doctor.plan(valid(vllm_service_sandbox="off"), "/opt/venv/bin/vllm")
    assert off["directives"] == []
    cpu = doctor.plan(valid(prefixbench_platform="cpu", prefixbench_instance_type=
                            "trn2sim.48xlarge"), "/v/bin/vllm")
    assert cpu["config"]["compiler"] == "g++" and cpu["config"]["devices"] == ""
    # The limit checked is the one the unit asks for: AWS's 65536 on Neuron.
    assert plan["config"]["nofile"] == 65536 and cpu["config"]["nofile"] == 16384


def neuron_ls(devices: int, cores_each: int) -> str:
    return json.dumps([{"neuron_device": i, "nc_count": cores_each} for i in range(devices)])


def test_the_screen_has_a_line_per_check_and_names_the_directive() -> None:
    trn2 = instances.lookup("trn2.48xlarge")
    per = trn2.logical_cores() // trn2.devices
    ok = {n: {"ok": True, "detail": "fine"} for n in doctor.FIXES if n != "neuron_ls"}
    good = {"checks": {**ok, "neuron_ls": neuron_ls(trn2.devices, per)}, "causes": {},
            "runs": 1}
    bad = {"checks": {**ok, "devices": {"ok": False, "detail": "cannot open /dev/neuron0"},
                      "neuron_ls": neuron_ls(trn2.devices - 1, per)},
           "causes": {"devices": "DeviceAllow=char-neuron rw"}, "runs": 5,
           "directives": ["DevicePolicy=closed", "DeviceAllow=char-neuron rw"]}
    rep = doctor.report({"a": good, "b": bad, "c": {"error": "the service user vllm does "
                         "not exist yet: the deploy phase creates it"}},
                        {"a": "trn2.48xlarge", "b": "trn2.48xlarge", "c": "trn2.48xlarge"})
    text = rep["text"]
    assert rep["failed"] == 3
    assert "PASS  a" in text and "FAIL  b                devices" in text
    assert "the sandbox directive DeviceAllow=char-neuron rw breaks it: set " \
        "vllm_service_sandbox: aws (or off)" in text
    assert f"neuron-ls sees {trn2.devices - 1} Neuron devices" in text
    assert "FAIL  c                probe" in text
    assert text.splitlines()[-1].startswith("doctor: 3 host(s)")


def test_the_command_parses() -> None:
    args = cli.build_parser().parse_args(["doctor", "-i", "trn2_fleet", "--limit", "h1"])
    assert args.command == "doctor" and args.limit == "h1"
    assert cli.main(["doctor"], out=sys.stdout, err=sys.stderr) == 2


def test_the_variable_the_command_passes_is_accepted_by_preflight(tmp_path: Path) -> None:
    from prefixbench.frontend import cli_doctor  # noqa: PLC0415

    args = cli.build_parser().parse_args(["doctor", "-i", "trn2_fleet"])
    argv = cli_doctor.playbook_argv(args, tmp_path / "doctor.json", ROOT)
    assert argv[1] == "playbooks/doctor.yml"
    extra = json.loads(argv[-1])
    result = settings.validate({"prefixbench_neuron_release": "2.31.1",
                        "prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "openai/gpt-oss-120b", **extra}, host="h")
    assert result.ok, result.problems


def test_a_failure_no_single_directive_repeats_blames_the_sandbox() -> None:
    class Together(SandboxDouble):
        def __call__(self, properties: Sequence[str], only: Sequence[str] | None
                     ) -> search.Probe:
            both = {"ProtectSystem=strict", "ProtectHome=yes"} <= set(properties)
            self.breaks = {"ProtectSystem=strict": "cache"} if both else {}
            return super().__call__(properties, only)

    result = search.diagnose([], ["ProtectSystem=strict", "ProtectHome=yes"], Together({}))
    assert result["causes"] == {"cache": search.WHOLE_SANDBOX == doctor.WHOLE_SANDBOX
                                and doctor.WHOLE_SANDBOX}
    line = next(x for x in doctor.host_lines("h", result, "trn2.48xlarge")
                if x.check == "cache")
    assert not line.ok and line.fix == doctor.WHOLE_SANDBOX_FIX


class FlakyDouble(SandboxDouble):
    """Test double of a host whose check fails on some probe runs, whatever the sandbox."""

    def __init__(self, check: str, failing_runs: set[int]) -> None:
        super().__init__({})
        self.check, self.failing_runs = check, failing_runs

    def __call__(self, properties: Sequence[str], only: Sequence[str] | None
                 ) -> search.Probe:
        self.host_fails = {self.check} if len(self.calls) + 1 in self.failing_runs else set()
        return super().__call__(properties, only)


def test_a_failure_that_does_not_repeat_is_never_blamed_on_the_sandbox() -> None:
    directives = ["ProtectSystem=strict", "ProtectHome=yes"]
    result = search.diagnose(["User=vllm"], directives, FlakyDouble("runtime", {1}))
    assert result["causes"] == {"runtime": search.INTERMITTENT}
    assert search.INTERMITTENT == doctor.INTERMITTENT
    line = next(x for x in doctor.host_lines("h", result, "trn2.48xlarge")
                if x.check == "runtime")
    assert not line.ok and line.fix == doctor.INTERMITTENT_FIX
    assert "breaks it" not in line.fix and "vllm_service_sandbox" not in line.fix


def test_a_directive_is_named_only_when_relaxing_it_clears_the_failure() -> None:
    # Both directives break the check on their own: relaxing the first found still
    # fails under the second, so naming it would send the user to a fix that fails.
    directives = ["ProtectSystem=strict", "ProtectHome=yes"]
    double = SandboxDouble({"ProtectSystem=strict": "cache", "ProtectHome=yes": "cache"})
    result = search.diagnose([], directives, double)
    assert result["causes"] == {"cache": search.WHOLE_SANDBOX}


def test_the_screen_names_no_directive_the_probe_did_not_run_under() -> None:
    ok = {n: {"ok": True, "detail": "fine"} for n in doctor.FIXES if n != "neuron_ls"}
    for cause in ("host", "ProtectHome=yes"):
        result = {"checks": {**ok, "cache": {"ok": False, "detail": "cannot write"}},
                  "causes": {"cache": cause}, "directives": ["ProtectSystem=strict"]}
        line = next(x for x in doctor.host_lines("h", result, "trn2.48xlarge")
                    if x.check == "cache")
        assert line.fix == doctor.FIXES["cache"], cause


@pytest.fixture(scope="module")
def libnrt_double(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding libnrt.so.1 built from tests/fixtures/libnrt_double.c."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the libnrt double")
    lib = tmp_path_factory.mktemp("nrt") / "libnrt.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib),
                    str(ROOT / "tests" / "fixtures" / "libnrt_double.c")], check=True)
    return lib.parent


def runtime_check(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    cfg = tmp_path / "runtime.json"
    cfg.write_text(json.dumps({"runtime": "neuron", "only": ["runtime"]}))
    proc = subprocess.run([sys.executable, str(doctor.PROBE_FILE), str(cfg)],
                          capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin", **env})
    return dict(search.parse_output(0, proc.stdout, proc.stderr).checks["runtime"])


def test_the_runtime_check_opens_a_core_through_the_units_library_path(
        tmp_path: Path, libnrt_double: Path) -> None:
    ok = runtime_check(tmp_path, {"LD_LIBRARY_PATH": str(libnrt_double)})
    assert ok == {"ok": True, "detail": "nrt_init and nrt_close on one NeuronCore"}
    # Without the library path the unit grants, libnrt is not found: the check says so.
    lost = runtime_check(tmp_path, {"LD_LIBRARY_PATH": "/nonexistent"})
    assert not lost["ok"] and "libnrt not loadable with LD_LIBRARY_PATH=/nonexistent" in \
        lost["detail"]
    # A failing nrt_init is named by AWS's status name.
    busy = runtime_check(tmp_path, {"LD_LIBRARY_PATH": str(libnrt_double),
                                    "LIBNRT_DOUBLE_STATUS": "9"})
    assert not busy["ok"] and "NRT status 9 (NRT_LOAD_NOT_ENOUGH_NC)" in busy["detail"]
    assert "NEURON_RT_NUM_CORES=1" in busy["detail"]  # one core, claimed exclusively
    assert doctor.plan(valid(), "/v/bin/vllm")["config"]["runtime"] == "neuron"
    assert doctor.plan(valid(prefixbench_platform="cpu", prefixbench_instance_type=
                             "trn2sim.48xlarge"), "/v/bin/vllm")["config"]["runtime"] == "cpu"


def test_a_disk_too_small_for_the_model_fails_with_the_models_size(tmp_path: Path) -> None:
    # The room asked for is the profile's checkpoint (61 GiB for gpt-oss-120b), not 0.
    need = doctor.plan(valid(prefixbench_model_profile="gpt-oss-120b"),
                       "/v/bin/vllm")["config"]["model_bytes"]
    assert need == 61 * 2**30
    free = shutil.disk_usage(tmp_path).free
    small = probe(tmp_path, model_dir=str(tmp_path / "absent"), model_bytes=free + 2**30)
    assert not small["model"]["ok"]
    assert "GiB free on" in small["model"]["detail"]
    assert f"the model needs {(free + 2**30) / 2**30:.1f} GiB" in small["model"]["detail"]
    roomy = probe(tmp_path, model_dir=str(tmp_path / "absent"), model_bytes=2**20)
    assert "the model needs" not in roomy["model"]["detail"]
    assert "0.0 GiB to download" in roomy["model"]["detail"]
