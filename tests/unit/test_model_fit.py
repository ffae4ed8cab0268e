"""Preflight refuses a tensor-parallel degree whose NeuronCores cannot hold the weights."""

from __future__ import annotations

from typing import Any

import pytest

from prefixbench.config import modelfit, plan, settings


def check(profile: str = "gpt-oss-120b", itype: str = "trn2.48xlarge",
          **overrides: Any) -> settings.ValidationResult:
    values = {"prefixbench_instance_type": itype, "prefixbench_model_profile": profile,
              **overrides}
    return settings.validate(values, host="h1", extra_names=values.keys())


@pytest.mark.parametrize(("profile", "itype", "tp"), [
    ("gpt-oss-120b", "trn2.48xlarge", 16), ("gpt-oss-120b", "trn2u.48xlarge", 16),
    ("gpt-oss-120b", "trn3.48xlarge", 8), ("gpt-oss-120b", "trn3p.48xlarge", 8),
    ("gpt-oss-20b", "trn2.48xlarge", 8), ("gpt-oss-20b", "trn3.48xlarge", 8)])
def test_the_profiles_tp_per_family_fits(profile: str, itype: str, tp: int) -> None:
    result = check(profile, itype)
    assert result.ok, result.problems
    assert result.settings["vllm_service_tensor_parallel_size"] == tp
    fit = modelfit.model_fit(result.settings)
    assert fit is not None and fit.fits


def test_tutorial_tp_8_for_120b_in_bf16_on_trn2_is_refused_with_the_arithmetic() -> None:
    result = check(vllm_service_tensor_parallel_size=8)
    assert result.problems == [
        "h1: gpt-oss-120b in BF16 needs 218 GiB of weights (117e9 parameters x 2 bytes); "
        "TP 8 on trn2.48xlarge uses 8 logical NeuronCores = 2 Trainium2 chips = 192 GiB of "
        "HBM, of which the weights may fill 75% (144 GiB; the rest is for the KV cache, "
        "activations and compiled graphs): use TP 16 or more "
        "(vllm_service_tensor_parallel_size), or set prefixbench_model_fit: warn"]


def test_an_instance_too_small_for_any_tp_says_so() -> None:
    result = check(itype="trn2.3xlarge", vllm_service_tensor_parallel_size=4)
    assert len(result.problems) == 1
    assert "TP 4 on trn2.3xlarge uses 4 logical NeuronCores = 1 Trainium2 chip = 96 GiB" \
        in result.problems[0]
    assert "no TP fits on a trn2.3xlarge" in result.problems[0]


def test_mxfp4_on_trn3_is_sized_from_the_stated_checkpoint() -> None:
    result = check(itype="trn3.48xlarge", vllm_service_tensor_parallel_size=2)
    assert len(result.problems) == 1
    assert ("gpt-oss-120b in MXFP4 needs 61 GiB of weights (as "
            "prefixbench_model_weights_gib states); TP 2 on trn3.48xlarge uses 2 logical "
            "NeuronCores = 0.5 Trainium3 chips = 72 GiB of HBM") in result.problems[0]
    assert "use TP 4 or more" in result.problems[0]


def test_the_inventory_tp_wins_over_the_per_family_map() -> None:
    assert check(vllm_service_tensor_parallel_size=32).settings[
        "vllm_service_tensor_parallel_size"] == 32
    mine = check(vllm_service_tensor_parallel_size_by_family={"trn2": 64})
    assert mine.ok and mine.settings["vllm_service_tensor_parallel_size"] == 64


def test_a_bad_per_family_entry_is_one_line() -> None:
    assert check(vllm_service_tensor_parallel_size_by_family={"trn2": "many"}).problems == [
        "h1: vllm_service_tensor_parallel_size_by_family.trn2 must be an integer, got "
        "'many' (str)"]
    assert check(vllm_service_tensor_parallel_size_by_family={"trn2": 16, "inf2": 2}
                 ).problems == ["h1: vllm_service_tensor_parallel_size_by_family: 'inf2' is "
                                "not an instance family (trn2, trn3)"]
    assert "'int4' is not a dtype" in check(
        prefixbench_model_dtype_by_family={"trn2": "int4"}).problems[0]
    assert check(prefixbench_model_weights_gib={"mxfp4": -1}).problems == [
        "h1: prefixbench_model_weights_gib.mxfp4 must be a positive number of GiB"]


def test_warn_and_off_let_the_run_go_on_and_the_plan_shows_it() -> None:
    warned = check(vllm_service_tensor_parallel_size=8, prefixbench_model_fit="warn")
    assert warned.ok, warned.problems
    line = plan.render([plan.host_plan("h1", warned.settings)])[1]
    assert line.startswith("  model fit: gpt-oss-120b in BF16 needs 218 GiB")
    assert "DOES NOT FIT, use TP 16 or more" in line and "prefixbench_model_fit: warn" in line
    off = check(vllm_service_tensor_parallel_size=8, prefixbench_model_fit="off")
    assert off.ok and modelfit.fit_line(off.settings) is None


def test_the_plan_shows_a_fit_that_fits() -> None:
    ok = check()
    lines = plan.render([plan.host_plan("h1", ok.settings)])
    assert lines[1] == (
        "  model fit: gpt-oss-120b in BF16 needs 218 GiB of weights (117e9 parameters x 2 "
        "bytes); TP 16 on trn2.48xlarge uses 16 logical NeuronCores = 4 Trainium2 chips = "
        "384 GiB of HBM (57%, at most 75% for weights): fits")


def test_the_simulated_fleet_and_unsized_models_are_not_checked() -> None:
    cpu = check(prefixbench_platform="cpu", vllm_service_tensor_parallel_size=1)
    assert cpu.ok, cpu.problems
    assert modelfit.model_fit(cpu.settings) is None
    bare = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                              "vllm_service_model": "/opt/models/gpt-oss-120b"}, host="h1")
    assert bare.ok and modelfit.model_fit(bare.settings) is None
    assert plan.render([plan.host_plan("h1", bare.settings)])[1].startswith("total:")


def test_the_margin_is_a_named_fraction() -> None:
    assert 0.5 <= modelfit.WEIGHTS_MAX_HBM_FRACTION < 1
