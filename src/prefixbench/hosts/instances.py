"""The Neuron instance catalog (``data/instance_types.yml``): devices per instance type.

Pure. Used to check that what ``neuron-ls`` reports matches the instance type, to size
tensor parallelism and the model's weights, and (baked as JSON) by the simulated
``neuron-ls``. Every real entry names the public document its figures come from; an
entry made up for the simulated fleet is marked ``simulated`` and carries ``sim`` in its
name, so it can never be taken for a real type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import yaml

CATALOG_FILE: Final = Path(__file__).resolve().parents[1] / "data" / "instance_types.yml"
FAMILIES: Final = frozenset({"trn2", "trn3"})
#: How far an entry's figures can be trusted (see the catalog's header).
CONFIDENCE: Final = ("documented", "inferred", "simulated")
#: The marker a simulated entry's name carries.
SIM_MARKER: Final = "sim"
#: The chip of each family, for messages ("2 Trainium2 chips").
CHIPS: Final = {"trn2": "Trainium2", "trn3": "Trainium3"}


def family(instance_type: str) -> str:
    """Instance family from the type: ``trn2.48xlarge`` -> ``trn2``, ``trn2u...`` -> ``trn2``.

    Keyed on the ``trn<N>`` prefix, as the Neuron tooling does (``trn3p.48xlarge`` and
    ``trn3sim.48xlarge`` are ``trn3``).
    """
    head = instance_type.split(".", 1)[0]
    match = re.match(r"^(trn\d+)", head)
    return match.group(1) if match else head


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
    #: None: no public figure (informational; only the simulated neuron-ls uses it).
    vcpus: int | None
    simulated: bool
    source: str
    confidence: str = "documented"
    notes: str = ""

    def logical_cores_per_device(self, lnc: int | None = None) -> int:
        return self.physical_cores_per_device // (lnc or self.default_lnc)

    def logical_cores(self, lnc: int | None = None) -> int:
        """NeuronCores the runtime sees (64 on a trn2.48xlarge at LNC=2)."""
        return self.devices * self.logical_cores_per_device(lnc)

    def memory_per_logical_core_gib(self, lnc: int | None = None) -> float:
        """HBM behind one logical NeuronCore (24 GiB on Trn2 at LNC=2, 36 on Trn3)."""
        return self.device_memory_gib / self.logical_cores_per_device(lnc)

    @property
    def chip(self) -> str:
        return CHIPS.get(self.family, "Neuron device")


_INT_FIELDS: Final = ("devices", "physical_cores_per_device", "default_lnc",
                      "device_memory_gib")


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
        vcpus = spec.get("vcpus")
        if vcpus is not None and (not isinstance(vcpus, int) or isinstance(vcpus, bool)
                                  or vcpus < 1):
            raise CatalogError(f"{where}: vcpus must be a positive integer or null")
        if not isinstance(spec.get("simulated"), bool):
            raise CatalogError(f"{where}: simulated must be true or false")
        _check_provenance(where, str(name), spec)
        out[str(name)] = InstanceType(
            name=str(name), family=str(spec["family"]),
            devices=spec["devices"], physical_cores_per_device=spec["physical_cores_per_device"],
            default_lnc=spec["default_lnc"], device_memory_gib=spec["device_memory_gib"],
            vcpus=vcpus, simulated=spec["simulated"], source=str(spec.get("source", "")),
            confidence=str(spec.get("confidence")), notes=str(spec.get("notes") or ""),
        )
    return out


def _check_provenance(where: str, name: str, spec: Mapping[str, Any]) -> None:
    """A real entry names its public source; a made-up one says so, in its name too."""
    confidence = spec.get("confidence")
    if confidence not in CONFIDENCE:
        raise CatalogError(f"{where}: confidence must be one of {', '.join(CONFIDENCE)}")
    if spec["simulated"] != (confidence == "simulated"):
        raise CatalogError(f"{where}: simulated: true goes with confidence: simulated, "
                           "and only with it")
    if spec["simulated"] and SIM_MARKER not in name.split(".", 1)[0]:
        raise CatalogError(f"{where}: a simulated type's name must contain "
                           f"{SIM_MARKER!r} (e.g. trn3sim.48xlarge), so that it can never "
                           "be taken for a real AWS instance type")
    if not spec["simulated"] and SIM_MARKER in name:
        raise CatalogError(f"{where}: a real type's name must not contain {SIM_MARKER!r}")
    source = spec.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(f"{where}: source must name the public document the figures "
                           "come from")


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
