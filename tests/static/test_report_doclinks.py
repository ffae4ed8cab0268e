"""The report links every verdict and every kind of failure to a docs section that
exists: a page of docs/ and a heading in it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from test_docs_commands import anchors

from prefixbench.bench import benchrun
from prefixbench.measure.layout import RunLayout, write_json_atomic
from prefixbench.measure.records import FailureRecord, ResultKey
from prefixbench.report import capacity, doclinks, goodput, load
from prefixbench.report.build import build_summary
from prefixbench.report.write import write_outputs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.mark.parametrize("target", sorted({*doclinks.VERDICT_DOCS.values(),
                                           *doclinks.FAILURE_DOCS.values()}))
def test_every_target_is_a_page_and_a_heading(target: str) -> None:
    page, _, anchor = target.partition("#")
    assert (DOCS / page).is_file(), f"no page docs/{page}"
    assert anchor in anchors(DOCS / page), f"no heading #{anchor} in docs/{page}"


def _failure(layout: RunLayout, workload: str, error: str) -> None:
    layout.write_failure(FailureRecord(
        key=ResultKey("host-a", "cached", workload, 1), seed=1,
        started_at="2026-12-01T00:00:00+00:00", ended_at="2026-12-01T00:01:00+00:00",
        bundle_version="0.1.0", error=error))


def _run(tmp_path: Path) -> Path:
    """A run whose benches all failed, one of each kind, as their producers word them;
    host-b ran nothing."""
    layout = RunLayout(tmp_path, "run-1")
    write_json_atomic(layout.run_dir / "run.json", {
        "schema_version": 1, "run_id": "run-1", "hosts": ["host-a", "host-b"],
        "started_at": "2026-12-01T00:00:00+00:00", "ended_at": "2026-12-01T01:00:00+00:00",
        "configurations": ["baseline", "cached"], "workloads": [], "repetitions": 1})
    restart = benchrun.service_restart({"NRestarts": "0"}, {"NRestarts": "1"})
    disk = benchrun.results_space_problem(layout.run_dir, min_free=2**62)
    assert restart and disk
    _failure(layout, "w-crash", "vllm bench serve exited 1")
    _failure(layout, "w-unhealthy", "not run: the server did not become healthy in 1800 s")
    _failure(layout, "w-invalid", "invalid record: 3 of 5 requests completed")
    _failure(layout, "w-restart", restart)
    _failure(layout, "w-disk", disk)
    edited = layout.run_dir / "host-a" / "cached" / "w-edited" / "rep1.json"
    write_json_atomic(edited, {"schema_version": 1, "kind": "result", "checksum": "0"})
    return layout.run_dir


EXPECTED_KINDS = {"w-crash": "bench_failed", "w-unhealthy": "server_unhealthy",
                  "w-invalid": "invalid_record", "w-restart": "server_restarted",
                  "w-disk": "results_disk", "w-edited": "record_rejected",
                  "-": "host_dropped"}


def test_every_failure_kind_is_recognised_from_the_words_its_producer_writes(
        tmp_path: Path) -> None:
    s = build_summary(_run(tmp_path))
    kinds = {f.workload: doclinks.failure_kind(f.error) for f in s.failures}
    assert kinds == EXPECTED_KINDS
    assert set(kinds.values()) == set(doclinks.FAILURE_DOCS)


def test_the_html_links_each_verdict_and_failure(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(doclinks.DOCS_BASE_ENV, raising=False)
    run_dir = _run(tmp_path)
    s = build_summary(run_dir)
    write_outputs(s, run_dir, ("html", "md"))
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    hrefs = re.findall(r'<a href="([^"]+)">', html)
    ids = set(re.findall(r' id="([^"]+)"', html))
    # report.html is handed over as one file: every link points at a section it carries.
    assert hrefs and all(h.startswith("#") and h[1:] in ids for h in hrefs), hrefs
    for h in s.hosts:
        for v in h.verdicts:
            assert "#" + doclinks.anchor_id(doclinks.VERDICT_DOCS[v.name]) in hrefs, v.name
    for kind in EXPECTED_KINDS.values():
        # in the host's section and in the run's failure table
        assert hrefs.count("#" + doclinks.anchor_id(doclinks.FAILURE_DOCS[kind])) == 2, kind
    # The Markdown report, read in the checkout, links the docs folder.
    base = doclinks.docs_base(run_dir)
    assert (run_dir / base).resolve() == DOCS.resolve()
    assert "](" + base + doclinks.FAILURE_DOCS["server_restarted"] + ")" in \
        (run_dir / "report.md").read_text(encoding="utf-8")


def test_the_html_carries_each_linked_section_and_no_path_of_the_checkout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(doclinks.DOCS_BASE_ENV, raising=False)
    run_dir = _run(tmp_path)
    write_outputs(build_summary(run_dir), run_dir, ("html",))
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "../" not in html and 'href="docs/' not in html
    # The section that explains a restarted server, as docs/failures-and-resume.md has it.
    page, _, anchor = doclinks.FAILURE_DOCS["server_restarted"].partition("#")
    text = (DOCS / page).read_text(encoding="utf-8")
    heading = next(line.lstrip("#").strip() for line in text.splitlines()
                   if line.startswith("#") and anchor in line.lower().replace(" ", "-"))
    first = text.split(heading, 1)[1].strip().split("\n\n", 1)[0].splitlines()[0]
    i = html.index(f'id="{doclinks.anchor_id(doclinks.FAILURE_DOCS["server_restarted"])}"')
    assert re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", first).split("`")[0][:30] in \
        html[i:].replace("&#x27;", "'")


def test_a_docs_base_from_the_environment(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(doclinks.DOCS_BASE_ENV, "https://example.org/prefixbench/docs")
    run_dir = _run(tmp_path)
    write_outputs(build_summary(run_dir), run_dir, ("html",))
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert ('<a href="https://example.org/prefixbench/docs/reading-the-report.md'
            '#hit-rate-as-expected">reading-the-report</a>') in html


def test_the_sweep_and_goodput_verdicts_are_the_names_their_reports_use() -> None:
    """capacity_curve and no_overlap_no_uplift are named where they are decided."""
    assert "capacity_curve" in inspect.getsource(capacity)
    assert '"no_overlap_no_uplift"' in inspect.getsource(goodput)
    assert load.dropped_hosts.__doc__
