"""Fingerprints: round trip, identity, grouping and drift."""

from __future__ import annotations

import pytest
from report_runs import fingerprint

from prefixbench.hosts.fingerprint import Fingerprint, FingerprintError, drift, group_by_identity


def test_round_trip_and_identity_excludes_host_and_time() -> None:
    fp = Fingerprint.from_dict(fingerprint("h1"))
    assert Fingerprint.from_dict(fp.to_dict()) == fp
    ident = fp.identity()
    assert "host" not in ident and "collected_at" not in ident
    assert ident["neuron_packages.aws-neuronx-runtime-lib"] == "2.33.10.0"
    assert ident["units.vllm-cached.service"] == "b" * 64
    other = Fingerprint.from_dict(fingerprint("h2", collected_at="later"))
    assert other.identity() == ident


def test_groups_and_drift_name_the_field() -> None:
    fps = [Fingerprint.from_dict(d) for d in (
        fingerprint("a"), fingerprint("b", kernel="6.8.0"), fingerprint("c"),
        fingerprint("d", units={"vllm-baseline.service": "a" * 64,
                                "vllm-cached.service": "c" * 64}))]
    groups = group_by_identity(fps)
    assert groups[0].hosts == ("a", "c")
    assert groups[0].majority and not groups[1].majority
    assert {(d.host, d.field) for d in drift(fps)} == {
        ("b", "kernel"), ("d", "units.vllm-cached.service")}
    assert drift(fps[:1]) == []


def test_missing_package_shows_as_none() -> None:
    a = fingerprint("a")
    b = fingerprint("b")
    del b["neuron_packages"]["aws-neuronx-tools"]
    fps = [Fingerprint.from_dict(x) for x in (a, fingerprint("c"), b)]
    (d,) = drift(fps)
    assert (d.host, d.field, d.value, d.majority_value) == (
        "b", "neuron_packages.aws-neuronx-tools", None, "2.31.13.0")


def test_rejects_bad_files() -> None:
    with pytest.raises(FingerprintError, match="host"):
        Fingerprint.from_dict({"schema_version": 1})
    with pytest.raises(FingerprintError, match="schema_version"):
        Fingerprint.from_dict({"schema_version": 2, "host": "a"})
    with pytest.raises(FingerprintError, match="neuron_packages"):
        Fingerprint.from_dict({"host": "a", "neuron_packages": ["x"]})


def test_observed_fields_round_trip_and_a_count_must_be_whole() -> None:
    data = fingerprint("h1", observed_instance_type="trn2.48xlarge", neuron_devices=16,
                       neuron_cores=64, sources={"neuron_devices": "neuron-ls"})
    fp = Fingerprint.from_dict(data)
    assert Fingerprint.from_dict(fp.to_dict()) == fp
    assert fp.identity()["neuron_devices"] == "16"
    assert fp.source("neuron_devices") == "neuron-ls" and fp.source("neuron_cores") is None
    # A fingerprint written before these fields: nothing observed, still readable.
    old = Fingerprint.from_dict(fingerprint("h2"))
    assert (old.observed_instance_type, old.neuron_devices, old.sources) == (None, None, {})
    for bad in ("16", 1.5, -1, True):
        with pytest.raises(FingerprintError, match="neuron_devices"):
            Fingerprint.from_dict(fingerprint("h3", neuron_devices=bad))
