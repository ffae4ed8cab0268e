"""prefixbench doctor: the probe, the directive search, the plan and the screen."""

from __future__ import annotations

import json
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
        ("imports", "compiler", "devices", "cache", "open_files", "model", "vocabulary"),
        True)
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
    # full sandbox, no sandbox, then one directive at a time until devices is explained
    assert [c[0] for c in double.calls] == [
        ["User=vllm", *directives], ["User=vllm"], ["User=vllm", "ProtectSystem=strict"],
        ["User=vllm", "DevicePolicy=closed"]]
    assert double.calls[1][1] == ["compiler", "devices"]


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
    assert "DeviceAllow=char-neuron rw" in plan["directives"]
    assert "LimitNOFILE=65536" in plan["properties"]
    assert any(p.startswith("Environment=PATH=/opt/venv/bin:") for p in plan["properties"])
    assert plan["python"] == "/opt/venv/bin/python"
    assert plan["config"]["compiler"] == "neuronx-cc"
    assert plan["config"]["imports"][:2] == ["vllm", "vllm_neuron"]
    relaxed = doctor.plan(valid(vllm_service_sandbox="relaxed"), "/opt/venv/bin/vllm")
    assert "DevicePolicy=closed" not in relaxed["directives"]
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
           "causes": {"devices": "DevicePolicy=closed"}, "runs": 5}
    rep = doctor.report({"a": good, "b": bad, "c": {"error": "the service user vllm does "
                         "not exist yet: the deploy phase creates it"}},
                        {"a": "trn2.48xlarge", "b": "trn2.48xlarge", "c": "trn2.48xlarge"})
    text = rep["text"]
    assert rep["failed"] == 3
    assert "PASS  a" in text and "FAIL  b                devices" in text
    assert "vllm_service_sandbox: relaxed" in text and "DevicePolicy=closed" in text
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
