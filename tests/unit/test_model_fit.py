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


SOURCE = ('aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/features-guide.md, '
          '"Memory management"')


def test_tutorial_tp_8_for_120b_in_bf16_on_trn2_is_refused_with_the_arithmetic() -> None:
    # vllm-neuron 0.21: total_budget = total_hbm x 0.9 per rank; the KV cache gets the rest,
    # at most 30% of the budget, and the server fails below 1 GiB.
    result = check(vllm_service_tensor_parallel_size=8)
    assert result.problems == [
        "h1: gpt-oss-120b in BF16 needs 218 GiB of weights (117e9 parameters x 2 bytes); "
        "TP 8 on trn2.48xlarge uses 8 logical NeuronCores = 2 Trainium2 chips = 192 GiB of "
        "HBM; per core 27.2 GiB of weights in vllm-neuron's 21.6 GiB budget (90% of 24 GiB), "
        "KV cache 0.0 GiB (the rest, capped at 30% of the budget = 6.5 GiB), below the "
        "plugin's 1 GiB minimum (VLLM_NEURON_MIN_KV_BUDGET_GIB), so the server would fail "
        f"at start-up ({SOURCE}): use TP 16 or more (vllm_service_tensor_parallel_size), or "
        "set prefixbench_model_fit: warn"]


def test_an_instance_too_small_for_any_tp_says_so() -> None:
    result = check(itype="trn2.3xlarge", vllm_service_tensor_parallel_size=4)
    assert len(result.problems) == 1
    assert "TP 4 on trn2.3xlarge uses 4 logical NeuronCores = 1 Trainium2 chip = 96 GiB" \
        in result.problems[0]
    assert "no TP fits on a trn2.3xlarge" in result.problems[0]


def test_mxfp4_on_trn3_is_sized_from_the_stated_checkpoint() -> None:
    result = check(itype="trn3.48xlarge", vllm_service_tensor_parallel_size=1)
    assert len(result.problems) == 1
    assert ("gpt-oss-120b in MXFP4 needs 61 GiB of weights (as "
            "prefixbench_model_weights_gib states); TP 1 on trn3.48xlarge uses 1 logical "
            "NeuronCore = 0.25 Trainium3 chips = 36 GiB of HBM; per core 61.0 GiB of weights "
            "in vllm-neuron's 32.4 GiB budget (90% of 36 GiB)") in result.problems[0]
    assert "use TP 2 or more" in result.problems[0]


def test_the_plugins_minimum_not_a_share_of_hbm_decides() -> None:
    # 61 GiB over TP 2 on Trn3 is 30.5 GiB a core: 84% of the core's HBM, which the old
    # 75%-for-weights rule refused; the plugin's own rule leaves 1.9 GiB >= 1 GiB of KV
    # cache, so it is let through with a warning that the fit is tight.
    tight = check(itype="trn3.48xlarge", vllm_service_tensor_parallel_size=2)
    assert tight.ok, tight.problems
    fit = modelfit.model_fit(tight.settings)
    assert fit is not None and fit.fits and fit.tight
    assert fit.kv_gib == pytest.approx(36 * 0.9 - 61 / 2)
    (warning,) = [w for w in tight.warnings if "model fit is tight" in w]
    assert warning.startswith("h1: model fit is tight: gpt-oss-120b in MXFP4 needs 61 GiB")
    assert SOURCE in warning and "run it on one host first (--limit)" in warning
    line = modelfit.fit_line(tight.settings)
    assert line is not None and line.endswith(": fits (tight)")
    # Room beyond the cap: not tight, no warning.
    roomy = check(itype="trn3.48xlarge")
    assert not [w for w in roomy.warnings if "model fit" in w]


