"""The server unit's sandbox levels: AWS's grants at every level, the first-start level
by default, a stricter level only where the doctor has proven it, and the plan's line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import prefixbench_doctor as search  # noqa: E402
import pytest  # noqa: E402

from prefixbench.config import plan, settings  # noqa: E402
from prefixbench.hosts import doctor, releases  # noqa: E402
from prefixbench.servers import sandbox, server  # noqa: E402

EXE = "/opt/venv/bin/vllm"


def valid(**overrides: Any) -> dict[str, Any]:
    result = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                                "vllm_service_model": "openai/gpt-oss-120b",
                                # a host's release once read (roles/neuron_sdk release)
                                "prefixbench_neuron_release": "2.32.0", **overrides},
                               host="h")
    assert result.ok, result.problems
    return result.settings


def test_a_neuron_unit_is_granted_what_awss_container_is_at_every_level() -> None:
    for level in sandbox.SANDBOX_LEVELS:
        spec = server.unit_spec(valid(vllm_service_sandbox=level), "cached", EXE)
        assert spec.grants == ("AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN",
                               "LimitMEMLOCK=infinity"), level
        assert "Environment=LD_LIBRARY_PATH=/opt/aws/neuron/lib:/opt/amazon/efa/lib:" \
               "/opt/amazon/efa/lib64" in [f"Environment={e}" for e in spec.environment]
        # Confinement never takes back a capability AWS grants.
        bounding = [h for h in spec.hardening if h.startswith("CapabilityBoundingSet=")]
        assert bounding in ([], ["CapabilityBoundingSet=CAP_IPC_LOCK CAP_SYS_ADMIN"]), level
    # Each grant says why and where AWS does it, at a tag.
    for grant in sandbox.NEURON_GRANTS:
        assert grant.reason and "@v2.31.1" in grant.source and "@v2.32.0" in grant.source
    assert server.unit_spec(valid(), "cached", EXE).sandbox_level == "aws"


def test_the_library_path_is_the_one_awss_image_of_the_hosts_release_sets() -> None:
    # aws-neuron/deep-learning-containers: the 0.21 image at 2.31.x sets no EFA directory,
    # the 0.24 image at 2.32.0 adds /opt/amazon/efa/lib and lib64 after libnrt's.
    def path(release: str) -> str:
        spec = server.unit_spec(valid(prefixbench_neuron_release=release), "cached", EXE)
        return next(e for e in spec.environment if e.startswith("LD_LIBRARY_PATH="))

    for release in ("2.31.0", "2.31.0-vllm-beta", "2.31.1"):
        assert path(release) == "LD_LIBRARY_PATH=/opt/aws/neuron/lib", release
    assert path("2.32.0") == \
        "LD_LIBRARY_PATH=/opt/aws/neuron/lib:/opt/amazon/efa/lib:/opt/amazon/efa/lib64"
    for rel in releases.installable(releases.load_all()):  # the others leave it unknown
        assert rel.library_path[0] == "/opt/aws/neuron/lib", rel.release  # libnrt's
        assert "deep-learning-containers" in rel.library_path_source, rel.release
    # The plan names the host's release's path once it is known, and no path before.
    named = plan.host_plan("h", valid(prefixbench_neuron_release="2.31.1")).sandbox
    assert "LD_LIBRARY_PATH=/opt/aws/neuron/lib," in named and "efa" not in named
    auto = plan.host_plan("h", valid(prefixbench_neuron_release="auto")).sandbox
    assert "LD_LIBRARY_PATH of the host's release" in auto
    with pytest.raises(ValueError, match=r"names no server\.library_path"):
        sandbox.library_path("neuron", ())


def test_a_cpu_unit_is_granted_nothing() -> None:
    spec = server.unit_spec(valid(prefixbench_platform="cpu"), "cached", EXE)
    assert spec.grants == ()
    assert "CapabilityBoundingSet=" in spec.hardening
    assert not any(e.startswith("LD_LIBRARY_PATH=") for e in spec.environment)


def test_the_doctor_runs_the_units_own_grants_and_directives() -> None:
    for level in sandbox.SANDBOX_LEVELS:
        spec = server.unit_spec(valid(vllm_service_sandbox=level), "cached", EXE)
        p = doctor.plan(valid(vllm_service_sandbox=level), EXE)
        assert set(spec.grants) <= set(p["properties"])
        assert p["directives"] == list(spec.hardening)
        # The proof names the level and the unit's own lines, and is what a deploy of
        # this unit accepts (not recomputed with proof_record, the function under test).
        assert p["proof"]["level"] == level
        assert p["proof"]["lines"] == list(spec.sandbox_lines())
        assert sandbox.proof_problem("strict", spec.sandbox_lines(),
                                     json.dumps(p["proof"])) == ""
        if level != "strict":
            strict = server.unit_spec(valid(vllm_service_sandbox="strict"), "cached", EXE)
            assert "proved other directives" in sandbox.proof_problem(
                "strict", strict.sandbox_lines(), json.dumps(p["proof"]))


def test_a_stricter_level_deploys_only_where_the_doctor_proved_it() -> None:
    strict = server.unit_spec(valid(vllm_service_sandbox="strict"), "cached", EXE)
    first = server.unit_spec(valid(), "cached", EXE)
    lines = strict.sandbox_lines()
    assert "not proven on this host" in sandbox.proof_problem("strict", lines, "")
    assert "not proven" in sandbox.proof_problem("strict", lines, "{not json")
    # A proof of the first-start level's lines does not prove strict's.
    other = json.dumps(sandbox.proof_record("aws", first.sandbox_lines()))
    assert "the doctor proved other directives" in sandbox.proof_problem("strict", lines,
                                                                           other)
    proof = json.dumps(sandbox.proof_record("strict", lines))
    assert sandbox.proof_problem("strict", lines, proof) == ""
    # The first-start level and off need no proof.
    assert sandbox.proof_problem("aws", first.sandbox_lines(), "") == ""
    assert sandbox.proof_problem("off", [], "") == ""
    assert strict.as_dict()["sandbox_needs_proof"] and not first.as_dict()[
        "sandbox_needs_proof"]


def test_the_proof_is_written_only_when_every_sandboxed_check_passes() -> None:
    ok = {"ok": True, "detail": ""}
    absent_model = {"ok": False, "detail": "absent"}
    assert search.proven({"checks": {"imports": ok, "model": absent_model}, "error": ""})
    assert not search.proven({"checks": {"imports": ok, "cache": {"ok": False}},
                              "error": ""})
    assert not search.proven({"checks": {"imports": ok}, "error": "did not run"})
    assert not search.proven({"checks": {"model": ok}, "error": ""})


def test_the_plan_says_each_hosts_level_and_why() -> None:
    lines = plan.render([plan.host_plan("a", valid()),
                         plan.host_plan("b", valid(vllm_service_sandbox="strict"))])
    text = "\n".join(lines)
    assert "  sandbox: aws (the level for a first start" in text
    assert "AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN" in text
    assert ("  sandbox: strict (set in the inventory; deploy refuses it until "
            "`prefixbench doctor` has proven it on this host") in text


# -- Each function of servers.sandbox on its own, expected values from the module's
# design (the directive table, AWS's quickstart, systemd.exec(5)), never recomputed --


def test_a_level_outside_the_three_is_one_clear_line() -> None:
    assert [sandbox.check_level(v) for v in ("aws", "strict", "off")] == ["aws", "strict",
                                                                          "off"]
    with pytest.raises(ValueError, match=r"^vllm_service_sandbox must be one of aws, "
                                         r"strict, off, not 'tight'$"):
        sandbox.check_level("tight")


def test_which_levels_never_set_a_directive() -> None:
    # Set at every confining level on both platforms: only off lacks it.
    assert sandbox.levels_without("NoNewPrivileges=yes") == ["off"]
    assert sandbox.levels_without("DevicePolicy=closed") == ["off"]
    # Neuron's bounding set is at level aws; a strict-only directive is absent from aws.
    assert sandbox.levels_without(
        "CapabilityBoundingSet=CAP_IPC_LOCK CAP_SYS_ADMIN") == ["off"]
    assert sandbox.levels_without("DeviceAllow=char-neuron rw") == ["aws", "off"]
    assert sandbox.levels_without("PrivateUsers=yes") == ["aws", "off"]
    assert sandbox.levels_without("IPAddressDeny=any") == ["aws", "off"]
    assert sandbox.levels_without("MemoryDenyWriteExecute=yes") == ["aws", "strict", "off"]


def test_the_confinement_by_platform_level_and_exposure() -> None:
    assert sandbox.sandbox("neuron", level="off") == []
    strict = sandbox.hardening("neuron", level="strict")
    assert "IPAddressDeny=any" in strict and "IPAddressAllow=localhost" in strict
    assert "DeviceAllow=char-neuron rw" in strict and "PrivateDevices=yes" not in strict
    exposed = sandbox.hardening("neuron", level="strict", loopback_only=False)
    assert "IPAddressDeny=any" not in exposed and "DeviceAllow=char-neuron rw" in exposed
    cpu = sandbox.hardening("cpu", level="strict", loopback_only=False)
    assert cpu[-4:] == ["CapabilityBoundingSet=", "PrivateDevices=yes",
                        "DevicePolicy=closed", "PrivateUsers=yes"]
    assert sandbox.hardening("cpu")[-3:] == ["CapabilityBoundingSet=",
                                             "PrivateDevices=yes", "DevicePolicy=closed"]
    assert sandbox.Directive("SystemCallFilter=@system-service", "why").key == \
        "SystemCallFilter"
    assert sandbox.Directive("Environment=A=B", "why").key == "Environment"


def test_grants_library_path_limits_and_path_by_platform() -> None:
    assert [d.line for d in sandbox.grants("neuron")] == [
        "AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN", "LimitMEMLOCK=infinity"]
    assert sandbox.grants("cpu") == []
    assert sandbox.library_path("neuron", ["/opt/aws/neuron/lib", "/opt/amazon/efa/lib"]) \
        == "/opt/aws/neuron/lib:/opt/amazon/efa/lib"
    assert sandbox.library_path("cpu", ["/opt/aws/neuron/lib"]) == ""
    assert sandbox.library_path("cpu", []) == ""
    with pytest.raises(ValueError, match=r"^the host's Neuron release names no "
                       r"server\.library_path: the unit cannot say where libnrt is \(fix "
                       r"the release's manifest\)$"):
        sandbox.library_path("neuron", [])
    # AWS's 65536 on Neuron (torch-neuronx troubleshooting); 16384 on the cpu platform.
    assert (sandbox.open_files_limit("neuron"), sandbox.open_files_limit("cpu")) == (
        65536, 16384)
    system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert sandbox.unit_path("/opt/venv/bin/vllm") == \
        f"/opt/venv/bin:/opt/aws/neuron/bin:{system}"
    assert sandbox.unit_path("/a/b/c/vllm") == f"/a/b/c:/opt/aws/neuron/bin:{system}"
    assert sandbox.unit_path("vllm") == f"/opt/aws/neuron/bin:{system}"


def test_the_plan_line_of_each_level() -> None:
    grants = "AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN, LimitMEMLOCK=infinity"
    assert sandbox.level_line("aws", "neuron", "/opt/aws/neuron/lib") == (
        "sandbox: aws (the level for a first start: the runtime as AWS runs it; grants "
        f"{grants} and LD_LIBRARY_PATH=/opt/aws/neuron/lib, as AWS's container)")
    assert sandbox.level_line("off", "neuron") == (
        f"sandbox: off (set in the inventory: no confinement; grants {grants} and the "
        "LD_LIBRARY_PATH of the host's release (read from the host), as AWS's container)")
    assert sandbox.level_line("strict", "cpu") == (
        "sandbox: strict (set in the inventory; deploy refuses it until `prefixbench "
        "doctor` has proven it on this host (run the doctor with this level first))")
    assert sandbox.level_line("aws", "cpu") == (
        "sandbox: aws (the level for a first start: the runtime as AWS runs it)")


def test_the_proof_names_its_level_and_a_digest_of_the_lines() -> None:
    import hashlib  # noqa: PLC0415

    lines = ["AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN", "NoNewPrivileges=yes"]
    # The stated digest: the first 16 hex digits of SHA-256 over the lines, one a line.
    want = hashlib.sha256(b"AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_ADMIN\n"
                          b"NoNewPrivileges=yes").hexdigest()[:16]
    assert sandbox.proof_record("strict", lines) == {"level": "strict", "digest": want,
                                                     "lines": lines}
    again = ("run `prefixbench doctor -e vllm_service_sandbox=strict` for this host first, "
             "or set vllm_service_sandbox: aws")
    missing = f"vllm_service_sandbox: strict is not proven on this host: {again}"
    for text in ("", "  \n", "{not json", "[1, 2]", '"strict"'):
        assert sandbox.proof_problem("strict", lines, text) == missing, text
    other = json.dumps({"level": "aws", "digest": "0" * 16})
    assert sandbox.proof_problem("strict", lines, other) == (
        "vllm_service_sandbox: strict: the doctor proved other directives on this host "
        f"(level 'aws') than this unit's: {again}")
    assert sandbox.proof_problem("strict", lines, json.dumps({"digest": want})) == ""
