"""Whether a model's weights fit the memory budget vllm-neuron gives each NeuronCore.

The arithmetic behind preflight's weights-fit check, following the vLLM 0.21 plugin's own
memory budget (aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/features-guide.md,
"Memory management"; the variables in reference-configuration.md, "Memory management")::

    total_budget    = total_hbm * gpu_memory_utilization          (vLLM's default 0.9)
    kv_cache_budget = max(total_budget - bytes_used, 0)
    heuristic_cap   = total_budget * VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION   (0.30)
    available       = min(kv_cache_budget, heuristic_cap)

and the server "fails fast" when ``available`` is below ``VLLM_NEURON_MIN_KV_BUDGET_GIB``
(1.0 GiB). vLLM asks every worker for its own available memory (``get_kv_cache_configs``
takes one ``available_memory`` per worker: design/vllm/vllm-integration-kv-cache.md), so
the budget is one tensor-parallel rank's: the HBM of one logical NeuronCore, holding
1/TP of the weights (the weights taken as evenly sharded). ``bytes_used`` is what the
plugin finds loaded; the weights are only part of it (compiled graphs and scratch come
on top), so a host that passes here can still fall short, and one that fails here
certainly does. The two environment variables are read from the unit's environment
(vllm_service_environment) when it sets them.

The rules that refuse a misfit (:func:`prefixbench.config.rules_fit.model_fits_the_hbm`) and
check the per-family maps (:func:`prefixbench.config.rules_fit.by_family_maps`) read it; the
run plan prints :func:`fit_line`; :func:`tight_warning` is preflight's warning when the
weights leave the KV cache less than the cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.hosts import instances

#: Where the budget rule is stated.
SOURCE: Final = ("aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/"
                 "features-guide.md, \"Memory management\"")
#: vLLM's default share of device memory for the model and its KV cache (the plugin's
#: features guide: "Increase gpu_memory_utilization (default 0.9)"). The bundle does not
#: pass --gpu-memory-utilization, so the default holds.
GPU_MEMORY_UTILIZATION: Final = 0.9
#: The plugin's cap on the KV cache, as a fraction of the budget, and its variable.
KV_CAP_VAR: Final = "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION"
KV_CAP_DEFAULT: Final = 0.30
#: The smallest KV budget the plugin starts with, in GiB, and its variable.
MIN_KV_VAR: Final = "VLLM_NEURON_MIN_KV_BUDGET_GIB"
MIN_KV_DEFAULT: Final = 1.0

#: Bytes per parameter of the dtypes whose size follows from the parameter count.
BYTES_PER_PARAMETER: Final = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
#: Dtypes whose size the profile states in GiB (prefixbench_model_weights_gib): MXFP4
#: quantizes only gpt-oss's MoE weights, so no bytes-per-parameter figure holds for the
#: whole model.
SIZED_DTYPES: Final = ("mxfp4",)
DTYPES: Final = (*BYTES_PER_PARAMETER, *SIZED_DTYPES)
_GIB: Final = 2**30


class BudgetError(ValueError):
    """A budget variable of the unit's environment is not a number the plugin takes."""


def _env_number(s: Mapping[str, Any], name: str, default: float) -> float:
    value = (s.get("vllm_service_environment") or {}).get(name)
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BudgetError(f"vllm_service_environment.{name} must be a number, got "
                          f"{value!r}") from None
    return number


def budget_vars(s: Mapping[str, Any]) -> tuple[float, float]:
    """The KV cap fraction and the minimum KV budget (GiB) the unit gives the plugin: its
    environment's values, else the plugin's defaults. Raises :class:`BudgetError` for a
    value the plugin could not use."""
    cap = _env_number(s, KV_CAP_VAR, KV_CAP_DEFAULT)
    min_kv = _env_number(s, MIN_KV_VAR, MIN_KV_DEFAULT)
    if not 0 < cap <= 1:
        raise BudgetError(f"vllm_service_environment.{KV_CAP_VAR} must be in (0, 1], got "
                          f"{cap:g}")
    if min_kv < 0:
        raise BudgetError(f"vllm_service_environment.{MIN_KV_VAR} must be >= 0, got "
                          f"{min_kv:g}")
    return cap, min_kv


