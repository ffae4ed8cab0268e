"""The rules and warnings about the model on Neuron: does it fit, and has AWS run it.

Registered in the catalogue like :mod:`prefixbench.config.rules`; the arithmetic is
:mod:`prefixbench.config.modelfit`'s (vllm-neuron 0.21's memory budget), the published
configurations :mod:`prefixbench.config.recipes`'.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prefixbench.config import catalogue
from prefixbench.config.modelfit import (
    DTYPES,
    BudgetError,
    budget_vars,
    model_fit,
    refusal,
    tight_warning,
)
from prefixbench.config.recipes import recipe_warning
from prefixbench.hosts import instances


@catalogue.rule
def model_fits_the_hbm(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, the weights leave vllm-neuron's memory budget the KV cache it needs to
    start (prefixbench.config.modelfit, after the plugin's "Memory management")."""
    if s.get("prefixbench_model_fit", "refuse") != "refuse":
        return
    fit = model_fit(s)
    if fit is None or fit.fits:
        return
    yield f"{refusal(fit)}, or set prefixbench_model_fit: warn"


@catalogue.warning
def model_fit_warnings(s: Mapping[str, Any]) -> Iterator[str]:
    """A fit with less KV room than the plugin's cap, or a misfit let through (warn)."""
    line = tight_warning(s)
    if line:
        yield line


@catalogue.warning
def published_recipe(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, AWS publishes a command for this model, family and TP
    (prefixbench.config.recipes, data/aws_recipes.yml)."""
    line = recipe_warning(s)
    if line:
        yield line


@catalogue.rule
def plugin_memory_environment(s: Mapping[str, Any]) -> Iterator[str]:
    """The unit's KV budget variables, when set, are numbers vllm-neuron can use."""
    if s.get("prefixbench_platform") != "neuron":
        return
    try:
        budget_vars(s)
    except BudgetError as exc:
        yield str(exc)


@catalogue.rule
def by_family_maps(s: Mapping[str, Any]) -> Iterator[str]:
    """Per-family maps name families; dtypes and sizes are ones the fit check knows."""
    families = ", ".join(sorted(instances.FAMILIES))
    for name in ("vllm_service_tensor_parallel_size_by_family",
                 "prefixbench_model_dtype_by_family"):
        for key in sorted(set(s.get(name) or {}) - instances.FAMILIES):
            yield f"{name}: {key!r} is not an instance family ({families})"
    for fam, dtype in sorted((s.get("prefixbench_model_dtype_by_family") or {}).items()):
        if str(dtype).lower() not in DTYPES:
            yield (f"prefixbench_model_dtype_by_family.{fam}: {dtype!r} is not a dtype the "
                   f"fit check knows ({', '.join(DTYPES)})")
    for dtype, gib in sorted((s.get("prefixbench_model_weights_gib") or {}).items()):
        if str(dtype).lower() not in DTYPES:
            yield (f"prefixbench_model_weights_gib: {dtype!r} is not a dtype the fit check "
                   f"knows ({', '.join(DTYPES)})")
        elif isinstance(gib, bool) or not isinstance(gib, int | float) or gib <= 0:
            yield f"prefixbench_model_weights_gib.{dtype} must be a positive number of GiB"
