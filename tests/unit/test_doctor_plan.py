"""hosts.doctor's plan checks the places the server unit really uses: the configured
compile cache (the unit's VLLM_CACHE_ROOT, servers.server), model and vocabulary."""

from __future__ import annotations

import json

from test_doctor import valid

from prefixbench.config import settings
from prefixbench.hosts import doctor
from prefixbench.servers import server


def _env(plan: dict[str, object], name: str) -> str:
    props = plan["properties"]
    assert isinstance(props, list)
    values = [p.split("=", 2)[2] for p in props if p.startswith(f"Environment={name}=")]
    assert len(values) == 1, props
    return values[0]


def test_the_doctor_checks_the_configured_cache_root_the_unit_writes() -> None:
    plan = doctor.plan(valid(vllm_service_cache_root="/srv/vllm-cache"), "/opt/venv/bin/vllm")
    assert plan["config"]["cache_dir"] == "/srv/vllm-cache"
    assert _env(plan, "VLLM_CACHE_ROOT") == "/srv/vllm-cache"
    default = doctor.plan(valid(), "/opt/venv/bin/vllm")
    assert default["config"]["cache_dir"] == server.DEFAULT_CACHE_ROOT
    assert _env(default, "VLLM_CACHE_ROOT") == server.DEFAULT_CACHE_ROOT


def test_the_doctor_checks_the_configured_model_and_vocabulary() -> None:
    plan = doctor.plan(valid(model_cache_dir="/data/models/gpt-oss"), "/opt/venv/bin/vllm")
    assert plan["config"]["model_dir"] == "/data/models/gpt-oss"
    assert plan["user"] == "vllm"
    assert "User=vllm" in plan["properties"] and "Group=vllm" in plan["properties"]
    other = doctor.plan(valid(vllm_service_user="svc"), "/opt/venv/bin/vllm")
    assert other["user"] == "svc" and "User=svc" in other["properties"]


def test_the_probes_configuration_on_each_platform() -> None:
    """On Neuron: the plugin's imports and distributions, neuronx-cc on the unit's PATH,
    /dev/neuron*, neuron-ls from the Neuron tools, EFA's sysfs class, libnrt's runtime."""
    plan = doctor.plan(valid(model_cache_tiktoken=True, model_cache_tiktoken_dir="/data/tt"),
                       "/opt/venv/bin/vllm")
    config = plan["config"]
    assert {k: config[k] for k in ("platform", "imports", "distributions", "compiler",
                                   "devices", "neuron_ls", "vocab_dir", "efa_dir",
                                   "runtime")} == {
        "platform": "neuron", "imports": ["vllm", "vllm_neuron", "torch"],
        "distributions": ["libtorch-neuronx-lite", "neuronx-cc"], "compiler": "neuronx-cc",
        "devices": "/dev/neuron*", "neuron_ls": "/opt/aws/neuron/bin/neuron-ls",
        "vocab_dir": "/data/tt", "efa_dir": "/sys/class/infiniband", "runtime": "neuron"}
    assert plan["python"] == "/opt/venv/bin/python"
    assert plan["properties"][:8] == [
        "User=vllm", "Group=vllm", "LimitNOFILE=65536",
        "AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN", "LimitMEMLOCK=infinity",
        "EnvironmentFile=-/etc/vllm-prefixbench/vllm.env",
        "StateDirectory=vllm-prefixbench", "CacheDirectory=vllm-prefixbench"]
    assert plan["properties"][8] == "WorkingDirectory=/var/lib/vllm-prefixbench"
    assert plan["proof"]["level"] == "aws"
    assert plan["proof_file"] == "/var/lib/prefixbench/sandbox-proof.json"
    # Without the tiktoken vocabulary the probe looks for none.
    assert doctor.plan(valid(model_cache_tiktoken_dir="/data/tt"),
                       "/opt/venv/bin/vllm")["config"]["vocab_dir"] == ""
    cpu = doctor.plan(valid(prefixbench_platform="cpu",
                            prefixbench_instance_type="trn2sim.48xlarge"), "/v/bin/vllm")
    assert {k: cpu["config"][k] for k in ("platform", "imports", "distributions",
                                          "compiler", "devices", "efa_dir", "runtime")} == {
        "platform": "cpu", "imports": ["vllm", "torch"], "distributions": [],
        "compiler": "g++", "devices": "", "efa_dir": "", "runtime": "cpu"}
    assert "LimitNOFILE=16384" in cpu["properties"]