@dataclass(frozen=True)
class ModelFit:
    """The arithmetic of one host's weights-fit check (sizes in GiB)."""

    model: str
    dtype: str
    weights_gib: float
    #: How the size was found: "117e9 parameters x 2 bytes", or stated by the profile.
    basis: str
    tp: int
    spec: instances.InstanceType
    #: Smallest degree that fits and divides the instance's cores; None: none does.
    min_tp: int | None
    kv_cap_fraction: float = KV_CAP_DEFAULT
    min_kv_gib: float = MIN_KV_DEFAULT

    @property
    def hbm_gib(self) -> float:
        """HBM of the cores tensor parallelism uses."""
        return self.tp * self.spec.memory_per_logical_core_gib()

    @property
    def core_gib(self) -> float:
        """HBM of one rank's logical NeuronCore."""
        return self.spec.memory_per_logical_core_gib()

    @property
    def budget_gib(self) -> float:
        """The plugin's budget per rank: total_budget."""
        return self.core_gib * GPU_MEMORY_UTILIZATION

    @property
    def weights_per_core_gib(self) -> float:
        return self.weights_gib / self.tp

    @property
    def kv_cap_gib(self) -> float:
        """heuristic_cap: the most the plugin gives the KV cache per rank."""
        return self.budget_gib * self.kv_cap_fraction

    @property
    def kv_gib(self) -> float:
        """available: what the weights leave the KV cache per rank, at most the cap."""
        return min(max(self.budget_gib - self.weights_per_core_gib, 0.0), self.kv_cap_gib)

    @property
    def fits(self) -> bool:
        return self.kv_gib >= self.min_kv_gib

    @property
    def tight(self) -> bool:
        """Fits, but the weights leave the KV cache less than the cap: whatever else the
        plugin counts as used (compiled graphs, scratch) comes out of that margin."""
        return self.fits and self.kv_gib < self.kv_cap_gib

    def needs(self) -> str:
        return (f"{self.model} in {self.dtype.upper()} needs {self.weights_gib:.0f} GiB of "
                f"weights ({self.basis})")

    def uses(self) -> str:
        chips = self.tp / self.spec.logical_cores_per_device()
        cores = f"{self.tp} logical NeuronCore{'' if self.tp == 1 else 's'}"
        return (f"TP {self.tp} on {self.spec.name} uses {cores} = "
                f"{chips:g} {self.spec.chip} chip{'' if chips == 1 else 's'} = "
                f"{self.hbm_gib:.0f} GiB of HBM")

    def budget(self) -> str:
        """Per rank: the weights against the plugin's budget, and the KV cache left."""
        return (f"per core {self.weights_per_core_gib:.1f} GiB of weights in vllm-neuron's "
                f"{self.budget_gib:.1f} GiB budget ({GPU_MEMORY_UTILIZATION:.0%} of "
                f"{self.core_gib:g} GiB), KV cache {self.kv_gib:.1f} GiB (the rest, capped "
                f"at {self.kv_cap_fraction:.0%} of the budget = {self.kv_cap_gib:.1f} GiB)")

    def remedy(self) -> str:
        if self.min_tp is not None:
            return f"use TP {self.min_tp} or more (vllm_service_tensor_parallel_size)"
        return (f"no TP fits on a {self.spec.name} (all {self.spec.logical_cores()} "
                f"logical NeuronCores hold {self.spec.devices * self.spec.device_memory_gib}"
                " GiB): use a larger instance type")


def _fits(weights_gib: float, tp: int, core_gib: float, cap: float, min_kv: float) -> bool:
    budget = core_gib * GPU_MEMORY_UTILIZATION
    return min(max(budget - weights_gib / tp, 0.0), budget * cap) >= min_kv


def _weights(s: Mapping[str, Any], dtype: str) -> tuple[float, str] | None:
    stated = (s.get("prefixbench_model_weights_gib") or {}).get(dtype)
    if isinstance(stated, int | float) and not isinstance(stated, bool) and stated > 0:
        return float(stated), "as prefixbench_model_weights_gib states"
    params = int(s.get("prefixbench_model_parameters") or 0)
    if params > 0 and dtype in BYTES_PER_PARAMETER:
        per = BYTES_PER_PARAMETER[dtype]
        return (params * per / _GIB,
                f"{params / 1e9:g}e9 parameters x {per} byte{'' if per == 1 else 's'}")
    return None


