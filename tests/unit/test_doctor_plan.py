"""hosts.doctor's plan checks the places the server unit really uses: the configured
compile cache (the unit's VLLM_CACHE_ROOT, servers.server), model and vocabulary."""

from __future__ import annotations

from test_doctor import valid

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
