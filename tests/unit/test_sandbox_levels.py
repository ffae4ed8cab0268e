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
        assert p["proof"] == sandbox.proof_record(level, spec.sandbox_lines())


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