def model_fit(s: Mapping[str, Any]) -> ModelFit | None:
    """The weights-fit arithmetic of a host, or None where the check does not apply.

    It applies on platform neuron, to a known instance type, when the model's dtype on the
    host's family and its size in that dtype are known (the model profile states both).
    The HBM counted is what the cores tensor parallelism uses hold: TP logical cores x
    (HBM per device / logical cores per device).
    """
    if s.get("prefixbench_platform") != "neuron":
        return None
    itype = str(s.get("prefixbench_instance_type", ""))
    try:
        spec = instances.lookup(itype)
    except instances.CatalogError:
        return None  # tensor_parallel_fits reports it
    dtype = str((s.get("prefixbench_model_dtype_by_family") or {}).get(spec.family, ""))
    weights = _weights(s, dtype.lower()) if dtype else None
    tp = s.get("vllm_service_tensor_parallel_size")
    if weights is None or not isinstance(tp, int) or tp < 1:
        return None
    try:
        cap, min_kv = budget_vars(s)
    except BudgetError:
        return None  # rules_fit.plugin_memory_environment reports it
    per_core = spec.memory_per_logical_core_gib()
    cores = spec.logical_cores()
    min_tp = next((d for d in range(1, cores + 1) if cores % d == 0
                   and _fits(weights[0], d, per_core, cap, min_kv)), None)
    model = str(s.get("vllm_service_served_model_name") or s.get("vllm_service_model") or "?")
    return ModelFit(model=model.rstrip("/").rsplit("/", 1)[-1], dtype=dtype.lower(),
                    weights_gib=weights[0], basis=weights[1], tp=tp, spec=spec,
                    min_tp=min_tp, kv_cap_fraction=cap, min_kv_gib=min_kv)


def fit_line(s: Mapping[str, Any]) -> str | None:
    """The plan's line about the weights-fit check; None where it does not apply."""
    mode = s.get("prefixbench_model_fit", "refuse")
    fit = model_fit(s) if mode != "off" else None
    if fit is None:
        return None
    head = f"{fit.needs()}; {fit.uses()}; {fit.budget()}, at least {fit.min_kv_gib:g} GiB"
    if fit.fits:
        return f"model fit: {head}: fits{' (tight)' if fit.tight else ''}"
    return f"model fit: {head}: DOES NOT FIT, {fit.remedy()} (prefixbench_model_fit: {mode})"


def refusal(fit: ModelFit) -> str:
    """Why the plugin would not start with this fit, and what to do, on one line."""
    return (f"{fit.needs()}; {fit.uses()}; {fit.budget()}, below the plugin's "
            f"{fit.min_kv_gib:g} GiB minimum ({MIN_KV_VAR}), so the server would fail at "
            f"start-up ({SOURCE}): {fit.remedy()}")


def tight_warning(s: Mapping[str, Any]) -> str | None:
    """Preflight's warning for a fit with less KV room than the cap, or for a misfit let
    through by prefixbench_model_fit: warn; None otherwise."""
    mode = s.get("prefixbench_model_fit", "refuse")
    fit = model_fit(s) if mode != "off" else None
    if fit is None:
        return None
    if not fit.fits:
        return (f"model fit (prefixbench_model_fit: {mode}): {refusal(fit)}"
                if mode == "warn" else None)
    if fit.tight:
        return (f"model fit is tight: {fit.needs()}; {fit.budget()}: the weights leave "
                f"less than the cap, and compiled graphs and scratch also come out of it "
                f"({SOURCE}): a larger vllm_service_tensor_parallel_size leaves more; "
                "run it on one host first (--limit)")
    return None


def checkpoint_gib(s: Mapping[str, Any]) -> float:
    """The size on disk of what provision downloads, in GiB: ``model_cache_checkpoint_gib``
    (the profile's), else ``prefixbench_model_parameters`` x 2 bytes (a BF16 checkpoint),
    else 0 (unknown)."""
    stated = float(s.get("model_cache_checkpoint_gib") or 0)
    if stated > 0:
        return stated
    return int(s.get("prefixbench_model_parameters") or 0) * 2 / 2**30