def test_the_units_budget_variables_are_honoured() -> None:
    # The plugin reads VLLM_NEURON_MIN_KV_BUDGET_GIB and VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION
    # (reference-configuration.md, "Memory management"): the unit's environment sets them.
    tight = {"prefixbench_instance_type": "trn3.48xlarge",
             "vllm_service_tensor_parallel_size": 2}
    more_kv = check(**tight, vllm_service_environment={"VLLM_NEURON_MIN_KV_BUDGET_GIB": "2"})
    assert len(more_kv.problems) == 1
    assert "below the plugin's 2 GiB minimum" in more_kv.problems[0]
    assert "use TP 4 or more" in more_kv.problems[0]
    # A cap below the minimum starves the KV cache whatever the TP.
    capped = check(vllm_service_environment={"VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": 0.01})
    assert len(capped.problems) == 1
    assert "capped at 1% of the budget = 0.2 GiB" in capped.problems[0]
    assert "no TP fits on a trn2.48xlarge" in capped.problems[0]
    wider = check(vllm_service_environment={"VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": "0.35"})
    fit = modelfit.model_fit(wider.settings)
    assert wider.ok and fit is not None and fit.kv_cap_fraction == 0.35
    assert check(vllm_service_environment={"VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": "x"}
                 ).problems == ["h1: vllm_service_environment."
                                "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION must be a number, got "
                                "'x'"]
    assert check(vllm_service_environment={"VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": 1.5}
                 ).problems == ["h1: vllm_service_environment."
                                "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION must be in (0, 1], "
                                "got 1.5"]
    assert check(vllm_service_environment={"VLLM_NEURON_MIN_KV_BUDGET_GIB": -1}).problems == [
        "h1: vllm_service_environment.VLLM_NEURON_MIN_KV_BUDGET_GIB must be >= 0, got -1"]


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
    # ... and preflight says it as a warning too, with the source.
    (fit_warning,) = [w for w in warned.warnings if "model fit" in w]
    assert fit_warning.startswith("h1: model fit (prefixbench_model_fit: warn): gpt-oss-120b")
    assert SOURCE in fit_warning
    off = check(vllm_service_tensor_parallel_size=8, prefixbench_model_fit="off")
    assert off.ok and modelfit.fit_line(off.settings) is None
    assert not [w for w in off.warnings if "model fit" in w]


def test_the_plan_shows_a_fit_that_fits() -> None:
    ok = check()
    lines = plan.render([plan.host_plan("h1", ok.settings)])
    assert lines[1] == (
        "  model fit: gpt-oss-120b in BF16 needs 218 GiB of weights (117e9 parameters x 2 "
        "bytes); TP 16 on trn2.48xlarge uses 16 logical NeuronCores = 4 Trainium2 chips = "
        "384 GiB of HBM; per core 13.6 GiB of weights in vllm-neuron's 21.6 GiB budget (90% "
        "of 24 GiB), KV cache 6.5 GiB (the rest, capped at 30% of the budget = 6.5 GiB), at "
        "least 1 GiB: fits")


def test_the_simulated_fleet_and_unsized_models_are_not_checked() -> None:
    cpu = check(prefixbench_platform="cpu", vllm_service_tensor_parallel_size=1)
    assert cpu.ok, cpu.problems
    assert modelfit.model_fit(cpu.settings) is None
    assert cpu.warnings == []
    bare = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                              "vllm_service_model": "/opt/models/gpt-oss-120b"}, host="h1")
    assert bare.ok and modelfit.model_fit(bare.settings) is None
    assert not plan.render([plan.host_plan("h1", bare.settings)])[1].startswith(
        "  model fit")


def test_the_budget_follows_the_plugins_documented_defaults() -> None:
    # reference-configuration.md (v2.31.1), "Memory management"; features-guide.md,
    # "Increase gpu_memory_utilization (default 0.9)".
    assert modelfit.GPU_MEMORY_UTILIZATION == 0.9
    assert (modelfit.KV_CAP_VAR, modelfit.KV_CAP_DEFAULT) == (
        "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION", 0.30)
    assert (modelfit.MIN_KV_VAR, modelfit.MIN_KV_DEFAULT) == (
        "VLLM_NEURON_MIN_KV_BUDGET_GIB", 1.0)
