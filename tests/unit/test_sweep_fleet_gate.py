"""``--fleet-gate`` on a sweep's run directory: each point's hosts are a fleet, as in the
point's own report, and a flag of any point exits 3 (docs/reading-the-report.md, "Exit
codes"), named by its point; without the flag it is said, and the exit stays the
verdicts'."""

from __future__ import annotations

import io
import json
from pathlib import Path

from report_runs import fingerprint, make_run

from prefixbench.report.cli import report_main

HOSTS = ("host-a", "host-b", "host-c")
#: host-b's runtime moved from the release's pin: drift inside the cohort.
DRIFTING = {"host-a": fingerprint("host-a"), "host-c": fingerprint("host-c"),
            "host-b": fingerprint("host-b", packages={"aws-neuronx-runtime-lib": "2.34.10.0"})}
STEADY = {h: fingerprint(h) for h in HOSTS}


def _seg_point(sweep: Path, name: str, fps: dict[str, dict[str, object]]) -> None:
    """A point whose high-overlap benches PASS on every host (the recorded fixtures)."""
    run = make_run(sweep, HOSTS, run_id=name, fingerprints=fps,
                   benches=(("baseline", "high_overlap"), ("cached", "high_overlap")))
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = [w for w in data["workloads"] if w["name"] == "high_overlap"]
    (run / "run.json").write_text(json.dumps(data))


def _sweep(root: Path, kind: str, *fleets: dict[str, dict[str, object]]) -> Path:
    run = root / f"{kind}-run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": f"{kind}-run", "schema_version": 1}))
    for k, fps in enumerate(fleets, 1):
        if kind == "seg":
            _seg_point(run / "sweep", f"seg{512 * k}", fps)
        else:  # the cached high_overlap fixture measured 67.5%: within 2 points of 66.5%
            make_run(run / "sweep", HOSTS, run_id=f"kv{100 * k}", fingerprints=fps,
                     benches=(("cached", "high_overlap"),),
                     expected=lambda *_: {"served_ratio": 0.665})
    return run


def _report(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = report_main([*args, "--format", "json"], out=out, err=io.StringIO())
    return code, out.getvalue()


def test_the_fleet_gate_fires_on_a_drifting_point_of_a_segment_size_sweep(
        tmp_path: Path) -> None:
    run = _sweep(tmp_path, "seg", STEADY, DRIFTING)
    code, text = _report([str(run)])
    assert code == 0, text
    assert "fleet: seg1024: 1 fingerprint field(s) drifting" in text
    code, text = _report([str(run), "--fleet-gate"])
    assert code == 3, text
    assert ("fleet gate fired (--fleet-gate): seg1024: 1 fingerprint field(s) drifting"
            in text)
    assert "seg512:" not in text.split("fleet gate fired")[1].splitlines()[0]
    assert text.strip().splitlines()[-1] == "overall: PASS; exit 3 (a verdict failed)"


def test_the_fleet_gate_fires_on_a_drifting_point_of_a_capacity_sweep(
        tmp_path: Path) -> None:
    run = _sweep(tmp_path, "kv", DRIFTING, STEADY)
    assert _report([str(run)])[0] == 0
    code, text = _report([str(run), "--fleet-gate"])
    assert code == 3, text
    assert "fleet gate fired (--fleet-gate): kv100: 1 fingerprint field(s) drifting" in text


def test_a_steady_sweep_passes_the_fleet_gate(tmp_path: Path) -> None:
    code, text = _report([str(_sweep(tmp_path, "seg", STEADY, STEADY)), "--fleet-gate"])
    assert code == 0, text
    assert "fleet" not in text