def _result(causes: dict[str, str], directives: list[str]) -> dict[str, object]:
    checks = {"cache": {"ok": False, "detail": "cannot write in /var/cache/x: EROFS"},
              "devices": {"ok": False, "detail": "cannot open /dev/neuron0"},
              "imports": {"ok": True, "detail": "vllm 0.24.0"},
              "model": "not a mapping: skipped"}
    return {"checks": checks, "causes": causes, "directives": directives}


def test_each_cause_gets_its_own_fix() -> None:
    lines = doctor.host_lines("h1", _result(
        {"cache": "ProtectSystem=strict", "devices": "DeviceAllow=char-neuron rw",
         "imports": ""},
        ["ProtectSystem=strict", "DeviceAllow=char-neuron rw"]), "trn2.48xlarge")
    # In FIXES' order; a check whose result is not a mapping is left out.
    assert [(x.check, x.ok, x.cause) for x in lines] == [
        ("imports", True, ""), ("devices", False, "DeviceAllow=char-neuron rw"),
        ("cache", False, "ProtectSystem=strict")]
    assert lines[1].fix == ("the sandbox directive DeviceAllow=char-neuron rw breaks it: "
                            "set vllm_service_sandbox: aws (or off) and report it")
    assert lines[2].fix == ("the sandbox directive ProtectSystem=strict breaks it: set "
                            "vllm_service_sandbox: off and report it")
    assert lines[2].detail == "cannot write in /var/cache/x: EROFS"
    whole = doctor.host_lines("h1", _result({"cache": doctor.WHOLE_SANDBOX,
                                             "devices": doctor.INTERMITTENT}, []), "")
    assert whole[1].fix == doctor.INTERMITTENT_FIX and whole[2].fix == \
        doctor.WHOLE_SANDBOX_FIX
    # "host", or a directive the probe did not run under: the check's own fix.
    own = doctor.host_lines("h1", _result({"cache": "host", "devices": "PrivateDevices=yes"},
                                          ["ProtectSystem=strict"]), "")
    assert own[1].fix == doctor.FIXES["devices"] and own[2].fix == doctor.FIXES["cache"]


def test_a_probe_that_did_not_run_names_what_to_do() -> None:
    for error, fix in (
            ("the service user vllm does not exist yet: the deploy phase creates it",
             "run the phase the message names, then the doctor again"),
            ("the venv is missing: run the provision phase",
             "run the phase the message names, then the doctor again"),
            ("systemd-run exited 1", "read the host's journal (journalctl -u "
                                     "'prefixbench-doctor-*')")):
        assert doctor.host_lines("h", {"error": error, "checks": {}}, "trn2.48xlarge") == [
            doctor.Line("h", "probe", False, error, fix)]


def test_the_screen_line_by_line_and_its_total() -> None:
    ok = doctor.Line("trn2-a", "imports", True, "vllm 0.24.0", "fix it")
    bad = doctor.Line("trn2-b", "cache", False, "cannot write", "check the disk")
    assert ok.text() == "PASS  trn2-a           imports     vllm 0.24.0"
    assert bad.text() == ("FAIL  trn2-b           cache       cannot write\n"
                          "      fix: check the disk")
    assert doctor.render([ok, bad, ok], 5).splitlines()[-1] == \
        "doctor: 2 host(s), 2 PASS, 1 FAIL (5 probe runs)"
    assert doctor.render([ok]).splitlines()[-1] == "doctor: 1 host(s), 1 PASS, 0 FAIL"
    rep = doctor.report({"b": {"checks": {"cache": {"ok": False, "detail": "cannot write"}},
                               "runs": 3},
                         "a": {"checks": {"imports": {"ok": True, "detail": "v"}},
                               "runs": "2"}}, {})
    assert rep["failed"] == 1
    assert rep["lines"] == [
        {"host": "a", "check": "imports", "ok": True, "detail": "v",
         "fix": doctor.FIXES["imports"], "cause": ""},
        {"host": "b", "check": "cache", "ok": False, "detail": "cannot write",
         "fix": doctor.FIXES["cache"], "cause": ""}]
    assert rep["text"].splitlines()[-1] == "doctor: 2 host(s), 1 PASS, 1 FAIL (5 probe runs)"


