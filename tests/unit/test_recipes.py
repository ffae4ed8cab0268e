"""Preflight warns, with the source, when AWS publishes no command for a host's model,
instance family and TP (data/aws_recipes.yml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefixbench.config import plan, recipes, settings

SOURCE = "aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0"


def check(profile: str = "gpt-oss-120b", itype: str = "trn2.48xlarge",
          **overrides: Any) -> settings.ValidationResult:
    values = {"prefixbench_instance_type": itype, "prefixbench_model_profile": profile,
              **overrides}
    return settings.validate(values, host="h1", extra_names=values.keys())


def recipe_warnings(result: settings.ValidationResult) -> list[str]:
    return [w for w in result.warnings if "no AWS recipe" in w]


@pytest.mark.parametrize(("profile", "itype"), [
    ("gpt-oss-20b", "trn2.48xlarge"), ("gpt-oss-20b", "trn3.48xlarge"),
    ("gpt-oss-120b", "trn3.48xlarge"), ("gpt-oss-120b", "trn3p.48xlarge")])
def test_the_published_configurations_run_without_a_warning(profile: str, itype: str) -> None:
    # tutorial-gpt-oss.md at v2.31.1: TP 8; 20B on Trn2 in BF16 or Trn3 in MXFP4, 120B in
    # MXFP4 on Trn3.
    result = check(profile, itype)
    assert result.ok, result.problems
    assert recipe_warnings(result) == []
    assert recipes.matching(result.settings) is not None


def test_120b_on_trn2_warns_that_no_aws_recipe_exists_with_the_source() -> None:
    result = check()  # the profile's TP 16 on Trn2: the bundle's own arithmetic
    assert result.ok, result.problems
    assert recipe_warnings(result) == [
        f"h1: no AWS recipe for gpt-oss-120b in BF16 on trn2 at TP 16 (read at {SOURCE}: "
        "AWS publishes TP 8 on trn3 in MXFP4 (vllm-neuron/docs/tutorials/tutorial-gpt-oss.md)"
        "; on trn2: vllm-neuron/docs/model-recipes/gpt-oss.md lists the checkpoint for Trn2 "
        "in BF16, but no AWS document gives a TP that holds its 218 GiB (the tutorials' TP 8 "
        "is 192 GiB of HBM on Trn2); on trn2 AWS publishes gpt-oss-20b at TP 8 in BF16 "
        "(vllm-neuron/docs/tutorials/tutorial-gpt-oss.md; prefixbench_model_profile: "
        "gpt-oss-20b)): run it on one host first (--limit) before the fleet"]
    # The plan shows it under the host.
    lines = plan.render([plan.host_plan("h1", result.settings)])
    assert lines[2].startswith("  WARNING: no AWS recipe for gpt-oss-120b in BF16 on trn2")


def test_a_tp_or_dtype_other_than_the_published_one_warns() -> None:
    tp16 = check("gpt-oss-20b", "trn3.48xlarge", vllm_service_tensor_parallel_size=16)
    (line,) = recipe_warnings(tp16)
    assert line.startswith("h1: no AWS recipe for gpt-oss-20b in MXFP4 on trn3 at TP 16 "
                           f"(read at {SOURCE}: AWS publishes TP 8 on trn2 in BF16")
    # and what AWS publishes on that family for another model
    assert "on trn3 AWS publishes gpt-oss-120b at TP 8 in MXFP4" in line
    bf16 = check("gpt-oss-20b", "trn3.48xlarge",
                 prefixbench_model_dtype_by_family={"trn2": "bf16", "trn3": "bf16"})
    assert recipe_warnings(bf16) and "in BF16 on trn3 at TP 8" in recipe_warnings(bf16)[0]


def test_a_model_aws_never_published_says_so() -> None:
    mine = settings.validate({"prefixbench_instance_type": "trn2.48xlarge",
                              "vllm_service_model": "/opt/models/my-llama"}, host="h1")
    assert recipe_warnings(mine) == [
        f"h1: no AWS recipe for my-llama on trn2 at TP 8 (read at {SOURCE}: no AWS recipe "
        "for this model at all; on trn2 AWS publishes gpt-oss-20b at TP 8 in BF16 "
        "(vllm-neuron/docs/tutorials/tutorial-gpt-oss.md; prefixbench_model_profile: "
        "gpt-oss-20b)): run it on one host first (--limit) before the fleet"]


def test_the_simulated_fleet_gets_no_recipe_warning() -> None:
    cpu = check(prefixbench_platform="cpu", vllm_service_tensor_parallel_size=1)
    assert cpu.ok and cpu.warnings == []


def test_a_refused_host_gets_problems_not_warnings() -> None:
    refused = check(vllm_service_tensor_parallel_size=8)
    assert refused.problems and refused.warnings == []


def test_the_recipes_file_is_complete_and_cited() -> None:
    book = recipes.load()
    assert book.source == SOURCE
    assert {(r.model, r.family, r.dtype, r.tp) for r in book.recipes} == {
        ("gpt-oss-20b", "trn2", "bf16", 8), ("gpt-oss-20b", "trn3", "mxfp4", 8),
        ("gpt-oss-120b", "trn3", "mxfp4", 8)}
    assert all(r.where.startswith("vllm-neuron/docs/") for r in book.recipes)
    assert ("gpt-oss-120b", "trn2") in book.gaps


def test_a_recipe_without_its_source_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "recipes.yml"
    bad.write_text("source: x\nrecipes:\n  - {model: m, family: trn2, dtype: bf16, tp: 8}\n")
    with pytest.raises(ValueError, match="every recipe needs model, family, dtype, tp and "
                                         "where"):
        recipes.load(bad)
