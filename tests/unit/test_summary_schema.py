"""Every key ``summary.json`` emits is documented in ``docs/summary-schema.md``, in the
section of the object that holds it: a fixture run's summary (three hosts, two
repetitions, the served expectation with its range) and a capacity sweep's, walked key by
key."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_runs import make_run

from prefixbench.measure.records import json_safe
from prefixbench.report.build import build_summary
from prefixbench.report.capacity import build_capacity

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "summary-schema.md"

#: The section that documents the keys of the object at each path (``[]``: a list's
#: items; ``*``: any key of a map).
SECTIONS = {
    "": "## Top level",
    "thresholds": "## Top level",
    "hosts[]": "## Host",
    "hosts[].shortfalls.*[]": "## Host",
    "hosts[].benchmarks[]": "### Bench",
    "hosts[].benchmarks[].cold_warm": "### Bench",
    "hosts[].step7": "### Step7",
    "hosts[].step7.rows[]": "### Step7",
    "hosts[].step8": "### Step8",
    "hosts[].step8.concurrency_1": "### Step8",
    "hosts[].step8.concurrency_4": "### Step8",
    "hosts[].step9[]": "### Step9Row",
    "hosts[].verdicts[]": "### Verdict",
    "hosts[].issues[]": "### Issue",
    "hosts[].failures[]": "### Failure",
    "failures[]": "### Failure",
    "hosts[].time": "### Host time and cost",
    "fleet": "## Fleet",
    "fleet.metrics[]": "## Fleet",
    "fleet.metrics[].outliers[]": "## Fleet",
    "fleet.hit_ratio_departures[]": "## Fleet",
    "fleet.fingerprint_groups[]": "## Fleet",
    "fleet.drift[]": "## Fleet",
    "fleet.cohorts[]": "## Fleet",
}
#: The capacity sweep's summary.
SWEEP_SECTIONS = {p: "## A KV-capacity sweep's" for p in ("", "points[]", "rows[]", "curves[]")}
#: The segment-size sweep's summary.
SEG_SECTIONS = {p: "## A segment-size sweep's" for p in ("", "points[]", "rows[]", "best")}
#: Objects kept as read or named freely (``run.json``, ``fingerprint.json``, a verdict's
#: numbers by name): not walked.
OPAQUE = {"run", "hosts[].fingerprint", "fleet.fingerprint_groups[].identity",
          "fleet.cohorts[].key",
          "hosts[].verdicts[].numbers"}
#: Objects whose keys are data (hosts, workloads, releases), not schema.
MAPS = {"fleet.metrics[].values", "fleet.metrics[].robust_z",
        "hosts[].shortfalls", "hosts[].step7.ttft_reduction_pct",
        "hosts[].step7.throughput_gain", "hosts[].roles", "fleet.neuron_releases",
        "hosts[].time.startup_s", "hosts[].time.graphs", "hosts[].time.idle_s",
        "hosts[].time.leader_wait_s"}
#: An Agg (the conventions): one figure across repetitions.
AGG = {"median", "min", "max", "n", "values"}


def section(doc: str, heading: str) -> str:
    """The text from ``heading`` to the next heading."""
    start = doc.index("\n" + heading) + 1
    end = doc.find("\n#", start + len(heading))
    return doc[start:] if end < 0 else doc[start:end]


def documented(text: str) -> set[str]:
    """Every name written as code in ``text``."""
    return {name for code in re.findall(r"`([^`]+)`", text)
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code)}


def keys(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(the path of the object, a key it holds), every object of ``value``; a map's keys
    are data (walked as ``*``), an Agg's are the conventions'."""
    if isinstance(value, dict):
        if path in OPAQUE:
            return
        if path in MAPS:
            for v in value.values():
                yield from keys(v, f"{path}.*")
            return
        if set(value) == AGG:
            return
        for k, v in value.items():
            yield path, k
            yield from keys(v, f"{path}.{k}" if path else k)
    elif isinstance(value, list):
        for v in value:
            yield from keys(v, f"{path}[]")


def undocumented(summary: dict[str, Any], sections: dict[str, str], doc: str) -> list[str]:
    missing = []
    for path, key in sorted(set(keys(summary))):
        where = sections.get(path)
        if where is None:
            missing.append(f"{path}: no section of {SCHEMA.name} maps this object (add it "
                           f"to the test's SECTIONS or MAPS)")
        elif key not in documented(section(doc, where)):
            missing.append(f"{path}.{key}" if path else key)
    return missing


@pytest.fixture(scope="module")
def doc() -> str:
    return SCHEMA.read_text(encoding="utf-8")


def _expected(host: str, conf: str, workload: str, rep: int) -> dict[str, Any]:
    return {"served_ratio": 0.5 + rep / 100, "served_unbounded_ratio": 0.6,
            "served_full_attention_ratio": 0.62, "junction_lost_blocks": 1,
            "served_band_lo": 0.45, "served_band_hi": 0.55, "served_concurrency": 4}


def test_every_key_of_a_runs_summary_is_documented(tmp_path: Path, doc: str) -> None:
    run = make_run(tmp_path, ("host-a", "host-b", "host-c"), repetitions=2,
                   expected=_expected)
    summary = json.loads(json.dumps(json_safe(build_summary(run).to_dict())))
    walked = dict.fromkeys(p for p, _ in keys(summary))
    # The fixture reaches the objects the schema describes (a test that walks nothing
    # checks nothing).
    for path in ("hosts[].benchmarks[]", "hosts[].step9[]", "hosts[].verdicts[]",
                 "hosts[].step7.rows[]", "fleet.metrics[]", "hosts[].time"):
        assert path in walked, path
    assert undocumented(summary, SECTIONS, doc) == []


def test_every_key_of_a_capacity_sweeps_summary_is_documented(tmp_path: Path,
                                                              doc: str) -> None:
    run = tmp_path / "run-1"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    make_run(run / "sweep", ("a",), run_id="kv100", benches=(("cached", "sustained_c4"),),
             expected=lambda *_: {"served_ratio": 0.745, "served_evicted_blocks": 12,
                                  "served_concurrency": 4, "max_num_seqs": 4,
                                  "max_num_batched_tokens": 1024, "served_band_lo": 0.70,
                                  "served_band_hi": 0.76})
    summary = json.loads(json.dumps(json_safe(build_capacity(run).to_dict())))
    summary.pop("run")  # run.json as written
    assert summary["rows"] and summary["points"]
    assert undocumented(summary, SWEEP_SECTIONS, doc) == []


def test_every_key_of_a_segment_size_sweeps_summary_is_documented(tmp_path: Path,
                                                                    doc: str) -> None:
    from prefixbench.report.sweep import build_sweep  # noqa: PLC0415

    run = tmp_path / "run-1"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    for size in (512, 1024):
        make_run(run / "sweep", ("a",), run_id=f"seg{size}")
    summary = json.loads(json.dumps(json_safe(build_sweep(run).to_dict())))
    summary.pop("run")  # run.json as written
    assert summary["rows"] and summary["points"] and summary["best"]
    assert undocumented(summary, SEG_SECTIONS, doc) == []


def test_an_undocumented_key_is_named(doc: str) -> None:
    assert undocumented({"hosts": [{"host": "a", "no_such_key": 1}]}, SECTIONS, doc) == [
        "hosts[].no_such_key"]
    assert undocumented({"hosts": [{"new_object": {"x": 1}}]}, SECTIONS, doc)[1].startswith(
        "hosts[].new_object: no section")
