"""The instance catalogue names its sources; made-up entries can never pass for real."""

from __future__ import annotations

import re
from typing import Any

import pytest

from prefixbench.hosts import instances

CATALOG = instances.load_catalog()

#: What a public source looks like in an entry: a repository path with its tag or commit,
#: or a URL.
PUBLIC = re.compile(r"https://\S+|[\w-]+/[\w.-]+@[0-9a-f]{7,40}|[\w-]+/[\w.-]+@v\d[\w.]*"
                    r"|aws-neuron/aws-neuron-sdk \S+\.(rst|yaml|md)")


@pytest.mark.parametrize("name", sorted(n for n, t in CATALOG.items() if not t.simulated))
def test_every_real_entry_names_a_public_source(name: str) -> None:
    entry = CATALOG[name]
    assert entry.source.strip(), name
    assert PUBLIC.search(entry.source), f"{name}: {entry.source!r} names no public document"
    assert entry.confidence in ("documented", "inferred")
    assert "sim" not in name


@pytest.mark.parametrize("name", sorted(n for n, t in CATALOG.items() if t.simulated))
def test_simulated_entries_say_so_in_their_name(name: str) -> None:
    assert "sim" in name.split(".", 1)[0]
    assert CATALOG[name].confidence == "simulated"
    assert "made up" in CATALOG[name].source


def test_real_trn3_types_from_the_driver_source_are_known() -> None:
    for name in ("trn3.48xlarge", "trn3p.48xlarge"):
        entry = instances.lookup(name, CATALOG)
        assert (entry.family, entry.simulated, entry.confidence) == ("trn3", False, "inferred")
        assert "aws-neuron-driver" in entry.source and "neuron_dhal_v4.c" in entry.source
        assert (entry.physical_cores_per_device, entry.device_memory_gib) == (8, 144)
        assert entry.memory_per_logical_core_gib() == 36
    assert CATALOG["trn3sim.48xlarge"].simulated
    assert CATALOG["trn2.48xlarge"].memory_per_logical_core_gib() == 24


def test_trn2_figures_are_the_documented_ones() -> None:
    for name in ("trn2.48xlarge", "trn2u.48xlarge"):
        entry = CATALOG[name]
        assert (entry.devices, entry.physical_cores_per_device, entry.device_memory_gib,
                entry.vcpus, entry.confidence) == (16, 8, 96, 192, "documented")
    assert CATALOG["trn2.3xlarge"].devices == 1


def spec(**changes: Any) -> dict[str, Any]:
    base = {"family": "trn3", "devices": 16, "physical_cores_per_device": 8,
            "default_lnc": 2, "device_memory_gib": 144, "vcpus": None, "simulated": False,
            "confidence": "inferred", "source": "aws-neuron/aws-neuron-driver@fca19f7d x.c"}
    return {**base, **changes}


@pytest.mark.parametrize(("name", "changes", "message"), [
    ("trn3.48xlarge", {"source": ""}, "source must name the public document"),
    ("trn3.48xlarge", {"source": None}, "source must name the public document"),
    ("trn3.48xlarge", {"simulated": True, "confidence": "simulated"},
     "must contain 'sim'"),
    ("trn3sim.48xlarge", {}, "must not contain 'sim'"),
    ("trn3.48xlarge", {"simulated": True}, "simulated: true goes with confidence"),
    ("trn3.48xlarge", {"confidence": "simulated"}, "simulated: true goes with confidence"),
    ("trn3.48xlarge", {"confidence": "guessed"}, "confidence must be one of"),
    ("trn3.48xlarge", {"vcpus": 0}, "vcpus must be a positive integer or null"),
])
def test_the_catalog_refuses_unsourced_or_disguised_entries(
        name: str, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(instances.CatalogError, match=message):
        instances.parse_catalog({name: spec(**changes)})


def test_a_well_formed_entry_parses() -> None:
    parsed = instances.parse_catalog({"trn3sim.48xlarge": spec(
        simulated=True, confidence="simulated", source="made up", vcpus=192)})
    assert parsed["trn3sim.48xlarge"].vcpus == 192


@pytest.mark.parametrize(("itype", "family"), [
    ("trn2.48xlarge", "trn2"), ("trn2u.48xlarge", "trn2"), ("trn3p.48xlarge", "trn3"),
    ("trn3sim.48xlarge", "trn3"), ("m5.large", "m5")])
def test_family_is_the_trn_prefix(itype: str, family: str) -> None:
    assert instances.family(itype) == family
