"""Synthetic run directories built from the recorded fixtures, for the report tests.

The fixture files map to the run directory contract like this (seed 0, as recorded):

    baseline/high_overlap  <- baseline_high_overlap.json   + metrics_baseline_high_overlap_*
    baseline/no_overlap    <- baseline_no_overlap.json     + metrics_baseline_no_overlap_*
    cached/high_overlap    <- cached_high_overlap.json     + metrics_cached_high_overlap_*
    cached/no_overlap      <- cached_no_overlap.json       + metrics_cached_no_overlap_*
    cached/sustained_c4    <- cached_sustained_c4.json     + metrics_cached_sustained_c4_*
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.measure.layout import RunLayout, write_json_atomic
from prefixbench.measure.metrics import delta, extract_signals
from prefixbench.measure.records import BenchmarkRecord, ResultKey

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"
BLOCK_SIZE = 128
BENCHES = (
    ("baseline", "high_overlap"),
    ("baseline", "no_overlap"),
    ("cached", "high_overlap"),
    ("cached", "no_overlap"),
    ("cached", "sustained_c4"),
)

PACKAGES = {
    "aws-neuronx-dkms": "2.29.0.0",
    "aws-neuronx-runtime-lib": "2.33.10.0",
    "aws-neuronx-collectives": "2.33.10.0",
    "aws-neuronx-tools": "2.31.13.0",
}


def fixture_bench(configuration: str, workload: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (FIXTURES / f"{configuration}_{workload}.json").read_text(encoding="utf-8"))
    return data


def fixture_delta(configuration: str, workload: str) -> Any:
    before = (FIXTURES / f"metrics_{configuration}_{workload}_before.txt").read_text()
    after = (FIXTURES / f"metrics_{configuration}_{workload}_after.txt").read_text()
    return delta(extract_signals(before), extract_signals(after))


def scale_times(bench: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """A bench result whose TTFTs and latencies are ``factor`` times longer."""
    out = dict(bench)
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "std_ttft_ms"):
        out[key] = bench[key] * factor
    for key in ("latencies", "ttfts"):
        if key in bench:
            out[key] = [x * factor for x in bench[key]]
    out["output_throughput"] = bench["output_throughput"] / factor
    return out


def fingerprint(host: str, **changes: Any) -> dict[str, Any]:
    packages = dict(PACKAGES)
    packages.update(changes.pop("packages", {}))
    data = {
        "schema_version": 1, "host": host, "instance_type": "trn2.48xlarge",
        "family": "trn2", "platform": "cpu", "os": "debian 12", "kernel": "6.1.0-25-amd64",
        "neuron_release": "2.31.0", "neuron_packages": packages,
        "neuron_driver": "2.29.0.0", "vllm_version": "0.32.0",
        "vllm_neuron_version": "0.21.0.1.0.0",
        "units": {"vllm-baseline.service": "a" * 64, "vllm-cached.service": "b" * 64},
        "model": {"source": "tiny-model", "revision": "r1"},
        "collected_at": "2026-11-29T08:00:00+00:00",
    }
    data.update(changes)
    return data


def with_ttfts(bench: Mapping[str, Any]) -> dict[str, Any]:
    """A fixture bench with per-request TTFTs (seconds), which the recorded files predate
    (they keep ``latencies`` only): the latencies scaled so that their median is the
    recorded ``median_ttft_ms``, which keeps each request's rank. A test double of what
    ``--save-detailed`` saves."""
    out = dict(bench)
    lat = sorted(bench["latencies"])
    mid = len(lat) // 2
    med = lat[mid] if len(lat) % 2 else (lat[mid - 1] + lat[mid]) / 2
    scale = bench["median_ttft_ms"] / 1000 / med
    out["ttfts"] = [x * scale for x in bench["latencies"]]
    return out


def make_run(
    root: Path,
    hosts: Sequence[str] = ("host-a",),
    *,
    run_id: str = "run-1",
    repetitions: int = 1,
    benches: Sequence[tuple[str, str]] = BENCHES,
    transform: Callable[[str, str, str, int, dict[str, Any]], dict[str, Any]] | None = None,
    fingerprints: Mapping[str, dict[str, Any]] | None = None,
    ttfts: bool = True,
    renames: Mapping[str, str] | None = None,
    extras: Callable[[str, str, str, int], dict[str, Any]] | None = None,
    expected: Callable[[str, str, str, int], dict[str, Any]] | None = None,
) -> Path:
    """Write ``root/run_id`` with every host running the fixture benches.

    ``transform(host, configuration, workload, rep, bench)`` may alter a bench result;
    ``ttfts`` adds per-request TTFTs (:func:`with_ttfts`); ``renames`` gives workloads
    other names (the criteria must not depend on them); ``extras(host, configuration,
    workload, rep)`` gives a record's ``extra`` and ``expected(...)`` keys added to its
    ``expected``. A bench named in ``benches``
    without a recorded fixture (``baseline/sustained_c4``) is built by ``transform``
    from the cached one.
    """
    layout = RunLayout(root, run_id)
    names = dict(renames or {})
    workloads = {w.name: Workload.from_dict({**w.to_dict(), "name": names.get(w.name, w.name)}
                                            ).with_seed(0)
                 for w in tutorial_workloads()}
    write_json_atomic(layout.run_dir / "run.json", {
        "schema_version": 1, "run_id": run_id, "started_at": "2026-11-29T08:00:00+00:00",
        "ended_at": "2026-11-29T09:00:00+00:00", "bundle_version": "0.1.0",
        "inventory": "trn2_fleet", "hosts": list(hosts),
        "configurations": ["baseline", "cached"],
        "workloads": [w.to_dict() for w in workloads.values()],
        "repetitions": repetitions})
    for host in hosts:
        fp = (fingerprints or {}).get(host) or fingerprint(host)
        write_json_atomic(layout.run_dir / host / "fingerprint.json", fp)
        for conf, wl in benches:
            recorded = conf if (FIXTURES / f"{conf}_{wl}.json").exists() else "cached"
            d = fixture_delta(recorded, wl)
            w = workloads[wl]
            for rep in range(1, repetitions + 1):
                bench = fixture_bench(recorded, wl)
                if ttfts:
                    bench = with_ttfts(bench)
                if transform is not None:
                    bench = transform(host, conf, wl, rep, bench)
                layout.write_result(BenchmarkRecord(
                    key=ResultKey(host, conf, w.name, rep), seed=0, bundle_version="0.1.0",
                    started_at="2026-11-29T08:00:00+00:00",
                    ended_at="2026-11-29T08:01:00+00:00", bench=bench,
                    workload=w.to_dict(), metrics_delta=d.to_dict(),
                    expected={**w.expected_ratios(BLOCK_SIZE),
                              **(expected(host, conf, wl, rep) if expected else {})},
                    measured=d.measured(),
                    extra=extras(host, conf, wl, rep) if extras else {}))
    return layout.run_dir
