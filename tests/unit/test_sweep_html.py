"""A sweep's report.html is handed over like a run's: each link resolves inside the file
(the docs sections it links to carried in it, no path of the checkout) or, for each
point's own report, inside the run directory (a relative link; report.md keeps the path
as text), and no text of its plot is cut, however many hosts or however long a name."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from test_exit_codes import kv_sweep, passing_run, seg_sweep
from test_plot_text import cut

from prefixbench.report import doclinks
from prefixbench.report.capacity import (
    CapacityCurveView,
    CapacityRow,
    CapacitySummary,
    build_capacity,
)
from prefixbench.report.capacity_doc import curve_plot, report_capacity
from prefixbench.report.sweep import report_sweep

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _self_contained(page: str) -> list[str]:
    """The page's in-file links, each checked to point at an id the page has."""
    hrefs = [h for h in re.findall(r'<a href="([^"]+)">', page) if h.startswith("#")]
    ids = set(re.findall(r' id="([^"]+)"', page))
    assert all(h[1:] in ids for h in hrefs), (hrefs, ids)
    assert "../" not in page and 'href="docs/' not in page
    return hrefs


def _point_links(run: Path) -> list[str]:
    """The report.html's links to the points' own reports: each relative to the run
    directory (where the page is), shown as its own path, and a file that is there."""
    page = (run / "report.html").read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"#][^"]*)">([^<]*)</a>', page)
    assert all(text == href and (run / href).is_file() for href, text in links), links
    return [href for href, _ in links]


@pytest.fixture(autouse=True)
def _no_published_docs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(doclinks.DOCS_BASE_ENV, raising=False)


def test_the_capacity_report_carries_the_capacity_curve_section(tmp_path: Path) -> None:
    run = kv_sweep(tmp_path, 0.665, 0.725)
    report_capacity(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    target = doclinks.VERDICT_DOCS["capacity_curve"]
    assert _self_contained(page) == ["#" + doclinks.anchor_id(target)]
    # The section's first sentence, as docs/capacity-and-goodput.md words it.
    docs = (DOCS / target.split("#")[0]).read_text(encoding="utf-8")
    body = docs.split("## Reading the capacity curve", 1)[1].strip().split("\n\n")[0]
    first = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", " ".join(body.split())).split("`")[0]
    assert first[:40] in html.unescape(page), first
    # report.md, read in the checkout, links the docs folder.
    md = (run / "report.md").read_text(encoding="utf-8")
    assert f"]({doclinks.docs_base(run)}{target})" in md
    # Each point's report: a link in the page, its path as text in report.md.
    assert _point_links(run) == ["sweep/kv100/report.html", "sweep/kv200/report.html"]
    assert ("Each point's full report: `sweep/kv100/report.html`, "
            "`sweep/kv200/report.html`.") in md


def test_the_sweep_report_links_each_verdict_to_the_section_it_carries(tmp_path: Path) -> None:
    run = seg_sweep(tmp_path, passing_run, passing_run)
    report_sweep(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    hrefs = _self_contained(page)
    judged = ("high_overlap_ttft_lower", "hit_rate_matches_expected",
              "no_overlap_no_regression", "sustained_benefit_preserved")
    assert sorted(hrefs) == sorted("#" + doclinks.anchor_id(doclinks.VERDICT_DOCS[v])
                                   for v in judged)
    assert "Explanations (from the bundle's docs)" in html.unescape(page)
    # The table of points links each point's report; report.md keeps the path as text.
    assert _point_links(run) == ["sweep/seg512/report.html", "sweep/seg1024/report.html"]
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "| 512 | PASS | none | sweep/seg512/report.html |" in md
    assert "](sweep/" not in md


def test_a_published_docs_base_makes_them_plain_links(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(doclinks.DOCS_BASE_ENV, "https://example.org/pb/docs")
    run = kv_sweep(tmp_path, 0.665)
    report_capacity(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert ('href="https://example.org/pb/docs/capacity-and-goodput.md'
            '#reading-the-capacity-curve"') in page
    assert "Explanations (from the bundle's docs)" not in html.unescape(page)


def test_the_capacity_plot_cuts_no_text_with_many_hosts_and_long_names(
        tmp_path: Path) -> None:
    name = "my_prompts_from_the_support_chat_of_the_last_quarter_long_name"
    hosts = [f"trn2-fleet-{i:02d}.us-east-1.compute.internal" for i in range(24)]
    rows = tuple(CapacityRow(point_blocks=b, host=h, workload=name, repetition=1,
                             capacity_blocks=b - 1, measured=0.3 + 0.01 * i, predicted=0.3,
                             method="served", evictions=None, status="PASS", detail="")
                 for i, h in enumerate(hosts) for b in (100, 200))
    curve = CapacityCurveView(workload=name, block_size=32,
                              points=tuple((x, min(0.6, x / 400)) for x in range(20, 400, 20)),
                              unbounded_ratio=0.6, working_set_blocks=240)
    s = build_capacity(kv_sweep(tmp_path, 0.665))
    s = CapacitySummary(run_id="r", run={}, generated_at="t", points=s.points, rows=rows,
                        curves=(curve,), max_diff=0.02)
    svg = curve_plot(s, curve)
    assert len(re.findall(r"<circle", svg)) >= len(hosts) * 3  # every host drawn ...
    assert cut(svg) == []  # ... and named whole in the legend
    assert f"measured, {hosts[-1]}" in svg
