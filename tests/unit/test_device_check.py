"""The Neuron device check: neuron-ls against the instance catalogue, each way they differ.

The neuron-ls output here is written from the public figures of a trn2.48xlarge (16
Trainium2 devices, 8 physical NeuronCores each, LNC 2 by default, 96 GiB of HBM each),
not generated from the catalogue the check reads, and shaped like ``neuron-ls -j``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prefixbench.hosts import instances
from prefixbench.hosts.provision import device_problems
from prefixbench_sim import host_neuron_ls, hostfiles
from prefixbench_sim.layout import Family, SimHost

GIB = 1024**3


def trn2_device(i: int, *, lnc: int = 2, **changes: Any) -> dict[str, Any]:
    per = 8 // lnc
    return {"neuron_device": i, "bdf": f"0000:{0x10 + i:02x}:00.0", "nc_count": per,
            "logical_neuroncore_config": lnc, "memory_size": 96 * GIB,
            "neuroncore_ids": list(range(i * per, (i + 1) * per)),
            "neuron_processes": [], "instance_type": "trn2.48xlarge", **changes}


def ls(devices: list[dict[str, Any]]) -> str:
    return json.dumps(devices)


TRN2 = [trn2_device(i) for i in range(16)]


def test_a_trn2_that_matches_has_no_problem() -> None:
    assert device_problems("trn2.48xlarge", ls(TRN2)) == []
    # At LNC 1 the runtime sees 128 NeuronCores: the same hardware.
    assert device_problems("trn2.48xlarge", ls([trn2_device(i, lnc=1)
                                                 for i in range(16)])) == []
    # Older neuron-ls output names neither the instance type nor the LNC.
    bare = [{k: v for k, v in d.items() if k not in ("instance_type",
                                                   "logical_neuroncore_config")}
            for d in TRN2]
    assert device_problems("trn2.48xlarge", ls(bare)) == []


DISAGREEMENTS = [
    ("fewer devices", "trn2.48xlarge", TRN2[:15],
     ["neuron-ls sees 15 Neuron devices, a trn2.48xlarge has 16",
      "neuron-ls sees 60 NeuronCores, a trn2.48xlarge has 64 at LNC=2"]),
    ("more devices", "trn2.3xlarge",
     [trn2_device(i, instance_type="trn2.3xlarge") for i in range(2)],
     ["neuron-ls sees 2 Neuron devices, a trn2.3xlarge has 1",
      "neuron-ls sees 8 NeuronCores, a trn2.3xlarge has 4 at LNC=2"]),
    ("no devices", "trn2.48xlarge", [],
     ["neuron-ls sees 0 Neuron devices, a trn2.48xlarge has 16"]),
    ("fewer cores", "trn2.48xlarge", [*TRN2[:15], trn2_device(15, nc_count=2)],
     ["neuron-ls sees 62 NeuronCores, a trn2.48xlarge has 64 at LNC=2"]),
    ("more cores", "trn2.48xlarge", [trn2_device(i, nc_count=8) for i in range(16)],
     ["neuron-ls sees 128 NeuronCores, a trn2.48xlarge has 64 at LNC=2"]),
    ("impossible LNC", "trn2.48xlarge",
     [trn2_device(i, logical_neuroncore_config=3) for i in range(16)],
     ["neuron-ls reports logical NeuronCore config 3, a trn2.48xlarge has 8 NeuronCores "
      "per device (LNC 1 or 2)"]),
    ("less memory", "trn2.48xlarge", [*TRN2[:3], trn2_device(3, memory_size=32 * GIB),
                                      *TRN2[4:]],
     ["neuron-ls gives device 3 32 GiB of memory, a trn2.48xlarge device has 96 GiB"]),
    ("more memory: a Trn3 device", "trn2.48xlarge",
     [trn2_device(i, memory_size=144 * GIB) for i in range(16)],
     ["neuron-ls gives device 0 144 GiB of memory, a trn2.48xlarge device has 96 GiB"]),
    ("another instance type named", "trn2.48xlarge",
     [trn2_device(i, instance_type="trn2u.48xlarge") for i in range(16)],
     ["neuron-ls names the instance trn2u.48xlarge, the inventory says trn2.48xlarge"]),
    ("wrong family: a trn2 declared trn3", "trn3.48xlarge", TRN2,
     ["neuron-ls names the instance trn2.48xlarge, the inventory says trn3.48xlarge",
      "neuron-ls gives device 0 96 GiB of memory, a trn3.48xlarge device has 144 GiB"]),
    ("nc_count not a number", "trn2.48xlarge", [*TRN2[:15], trn2_device(15, nc_count="4")],
     ["neuron-ls -j gives a device without a whole nc_count"]),
    ("memory_size not a number", "trn2.48xlarge",
     [trn2_device(0, memory_size="96G"), *TRN2[1:]],
     ["neuron-ls gives device 0 '96G' of memory, a trn2.48xlarge device has 96 GiB"]),
]


@pytest.mark.parametrize(("itype", "devices", "problems"),
                         [d[1:] for d in DISAGREEMENTS], ids=[d[0] for d in DISAGREEMENTS])
def test_each_disagreement_is_named(itype: str, devices: list[dict[str, Any]],
                                    problems: list[str]) -> None:
    assert device_problems(itype, ls(devices)) == problems


@pytest.mark.parametrize(("output", "problem"), [
    ("", "neuron-ls -j did not print JSON (Expecting value)"),
    ("neuron-ls: command not found", "neuron-ls -j did not print JSON (Expecting value)"),
    ('{"neuron_device": 0}', "neuron-ls -j did not print a list of devices"),
    ("[0, 1]", "neuron-ls -j printed a device that is not a JSON object"),
])
def test_output_that_is_not_a_device_list(output: str, problem: str) -> None:
    assert device_problems("trn2.48xlarge", output) == [problem]


def test_an_unknown_instance_type_is_named() -> None:
    (problem,) = device_problems("trn9.48xlarge", ls(TRN2))
    assert problem.startswith("instance type trn9.48xlarge is not in the catalog")


def simulated_neuron_ls(tmp_path: Path, identity: dict[str, Any]) -> str:
    """``neuron-ls -j`` of the simulated tools, with the catalogue their package bakes."""
    ident = tmp_path / "instance.json"
    ident.write_text(json.dumps(identity))
    catalog = tmp_path / "instance_types.json"
    catalog.write_text(instances.catalog_json(instances.load_catalog()))
    proc = subprocess.run([sys.executable, host_neuron_ls.__file__, "-j"], check=True,
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin",
                               "PREFIXBENCH_SIM_INSTANCE_FILE": str(ident),
                               "PREFIXBENCH_SIM_CATALOG": str(catalog)})
    return proc.stdout


@pytest.mark.parametrize("family", ["trn2", "trn3"])
def test_on_the_simulated_fleet_a_wrong_device_count_fails(tmp_path: Path,
                                                          family: Family) -> None:
    # The simulated host's devices come from the harness's own figures, not from the
    # catalogue the check reads: a host simulated with a device missing fails the check.
    host = SimHost(family, 1)
    identity = json.loads(hostfiles.instance_json(host))
    assert device_problems(host.instance_type, simulated_neuron_ls(tmp_path, identity)) == []
    identity["hardware"]["devices"] = 15
    assert device_problems(host.instance_type, simulated_neuron_ls(tmp_path, identity)) == [
        f"neuron-ls sees 15 Neuron devices, a {host.instance_type} has 16",
        f"neuron-ls sees 60 NeuronCores, a {host.instance_type} has 64 at LNC=2"]


def aws_example_device(i: int, nc_count: int = 4) -> dict[str, Any]:
    """A device as AWS's own ``neuron-ls -j`` example prints it (trn2n.48xlarge,
    aws-neuron/aws-neuron-sdk@v2.32.0 tools/neuron-sys-tools/neuron-ls.rst): 4 cores
    per device at logical_neuroncore_config 2, memory_size 103079215104, no instance
    type in the JSON."""
    return {"neuron_device": i, "bdf": "cc:00.0", "cpu_affinity": "48-95,144-191",
            "numa_node": "1", "connected_to": [12, 3, 4, 1], "nc_count": nc_count,
            "logical_neuroncore_config": 2, "memory_size": 103079215104,
            "neuroncore_ids": list(range(i * nc_count, (i + 1) * nc_count)),
            "neuron_processes": []}


def test_nc_count_is_read_as_aws_documents_it() -> None:
    # AWS's listing of a 16-device Trn2 passes; one that counted physical cores per device
    # (8 at LNC 2) would be another machine, and fails.
    assert device_problems("trn2.48xlarge", ls([aws_example_device(i)
                                                 for i in range(16)])) == []
    assert device_problems("trn2.48xlarge", ls([aws_example_device(i, nc_count=8)
                                                 for i in range(16)])) == [
        "neuron-ls sees 128 NeuronCores, a trn2.48xlarge has 64 at LNC=2"]
