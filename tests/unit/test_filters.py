"""The filter plugin is a name -> function map over the package: the unit name and the
run directory's paths come from it, never from strings built in task files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _filters() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location(
        "prefixbench_filters", ROOT / "plugins" / "filter" / "prefixbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.FilterModule().filters())


def test_unit_name_and_run_files_come_from_the_package(tmp_path: Path) -> None:
    f = _filters()
    assert f["prefixbench_unit_name"]("baseline") == "vllm-baseline.service"
    assert f["prefixbench_unit_name"]("cached") == "vllm-cached.service"
    with pytest.raises(ValueError, match="unknown configuration 'warm'"):
        f["prefixbench_unit_name"]("warm")
    files = f["prefixbench_run_files"](str(tmp_path / "r1"), "h1", "baseline")
    assert files["startup"] == f"{tmp_path}/r1/h1/baseline/startup.json"
    assert files["compile_store"] == f"{tmp_path}/.compile-cache"


def test_pending_items_carry_the_workload_by_name_only() -> None:
    items = _filters()["prefixbench_pending_items"](
        {"prefixbench_repetitions": 1}, "/nonexistent/r1", "h1", "cached")
    assert [i["name"] for i in items] == ["high_overlap", "no_overlap", "sustained_c4"]
    assert all("workload" not in i and isinstance(i["seed"], int) for i in items)
    # A run with nothing done: the calibration bench is not left out, no line says so.
    assert _filters()["prefixbench_calibration_skipped"](
        {"prefixbench_repetitions": 1}, "/nonexistent/r1", "h1", "baseline") == ""


def test_a_strict_deploy_reads_the_doctors_proof_through_the_filter() -> None:
    import json  # noqa: PLC0415

    from prefixbench.config import settings  # noqa: PLC0415
    from prefixbench.servers import sandbox, server  # noqa: PLC0415

    problem = _filters()["prefixbench_sandbox_proof_problem"]
    values = {"prefixbench_instance_type": "trn2.48xlarge",
              "vllm_service_model": "openai/gpt-oss-120b", "vllm_service_sandbox": "strict",
              "prefixbench_neuron_release": "2.32.0"}
    strict = settings.validate(values, "h").settings
    assert "not proven on this host" in problem(strict, "/v/bin/vllm", "")
    spec = server.unit_spec(strict, "cached", "/v/bin/vllm")
    proof = json.dumps(sandbox.proof_record("strict", spec.sandbox_lines()))
    assert problem(strict, "/v/bin/vllm", proof) == ""
    # The same proof does not cover a unit whose API faces the network (other directives).
    exposed = settings.validate({**values, "vllm_service_host": "0.0.0.0",
                                 "vllm_service_expose": True,
                                 "vllm_service_api_key": "k3y-0123456789abcdef"}, "h")
    assert exposed.ok, exposed.problems
    assert "proved other directives" in problem(exposed.settings, "/v/bin/vllm", proof)
