"""Whether a model's weights fit the HBM of the NeuronCores tensor parallelism uses.

The arithmetic behind preflight's weights-fit check: the model's size in its dtype on
the host's family (from the model profile), against the HBM behind the tensor-parallel
logical NeuronCores of the instance type. The rules that refuse a misfit
(:func:`prefixbench.config.rules.model_fits_the_hbm`) and check the per-family maps
(:func:`prefixbench.config.rules.by_family_maps`) read it; the run plan prints
:func:`fit_line`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.hosts import instances

#: Share of the HBM behind the tensor-parallel NeuronCores that the weights may fill. The
#: rest is what a server needs besides its weights: the KV cache (small at the tutorial's
#: 4 sequences x 8192 tokens, but the Neuron plugin sizes its block pool from what is
#: left), activations and scratch of the compiled graphs, the compiled graphs (NEFFs)
#: themselves and the runtime's own buffers. Not a documented Neuron figure: a deliberately
#: loose rule of thumb (vLLM's own gpu_memory_utilization default hands 90% of device
#: memory to weights and KV cache together), meant to refuse a plain misfit, not to
#: predict an out-of-memory at the margin. prefixbench_model_fit: warn or off overrides it.
WEIGHTS_MAX_HBM_FRACTION: Final = 0.75

#: Bytes per parameter of the dtypes whose size follows from the parameter count.
BYTES_PER_PARAMETER: Final = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
#: Dtypes whose size the profile states in GiB (prefixbench_model_weights_gib): MXFP4
#: quantizes only gpt-oss's MoE weights, so no bytes-per-parameter figure holds for the
#: whole model.
SIZED_DTYPES: Final = ("mxfp4",)
DTYPES: Final = (*BYTES_PER_PARAMETER, *SIZED_DTYPES)
_GIB: Final = 2**30


@dataclass(frozen=True)
class ModelFit:
    """The arithmetic of one host's weights-fit check."""

    model: str
    dtype: str
    weights_gib: float
    #: How the size was found: "117e9 parameters x 2 bytes", or stated by the profile.
    basis: str
    tp: int
    spec: instances.InstanceType
    #: Smallest degree that fits and divides the instance's cores; None: none does.
    min_tp: int | None

    @property
    def hbm_gib(self) -> float:
        return self.tp * self.spec.memory_per_logical_core_gib()

    @property
    def budget_gib(self) -> float:
        return self.hbm_gib * WEIGHTS_MAX_HBM_FRACTION

    @property
    def fits(self) -> bool:
        return self.weights_gib <= self.budget_gib

    def needs(self) -> str:
        return (f"{self.model} in {self.dtype.upper()} needs {self.weights_gib:.0f} GiB of "
                f"weights ({self.basis})")

    def uses(self) -> str:
        chips = self.tp / self.spec.logical_cores_per_device()
        return (f"TP {self.tp} on {self.spec.name} uses {self.tp} logical NeuronCores = "
                f"{chips:g} {self.spec.chip} chip{'' if chips == 1 else 's'} = "
                f"{self.hbm_gib:.0f} GiB of HBM")

    def remedy(self) -> str:
        if self.min_tp is not None:
            return f"use TP {self.min_tp} or more (vllm_service_tensor_parallel_size)"
        return (f"no TP fits on a {self.spec.name} (all {self.spec.logical_cores()} "
                f"logical NeuronCores hold {self.spec.devices * self.spec.device_memory_gib}"
                " GiB): use a larger instance type")


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
    per_core = spec.memory_per_logical_core_gib()
    cores = spec.logical_cores()
    min_tp = next((d for d in range(1, cores + 1) if cores % d == 0
                   and weights[0] <= d * per_core * WEIGHTS_MAX_HBM_FRACTION), None)
    model = str(s.get("vllm_service_served_model_name") or s.get("vllm_service_model") or "?")
    return ModelFit(model=model.rstrip("/").rsplit("/", 1)[-1], dtype=dtype.lower(),
                    weights_gib=weights[0], basis=weights[1], tp=tp, spec=spec,
                    min_tp=min_tp)


def fit_line(s: Mapping[str, Any]) -> str | None:
    """The plan's line about the weights-fit check; None where it does not apply."""
    mode = s.get("prefixbench_model_fit", "refuse")
    fit = model_fit(s) if mode != "off" else None
    if fit is None:
        return None
    share = fit.weights_gib / fit.hbm_gib * 100
    head = f"{fit.needs()}; {fit.uses()} ({share:.0f}%, at most "\
           f"{WEIGHTS_MAX_HBM_FRACTION:.0%} for weights)"
    if fit.fits:
        return f"model fit: {head}: fits"
    return f"model fit: {head}: DOES NOT FIT, {fit.remedy()} (prefixbench_model_fit: {mode})"
