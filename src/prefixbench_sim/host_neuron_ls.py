#!/usr/bin/python3
"""Simulated ``neuron-ls`` / ``neuron-top`` for the prefixbench test fleet.

Shipped by the simulated ``aws-neuronx-tools`` package as ``/opt/aws/neuron/bin/neuron-ls``
and ``neuron-top``; runs on the hosts' own python3 (3.11, standard library only). It reads
the host's simulated identity from ``/etc/prefixbench-sim/instance.json`` (written by the
fleet harness) and the instance catalog baked into the package, and prints the devices
that instance type has. There is no Neuron hardware behind it.

``neuron-ls -j`` / ``--json-output`` prints a JSON list, one object per device, shaped
like the real tool's. Field by field, against public sources:

- confirmed from a verbatim ``neuron-ls --json-output`` of a trn1.2xlarge and several
  parsers of it (ray, third-party test fixtures): ``neuron_device``, ``bdf``,
  ``cpu_affinity``, ``numa_node`` (a string), ``connected_to`` (null for one device),
  ``nc_count``, ``memory_size`` (bytes), ``neuroncore_ids``, ``neuron_processes``.
- seen in third-party trn2 fixtures, not in AWS's example: ``instance_type`` (AWS's
  example has ``logical_neuroncore_config``).
- confirmed by AWS (aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0
  tools/neuron-sys-tools/neuron-ls.rst, its ``neuron-ls -j`` of a trn2n.48xlarge):
  ``nc_count`` and ``neuroncore_ids`` count *logical* cores at the LNC in effect (4 per
  device, ids 0-63, at ``logical_neuroncore_config`` 2), ``memory_size`` 103079215104;
- not confirmed, simulated:
  the values of ``bdf``, ``cpu_affinity``, ``numa_node``; ``connected_to`` as the
  neighbour list of a 4x4 torus on 16-device instances.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

#: Replaced with the package version when the simulated package is built.
TOOLS_VERSION = "0.0.0"

INSTANCE_FILE = Path(os.environ.get("PREFIXBENCH_SIM_INSTANCE_FILE",
                                    "/etc/prefixbench-sim/instance.json"))
CATALOG_FILE = Path(os.environ.get(
    "PREFIXBENCH_SIM_CATALOG", "/opt/aws/neuron/share/prefixbench-sim/instance_types.json"))

_TORUS_SIDE = 4


def _neighbours(index: int, devices: int) -> list[int] | None:
    if devices == 1:
        return None
    if devices == _TORUS_SIDE * _TORUS_SIDE:
        row, col = divmod(index, _TORUS_SIDE)
        near = {
            ((row - 1) % _TORUS_SIDE) * _TORUS_SIDE + col,
            ((row + 1) % _TORUS_SIDE) * _TORUS_SIDE + col,
            row * _TORUS_SIDE + (col - 1) % _TORUS_SIDE,
            row * _TORUS_SIDE + (col + 1) % _TORUS_SIDE,
        }
        return sorted(near)
    return sorted({(index - 1) % devices, (index + 1) % devices} - {index})


def devices_for(instance_type: str, spec: dict[str, Any], lnc: int) -> list[dict[str, Any]]:
    """The simulated device list of ``instance_type`` at logical core config ``lnc``."""
    count = int(spec["devices"])
    per_device = int(spec["physical_cores_per_device"]) // lnc
    vcpus = int(spec["vcpus"])
    numa_nodes = 2 if count > 1 else 1
    span = vcpus // numa_nodes
    out = []
    for i in range(count):
        node = i * numa_nodes // count
        out.append({
            "neuron_device": i,
            "bdf": f"0000:{0x10 + i:02x}:00.0",
            "cpu_affinity": f"{node * span}-{(node + 1) * span - 1}",
            "numa_node": str(node),
            "connected_to": _neighbours(i, count),
            "nc_count": per_device,
            "logical_neuroncore_config": lnc,
            "memory_size": int(spec["device_memory_gib"]) * 1024**3,
            "neuroncore_ids": list(range(i * per_device, (i + 1) * per_device)),
            "neuron_processes": [],
            "instance_type": instance_type,
        })
    return out


def _load() -> tuple[str, list[dict[str, Any]]]:
    """The host's devices: the ``hardware`` its instance file states (the harness's own
    figures, independent of the catalogue the bundle checks them against); an instance
    file without one (a fleet built before) falls back to the baked catalogue."""
    try:
        identity = json.loads(INSTANCE_FILE.read_text())
        hardware = identity.get("hardware")
        catalog = {} if hardware else json.loads(CATALOG_FILE.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"neuron-ls (simulated): no Neuron devices found ({exc})") from None
    itype = str(identity.get("instance_type", ""))
    spec = hardware or catalog.get(itype)
    if spec is None:
        raise SystemExit(f"neuron-ls (simulated): unknown instance type {itype!r}")
    lnc_env = os.environ.get("NEURON_LOGICAL_NC_CONFIG", "")
    lnc = int(lnc_env) if lnc_env in ("1", "2") else int(spec["default_lnc"])
    return itype, devices_for(itype, spec, lnc)


def table(itype: str, devices: list[dict[str, Any]]) -> str:
    head = ["NEURON DEVICE", "NEURON CORES", "NEURON CORE IDS", "NEURON MEMORY",
            "CONNECTED DEVICES", "PCI BDF", "NUMA NODE"]
    rows = []
    for d in devices:
        ids = d["neuroncore_ids"]
        rows.append([
            str(d["neuron_device"]), str(d["nc_count"]), f"{ids[0]}-{ids[-1]}",
            f"{d['memory_size'] // 1024**3} GB",
            ", ".join(str(c) for c in d["connected_to"] or []),
            d["bdf"], d["numa_node"],
        ])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    body = [rule, line(head), rule, *(line(r) for r in rows), rule]
    return "\n".join([f"instance-type: {itype}", "instance-id: simulated (prefixbench)",
                      *body])


def main(argv: list[str]) -> int:
    prog = Path(argv[0]).name if argv else "neuron-ls"
    args = argv[1:]
    if "--version" in args or "-v" in args:
        print(f"{prog} {TOOLS_VERSION} (prefixbench simulation, no Neuron hardware)")
        return 0
    itype, devices = _load()
    if prog == "neuron-top":
        cores = sum(d["nc_count"] for d in devices)
        print(f"neuron-top (simulated): {itype}, {len(devices)} devices, {cores} NeuronCores, "
              "no Neuron processes")
        return 0
    if "-j" in args or "--json-output" in args:
        print(json.dumps(devices, indent=4))
    else:
        print(table(itype, devices))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
