"""The report's what-if column: only for a custom workload, saying what it replayed, and
the run's tokenizer loaded once however many records replay it."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from report_runs import fixture_bench, fixture_delta, make_run, with_ttfts
from test_whatif_stream import mixed_file, workload
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import BenchmarkRecord, ResultKey
from prefixbench.report.build import build_summary
from prefixbench.report.cli import report_main


def _custom_run(root: Path, repetitions: int) -> Path:
    """The recorded run plus a custom workload ``mine`` (its prepared prompts and the
    run's tokenizer copy in the run directory), cached, ``repetitions`` records."""
    run = make_run(root, repetitions=repetitions)
    layout = RunLayout(root, "run-1")
    write_tokenizer(layout.tokenizer_dir)
    prompts = layout.prompts_path("mine")
    prompts.parent.mkdir(parents=True, exist_ok=True)
    mixed_file(prompts)
    w = workload(prompts, seed=0)
    d = fixture_delta("cached", "high_overlap")
    for rep in range(1, repetitions + 1):
        layout.write_result(BenchmarkRecord(
            key=ResultKey("host-a", "cached", "mine", rep), seed=0, bundle_version="0.1.0",
            started_at="2026-11-29T08:00:00+00:00", ended_at="2026-11-29T08:01:00+00:00",
            bench=with_ttfts(fixture_bench("cached", "high_overlap")), workload=w.to_dict(),
            metrics_delta=d.to_dict(), expected={"block_size": 16}, measured=d.measured()))
    return run


def test_a_custom_workloads_what_if_says_what_it_replayed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    run = _custom_run(tmp_path, repetitions=3)
    loads: list[Path] = []
    real = tokenizer._load

    def counted(path: Path) -> tokenizer.Tokenizer:
        loads.append(path)
        return real(path)

    monkeypatch.setattr(tokenizer, "_LOADED", {})
    monkeypatch.setattr(tokenizer, "_load", counted)
    rows = {(r.configuration, r.workload): r for r in build_summary(run).host("host-a").step9}
    mine = rows[("cached", "mine")]
    assert (mine.prediction_note or "").startswith(
        "replays prompts/mine.jsonl (the prompts the bench sent) with the server's block "
        "size 16 and KV capacity, at concurrency 1"), mine.prediction_note
    assert mine.predicted is not None
    assert len(loads) == 1, loads  # three records, one tokenizer load
    # The tutorial workloads beside it replay nothing.
    assert rows[("cached", "high_overlap")].predicted is None
    assert report_main([str(run), "--format", "md"], out=io.StringIO(),
                       err=io.StringIO()) in (3, 6, 7)
    text = (run / "report.md").read_text()
    assert "what-if replay (custom prompts)" in text and "what the what-if replayed" in text


def test_without_a_custom_workload_the_report_has_no_what_if_column(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    report_main([str(run), "--format", "md,json"], out=io.StringIO(), err=io.StringIO())
    assert "what-if" not in (run / "report.md").read_text()
    assert json.loads((run / "summary.json").read_text())["hosts"][0]["step9"]
    shutil.rmtree(run)
