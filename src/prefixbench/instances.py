"""The Neuron instance catalog (``data/instance_types.yml``): devices per instance type.

Pure. Used to check that what ``neuron-ls`` reports matches the instance type, to size
tensor parallelism, and (baked as JSON) by the simulated ``neuron-ls``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import yaml

CATALOG_FILE: Final = Path(__file__).resolve().parent / "data" / "instance_types.yml"
FAMILIES: Final = frozenset({"trn2", "trn3"})


class CatalogError(ValueError):
    """The catalog is malformed or does not know an instance type."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    family: str
    devices: int
    physical_cores_per_device: int
    default_lnc: int
    device_memory_gib: int
    vcpus: int
    simulated: bool
    source: str

    def logical_cores_per_device(self, lnc: int | None = None) -> int:
        return self.physical_cores_per_device // (lnc or self.default_lnc)

    def logical_cores(self, lnc: int | None = None) -> int:
        """NeuronCores the runtime sees (64 on a trn2.48xlarge at LNC=2)."""
        return self.devices * self.logical_cores_per_device(lnc)


_INT_FIELDS: Final = ("devices", "physical_cores_per_device", "default_lnc",
                      "device_memory_gib", "vcpus")


def parse_catalog(data: Any, origin: str = "<catalog>") -> dict[str, InstanceType]:
    if not isinstance(data, Mapping) or not data:
        raise CatalogError(f"{origin}: expected a mapping of instance type to its devices")
    out: dict[str, InstanceType] = {}
    for name, spec in data.items():
        where = f"{origin}: {name}"
        if not isinstance(spec, Mapping):
            raise CatalogError(f"{where}: expected a mapping")
        if spec.get("family") not in FAMILIES:
            raise CatalogError(f"{where}: family must be one of {sorted(FAMILIES)}")
        for key in _INT_FIELDS:
            value = spec.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CatalogError(f"{where}: {key} must be a positive integer")
        if spec["default_lnc"] not in (1, 2) or spec["physical_cores_per_device"] % 2:
            raise CatalogError(f"{where}: default_lnc must be 1 or 2 and divide the cores")
        if not isinstance(spec.get("simulated"), bool):
            raise CatalogError(f"{where}: simulated must be true or false")
        out[str(name)] = InstanceType(
            name=str(name), family=str(spec["family"]),
            devices=spec["devices"], physical_cores_per_device=spec["physical_cores_per_device"],
            default_lnc=spec["default_lnc"], device_memory_gib=spec["device_memory_gib"],
            vcpus=spec["vcpus"], simulated=spec["simulated"], source=str(spec.get("source", "")),
        )
    return out


def load_catalog(path: Path = CATALOG_FILE) -> dict[str, InstanceType]:
    return parse_catalog(yaml.safe_load(path.read_text()), path.name)


def lookup(instance_type: str, catalog: Mapping[str, InstanceType] | None = None) -> InstanceType:
    cat = catalog if catalog is not None else load_catalog()
    try:
        return cat[instance_type]
    except KeyError:
        raise CatalogError(
            f"instance type {instance_type} is not in the catalog "
            f"(known: {', '.join(sorted(cat))}); add it to {CATALOG_FILE.name}"
        ) from None


def catalog_json(catalog: Mapping[str, InstanceType]) -> str:
    """The catalog as sorted JSON (what the simulated neuron-ls reads)."""
    return json.dumps({n: asdict(t) for n, t in sorted(catalog.items())}, indent=1,
                      sort_keys=True) + "\n"