def test_neuron_ls_is_compared_with_the_instance_type() -> None:
    from prefixbench.hosts import instances  # noqa: PLC0415

    trn2 = instances.lookup("trn2.48xlarge")
    per = trn2.logical_cores() // trn2.devices
    listing = json.dumps([{"neuron_device": i, "nc_count": per} for i in range(trn2.devices)])
    line, = doctor.host_lines("h", {"checks": {"neuron_ls": listing}}, "trn2.48xlarge")
    assert (line.check, line.ok, line.detail) == (
        "neuron_ls", True, f"agrees with trn2.48xlarge ({trn2.devices} devices, "
                           f"{trn2.logical_cores()} NeuronCores)")
    assert doctor.host_lines("h", {"checks": {"neuron_ls": ""}}, "trn2.48xlarge") == []
    assert doctor._devices("no-such-type") == "unknown type"


def test_every_problem_neuron_ls_shows_and_the_checks_after_it() -> None:
    from prefixbench.hosts import instances  # noqa: PLC0415

    trn2 = instances.lookup("trn2.48xlarge")
    one = json.dumps([{"neuron_device": 0, "nc_count": 2}])
    checks = {"neuron_ls": one, "cache": {"ok": True}}
    ls, cache = doctor.host_lines("h", {"checks": checks}, "trn2.48xlarge")
    assert (ls.check, ls.ok, ls.fix) == ("neuron_ls", False, doctor.FIXES["neuron_ls"])
    assert ls.detail == (
        f"neuron-ls sees 1 Neuron devices, a trn2.48xlarge has {trn2.devices}; neuron-ls "
        f"sees 2 NeuronCores, a trn2.48xlarge has {trn2.logical_cores()} at LNC=2")
    assert (cache.check, cache.ok, cache.detail) == ("cache", True, "")  # no detail: ""
    # An empty listing is left out, the checks after it are not.
    checks["neuron_ls"] = ""
    assert [x.check for x in doctor.host_lines("h", {"checks": checks}, "")] == ["cache"]
    # A host the inventory gives no type: the catalogue names the empty type.
    rep = doctor.report({"h": {"checks": {"neuron_ls": one}}}, {})
    assert rep["lines"][0]["detail"].startswith("instance type  is not in the catalog")
    assert rep["text"].splitlines()[-1] == "doctor: 1 host(s), 0 PASS, 1 FAIL"


def test_a_directive_no_level_sets_lists_every_level() -> None:
    result = {"checks": {"cache": {"ok": False, "detail": "x"}},
              "causes": {"cache": "MemoryDenyWriteExecute=yes"},
              "directives": ["MemoryDenyWriteExecute=yes"]}
    line, = doctor.host_lines("h", result, "")
    assert line.fix == ("the sandbox directive MemoryDenyWriteExecute=yes breaks it: set "
                        "vllm_service_sandbox: aws (or strict) (or off) and report it")


def test_the_platform_defaults_to_neuron_and_the_user_to_vllm() -> None:
    s = {k: v for k, v in valid().items() if k not in (
        "prefixbench_platform", "vllm_service_user", "vllm_service_cache_root",
        "model_cache_dir")}
    plan = doctor.plan(s, "/v/bin/vllm")
    assert plan["config"]["platform"] == "neuron"
    # The unit's default cache root (server.DEFAULT_CACHE_ROOT); no model directory named.
    assert plan["config"]["cache_dir"] == "/var/cache/vllm-prefixbench"
    assert plan["config"]["model_dir"] == ""
    assert plan["user"] == "vllm" and plan["properties"][:2] == ["User=vllm", "Group=vllm"]


def test_the_vocabulary_without_a_directory_is_the_catalogues_default() -> None:
    """Settings that name no model_cache_tiktoken_dir (not through preflight) check and
    serve from the catalogue's default directory, as preflight would give them; they
    raised KeyError before."""
    s = {k: v for k, v in valid(model_cache_tiktoken=True).items()
         if k != "model_cache_tiktoken_dir"}
    default = settings.catalogue_default("model_cache_tiktoken_dir")
    plan = doctor.plan(s, "/opt/venv/bin/vllm")
    assert plan["config"]["vocab_dir"] == default == "/opt/models/tiktoken"
    assert _env(plan, "TIKTOKEN_ENCODINGS_BASE") == default
