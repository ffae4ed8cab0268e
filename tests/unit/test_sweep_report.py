"""The sweep report of a synthetic two-point run: every column and the best point.

Mirrors what tests/integration/test_sweep_fleet.py asserts on a real sweep (two segment
sizes, high_overlap and no_overlap, one host), with values known from the fixtures.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from pathlib import Path
from typing import Any

import pytest
from report_runs import fixture_bench, make_run, scale_times

from prefixbench.report.phase import report_run

HOST = "a"
SIZES = (512, 1024)
WORKLOADS = ("high_overlap", "no_overlap")
BENCHES = tuple((conf, wl) for conf in ("baseline", "cached") for wl in WORKLOADS)
# Measured (cached server) and expected block-aligned hit ratios of the recorded fixtures.
HIT = {"high_overlap": 0.675, "no_overlap": 0.03875}
EXPECTED_HIT = {"high_overlap": 0.675, "no_overlap": 0.0}


def _scale_cached(host: str, conf: str, wl: str, rep: int, bench: dict[str, Any], *,
                  factor: float) -> dict[str, Any]:
    del host, wl, rep
    return scale_times(bench, factor) if conf == "cached" else bench


def _sweep_run(tmp_path: Path, factors: dict[int, float]) -> Path:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run-1", "schema_version": 1}))
    for size, factor in factors.items():
        make_run(run_dir / "sweep", (HOST,), run_id=f"seg{size}", benches=BENCHES,
                 transform=functools.partial(_scale_cached, factor=factor))
    return run_dir


def _md_table(md: str, heading: str) -> list[dict[str, str]]:
    lines = md.split(f"## {heading}\n", 1)[1].lstrip("\n").splitlines()
    table = []
    for line in lines:
        if not line.startswith("|"):
            break
        table.append([c.strip() for c in line.strip("|").split("|")])
    header, _, *rows = table
    return [dict(zip(header, row, strict=True)) for row in rows]


@pytest.mark.parametrize(("factors", "best", "runner_up"), [
    ({512: 0.8, 1024: 1.0}, 512, 1024),
    ({512: 1.2, 1024: 1.0}, 1024, 512),
])
def test_sweep_report_columns_and_best_point(tmp_path: Path, factors: dict[int, float],
                                             best: int, runner_up: int) -> None:
    run_dir = _sweep_run(tmp_path, factors)
    shown = report_run(run_dir)
    base = {wl: fixture_bench("baseline", wl)["median_ttft_ms"] for wl in WORKLOADS}
    cached = {(size, wl): fixture_bench("cached", wl)["median_ttft_ms"] * factors[size]
              for size in SIZES for wl in WORKLOADS}

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kind"] == "sweep"
    assert [(p["segment_size"], p["run_dir"]) for p in summary["points"]] == [
        (512, "seg512"), (1024, "seg1024")]
    assert summary["reference_workload"] == "high_overlap"
    rows = {(r["segment_size"], r["workload"]): r for r in summary["rows"]}
    assert len(summary["rows"]) == len(rows) == 4
    assert sorted(rows) == [(s, wl) for s in SIZES for wl in WORKLOADS]
    for (size, wl), row in rows.items():
        assert row["host"] == HOST
        assert row["baseline_median_ttft_ms"] == pytest.approx(base[wl])
        assert row["cached_median_ttft_ms"] == pytest.approx(cached[(size, wl)])
        assert row["ttft_reduction_pct"] == pytest.approx(
            (1 - cached[(size, wl)] / base[wl]) * 100)
        assert row["hit_ratio"] == pytest.approx(HIT[wl])
        assert row["expected_hit_ratio"] == pytest.approx(EXPECTED_HIT[wl])

    assert summary["best"] == {
        "segment_size": best, "workload": "high_overlap", "hosts": 1,
        "cached_median_ttft_ms": pytest.approx(cached[(best, "high_overlap")]),
        "ttft_reduction_pct": pytest.approx(
            (1 - cached[(best, "high_overlap")] / base["high_overlap"]) * 100),
        "runner_up": runner_up,
        "runner_up_ttft_ms": pytest.approx(cached[(runner_up, "high_overlap")]),
    }
    assert shown["best_segment_size"] == best
    line = (f"best segment size: {best} (cached median TTFT "
            f"{cached[(best, 'high_overlap')]:.1f} ms on high_overlap")
    assert any(x.startswith(line) for x in shown["lines"]), shown["lines"]

    md = (run_dir / "report.md").read_text()
    assert line in md.split("## Best segment size\n", 1)[1].split("\n## ", 1)[0]
    table = _md_table(md, "TTFT reduction and hit ratio per segment size")
    assert sorted((int(r["Segment size"]), r["Workload"]) for r in table) == sorted(rows)
    for r in table:
        size, wl = int(r["Segment size"]), r["Workload"]
        c = cached[(size, wl)]
        assert r == {
            "Segment size": str(size), "Host": HOST, "Workload": wl,
            "Baseline median TTFT (ms)": f"{base[wl]:.1f}",
            "Cached median TTFT (ms)": f"{c:.1f}",
            "TTFT reduction": f"{(1 - c / base[wl]) * 100:.1f}%",
            "Hit ratio (cached)": f"{HIT[wl] * 100:.2f}%",
            "Expected hit ratio": f"{EXPECTED_HIT[wl] * 100:.2f}%",
        }
    verdicts = _md_table(md, "Verdicts per point")
    assert [(r["Segment size"], r["Full report"]) for r in verdicts] == [
        ("512", "sweep/seg512/report.html"), ("1024", "sweep/seg1024/report.html")]

    results = list(csv.DictReader(io.StringIO((run_dir / "results.csv").read_text())))
    assert sorted((r["segment_size"], r["run_id"], r["configuration"], r["workload"])
                  for r in results) == sorted(
        (str(s), f"seg{s}", conf, wl) for s in SIZES for conf, wl in BENCHES)
    for r in results:
        if r["configuration"] == "cached":
            key = (int(r["segment_size"]), r["workload"])
            assert float(r["median_ttft_ms"]) == pytest.approx(cached[key])
    for size in SIZES:
        point = run_dir / "sweep" / f"seg{size}"
        assert json.loads((point / "summary.json").read_text())["run_id"] == f"seg{size}"
        assert (point / "report.html").is_file()


def test_rows_expect_the_served_tokens_when_a_record_has_them(tmp_path: Path) -> None:
    from prefixbench.measure.records import with_checksum  # noqa: PLC0415
    from prefixbench.report.sweep import build_sweep  # noqa: PLC0415

    run_dir = _sweep_run(tmp_path, {512: 0.5, 1024: 0.6})
    path = run_dir / "sweep" / "seg512" / HOST / "cached" / "high_overlap" / "rep1.json"
    data = json.loads(path.read_text())
    data["expected"].update(served_ratio=0.66, junction_lost_blocks=3)
    path.write_text(json.dumps(with_checksum(data)))
    rows = {(r.segment_size, r.workload): r for r in build_sweep(run_dir).rows}
    assert rows[(512, "high_overlap")].expected_hit_ratio == 0.66
    assert rows[(512, "high_overlap")].expected_block_aligned == 0.675
    assert rows[(1024, "high_overlap")].expected_hit_ratio == 0.675  # no served figure
