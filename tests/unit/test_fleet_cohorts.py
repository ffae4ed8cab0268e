"""Fleet reproducibility compares like with like: hosts grouped into cohorts by what
should make them equal (instance family and type, Neuron release, model, settings);
drift is a difference inside a cohort; the fleet gate says when it fired."""

from __future__ import annotations

import io
from pathlib import Path

from report_runs import fingerprint, make_run

from prefixbench.report.build import build_summary
from prefixbench.report.cli import report_main

TRN3 = {"instance_type": "trn3.48xlarge", "family": "trn3"}


def test_a_trn3_host_beside_trn2_hosts_is_another_cohort_not_drift(tmp_path: Path) -> None:
    fps = {"host-a": fingerprint("host-a"), "host-b": fingerprint("host-b"),
           "host-c": fingerprint("host-c", **TRN3)}
    f = build_summary(make_run(tmp_path, tuple(fps), fingerprints=fps)).fleet
    assert f.drift == ()
    assert [(c.label, c.hosts) for c in f.cohorts] == [
        ("trn2.48xlarge", ("host-a", "host-b")), ("trn3.48xlarge", ("host-c",))]


def test_drift_is_named_within_its_cohort(tmp_path: Path) -> None:
    fps = {"host-a": fingerprint("host-a"), "host-b": fingerprint("host-b"),
           "host-d": fingerprint("host-d"),
           "host-c": fingerprint("host-c", **TRN3),
           "host-e": fingerprint("host-e", **TRN3, neuron_driver="2.30.0.0")}
    fps["host-b"] = fingerprint("host-b", packages={"aws-neuronx-runtime-lib": "2.34.10.0"})
    run = make_run(tmp_path, tuple(fps), fingerprints=fps)
    f = build_summary(run).fleet
    assert [(d.host, d.field, d.value, d.majority_value, d.cohort) for d in f.drift] == [
        ("host-b", "neuron_packages.aws-neuronx-runtime-lib", "2.34.10.0", "2.33.10.0",
         "trn2.48xlarge"),
        # Two trn3 hosts that disagree: no majority, the first host's is the reference.
        ("host-e", "neuron_driver", "2.30.0.0", "2.29.0.0", "trn3.48xlarge")]
    assert not any(d.field in ("family", "instance_type") for d in f.drift)
    out = io.StringIO()
    assert report_main([str(run), "--fleet-gate", "--format", "json"], out=out,
                       err=io.StringIO()) == 3
    text = out.getvalue()
    assert "fleet gate fired (--fleet-gate): " in text
    assert "2 fingerprint field(s) drifting" in text
    assert text.strip().splitlines()[-1].endswith("exit 3 (a verdict failed)")


def test_other_releases_models_and_settings_are_cohorts_too(tmp_path: Path) -> None:
    fps = {"host-a": fingerprint("host-a"),
           "host-b": fingerprint("host-b", neuron_release="2.32.0"),
           "host-c": fingerprint("host-c", model={"source": "tiny-model", "revision": "r2"}),
           "host-d": fingerprint("host-d", units={"vllm-baseline.service": "c" * 64,
                                                  "vllm-cached.service": "b" * 64})}
    f = build_summary(make_run(tmp_path, tuple(fps), fingerprints=fps)).fleet
    assert f.drift == ()
    labels = {c.hosts: c.label for c in f.cohorts}
    assert labels[("host-b",)] == "Neuron 2.32.0, model tiny-model@r1, settings 1"
    assert labels[("host-c",)] == "Neuron 2.31.0, model tiny-model@r2, settings 1"
    assert labels[("host-d",)] == "Neuron 2.31.0, model tiny-model@r1, settings 2"
