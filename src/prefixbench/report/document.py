"""The report as a sequence of blocks, rendered to Markdown or to one HTML file."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from prefixbench.report import actions, explain, fleet, goodput, headline, issues, plots, verdicts
from prefixbench.report.doclinks import INLINE_BASE, failure_link, verdict_link
from prefixbench.report.economics import compilations
from prefixbench.report.model import HostSummary, Summary
from prefixbench.report.tables import (
    Table,
    bench_table,
    coldwarm_table,
    departures_table,
    drift_table,
    failures_table,
    fleet_table,
    groups_table,
    issues_table,
    shortfall_lines,
    step7_lines,
    step7_table,
    step8_lines,
    step8_table,
    step9_table,
    time_cost_table,
    verdict_table,
)
from prefixbench.report.vocab import Thresholds

__all__ = ["Block", "Bullets", "Heading", "Para", "Plot", "Pre", "blocks", "html_of",
           "markdown_of", "render_html", "render_markdown", "with_explanations"]


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    #: The HTML id (a section the report's own links point at); "" for none.
    anchor: str = ""


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Pre:
    text: str


@dataclass(frozen=True)
class Plot:
    title: str
    svg: str


Block = Heading | Para | Bullets | Pre | Table | Plot


def _goodput_blocks(h: HostSummary, docs: str) -> list[Block]:
    """The goodput ladder's section of one host (nothing without a ladder)."""
    g = h.goodput
    if g is None:
        return []
    header, rows = goodput.goodput_table_rows(g)
    return [Heading(3, "Benefit at a latency target (goodput)"),
            Para(f"Each workload at request rates {', '.join(f'{r:g}' for r in g.ladder.rates)}"
                 f" req/s, no concurrency cap; a rate is met when the "
                 f"p{g.ladder.percentile:g} TTFT of its requests is at most "
                 f"{g.ladder.ttft_ms:g} ms and none failed."),
            Table(header, tuple(rows), numeric=(1, 2, 3, 4)),
            Bullets(tuple(goodput.goodput_lines(g))),
            Para("How to read the check `no_overlap_no_uplift`: "
                 + verdict_link(docs, "no_overlap_no_uplift"))]


def _ttft_blocks(h: HostSummary) -> list[Block]:
    """The cached benches' TTFT predicted from the baseline (prefixbench.report.
    ttft_predicted), beside the measured one."""
    if not h.ttft_predicted:
        return []
    rows = tuple((r["workload"], f"{r['predicted_median_ttft_ms']:.1f}",
                  f"{r['measured_median_ttft_ms']:.1f}", f"{r['predicted_p99_ttft_ms']:.1f}",
                  f"{r['measured_p99_ttft_ms']:.1f}", r["verdict"]) for r in h.ttft_predicted)
    return [Heading(3, "TTFT predicted from the baseline"),
            Table(("Cached workload", "Median predicted (ms)", "Median measured (ms)",
                   "p99 predicted (ms)", "p99 measured (ms)", ""), rows),
            Para(f"Step-time model fitted to this host's baseline: "
                 f"{h.ttft_predicted[0]['fit']}; replayed through "
                 f"{h.ttft_predicted[0].get('scheduler', 'Scheduler')}, the scheduler the "
                 f"server runs."
                 + (" On Neuron the model follows AWS's design documents and the plugin's "
                    "source, never checked on Trainium."
                    if h.ttft_predicted[0].get("platform") == "neuron" else ""))]


def _run_line(s: Summary) -> str:
    r = s.run
    parts = [f"run `{s.run_id}`"]
    if r.get("started_at"):
        parts.append(f"started {r['started_at']}")
    parts.append(f"ended {r['ended_at']}" if r.get("ended_at") else "still running (no ended_at)")
    if r.get("bundle_version"):
        parts.append(f"bundle {r['bundle_version']}")
    if r.get("inventory"):
        parts.append(f"inventory {r['inventory']}")
    if r.get("repetitions"):
        parts.append(f"{r['repetitions']} repetition(s)")
    return ", ".join(parts)


def threshold_lines(t: Thresholds) -> list[str]:
    """Every rule the report decides with, worded by the code that applies it: the four
    verdicts and the load rule (:mod:`prefixbench.report.verdicts`), the common issue that
    has a threshold and the fleet checks."""
    return [*verdicts.method_lines(t),
            f"Common issue, hits without a TTFT gain: {issues.no_gain_rule(t)}",
            f"Fleet outlier: {fleet.outlier_rule(t)}",
            f"Fleet hit-ratio departure: {fleet.departure_rule(t)}"]


def blocks(s: Summary, docs: str = "docs/") -> list[Block]:
    """The report's content; ``docs`` is the base of the links to the docs sections that
    explain each verdict and failure (prefixbench.report.doclinks.docs_base)."""
    out: list[Block] = [
        Heading(1, f"Prefix caching benchmark report: {s.run_id}"
                   + (" (SIMULATED fleet)" if headline.simulated(s) else "")),
        Para(headline.provenance(s)),
        *(Para(line) for line in headline.instance_type_problems(s)),
        *((Para(headline.unchecksummed(s)),) if s.unchecksummed else ()),
        Para(f"**Bottom line.** {headline.bottom_line(s)}"),
        Para(f"Overall: **{s.status}**. {_run_line(s)}; generated {s.generated_at}."),
    ]
    todo = actions.action_lines(s)
    if todo:
        out += [Heading(2, "What to do next"), Bullets(tuple(todo))]
    if not s.hosts:
        out.append(Para("No host has results yet."))
    overview = tuple(
        (h.host, actions.host_status(h),
         *(v.status if h.benches else actions.NO_DATA for v in h.verdicts), str(len(h.issues)),
         str(len(h.failures))) for h in s.hosts)
    out += [Heading(2, "Hosts at a glance"), Table(
        ("Host", "Overall", *(r.title for r in verdicts.RULES), "Issues", "Failures"),
        overview)]
    timing = time_cost_table(s)
    if timing.rows:
        out += [Heading(2, "Time and cost"), timing,
                Para("Bench wall: first bench start to last bench end on the host "
                     "(provisioning and the model download are not in it). Cost: instance-"
                     "hours x prefixbench_price_per_instance_hour; per million output tokens "
                     "of the high-overlap workload at each server's measured throughput. "
                     "Idle: from each server's healthy_at to its first bench, summed over "
                     "the configurations: paid for, measuring nothing (with the hosts at "
                     "their own pace, the default, the host's own bench client start and, "
                     "for a compile follower, the wait for its key's leader; with "
                     "prefixbench_host_strategy linear also the other hosts' starts); its "
                     "cost at the same price."
                     + _compile_line(s))]
    if s.hosts:
        out += [Heading(2, "Plots"),
                Plot("Median TTFT by host and configuration", plots.host_bars(s)),
                Plot("Hit ratio measured vs expected", plots.hit_ratio_plot(s))]
    for h in s.hosts:
        out += [Heading(2, f"Host {h.host}: {actions.host_status(h)}"),
                Heading(3, "Confirmation"), verdict_table(h, docs)]
        if h.issues:
            out += [Heading(3, "Common issues found"), issues_table(h)]
        out += [Heading(3, "Step 7: four runs side by side"), step7_table(h),
                Bullets(tuple(step7_lines(h))),
                Heading(3, "Step 8: sustained load (cached, concurrency 1 vs 4)"),
                step8_table(h), Bullets(tuple(step8_lines(h))),
                Heading(3, "Step 9: cache hit rate"), step9_table(h),
                *((Para(h.kv_cache + "."),) if h.kv_cache else ()),
                *((Para("Why measured differs from the tutorial's formula, cause by cause "
                        "(percentage points of hit ratio):"),
                   Bullets(tuple(shortfall_lines(h)))) if h.shortfalls else ()),
                *_goodput_blocks(h, docs),
                *_ttft_blocks(h),
                Heading(3, "Cold vs warm requests"),
                Para("Cold = first request to use its prefix (reconstructed from the seed); "
                     "a cold request pays the full prefill, so it sets the tail of a cached "
                     "run without being a regression."),
                coldwarm_table(h)]
        if any(b.per_request_ms for b in h.benches):
            out.append(Plot(f"{h.host}: per-request distribution by run",
                            plots.distribution_plot(h)))
        out += [Heading(3, "All runs (median across repetitions, [min-max])"), bench_table(h)]
        if h.failures:
            out += [Heading(3, "Failures")]
            for f in h.failures:
                out += [Para(f"{f.configuration} / {f.workload} rep{f.repetition}: {f.error}"
                             f" (file {f.path}). What to do: {failure_link(docs, f.error)}")]
                if f.log_tail:
                    out.append(Pre(f.log_tail))
    fs = s.fleet
    out += [Heading(2, "Fleet reproducibility"),
            Para(f"{len(fs.hosts)} host(s). Outlier hosts: "
                 f"{', '.join(fs.outlier_hosts) or 'none'}. Hit-ratio departures > "
                 f"{s.thresholds.hit_ratio_max_abs_diff * 100:.1f} pp: "
                 f"{len(fs.hit_departures)}. Fingerprint groups: {len(fs.fingerprint_groups)}"
                 f"; drifting fields: {len(fs.drift)}."),
            fleet_table(fs)]
    if len(fs.cohorts) > 1:
        out.append(Para(
            "Cohorts (hosts that should be equal: the same instance type, Neuron release, "
            "model and settings; spread, outliers and drift are within each): "
            + "; ".join(f"{c.label} ({', '.join(c.hosts)})" for c in fs.cohorts) + "."))
    if fs.mixed_releases:
        out.append(Para(fleet.releases_line(fs)))
    if fs.hit_departures:
        out += [Heading(3, "Hosts whose hit ratio departs from the expected one"),
                departures_table(fs)]
    out += [Heading(3, "Fingerprints"), groups_table(fs)]
    if fs.drift:
        out += [Heading(3, "Drift: a host that differs from its cohort's majority"),
                drift_table(fs)]
    if fs.hosts_without_fingerprint:
        out.append(Para("No fingerprint for: " + ", ".join(fs.hosts_without_fingerprint)))
    if s.failures:
        out += [Heading(2, "Failures"), failures_table(s, docs)]
    if s.warnings:
        out += [Heading(2, "Warnings"), Bullets(s.warnings)]
    out += [Heading(2, "Thresholds"), Bullets(tuple(threshold_lines(s.thresholds)))]
    return out


# -- Markdown ----------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    if not t.rows:
        return "_none_"
    head = "| " + " | ".join(_md_cell(h) for h in t.headers) + " |"
    sep = "|" + "|".join("---:" if i in t.numeric else "---"
                         for i in range(len(t.headers))) + "|"
    body = ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join([head, sep, *body])


def render_markdown(s: Summary, docs: str = "docs/") -> str:
    return markdown_of(blocks(s, docs))


def markdown_of(content: Sequence[Block]) -> str:
    """Blocks as one Markdown document."""
    parts: list[str] = []
    for b in content:
        if isinstance(b, Heading):
            parts.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            parts.append(b.text)
        elif isinstance(b, Bullets):
            parts.append("\n".join(f"- {i}" for i in b.items))
        elif isinstance(b, Pre):
            parts.append("```\n" + b.text + "\n```")
        elif isinstance(b, Table):
            parts.append(_md_table(b))
        elif isinstance(b, Plot):
            parts.append(f"_(plot in report.html: {b.title})_")
    return "\n\n".join(parts) + "\n"


# -- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;
color:#1d232a;background:#fff;max-width:1340px}
h1{font-size:24px;margin:0 0 8px}h2{font-size:20px;border-bottom:2px solid #dde3ea;
padding-bottom:4px;margin-top:32px}h3{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f3f5f8}td.num{text-align:right;font-variant-numeric:tabular-nums}
.PASS{background:#d9f5dd;color:#135f24;font-weight:600}
.FAIL{background:#fde0de;color:#8a1a12;font-weight:600}
.INCONCLUSIVE{background:#fff3cd;color:#6b5200;font-weight:600}
.NOT_RUN{background:#eceff1;color:#37474f;font-weight:600}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}
figure{margin:8px 0 16px}figcaption{font-size:13px;color:#57606a}
ul{margin:4px 0 12px}code{background:#f3f5f8;padding:0 3px}
"""


#: A Markdown link ``[text](url)`` after HTML escaping (the url holds no space or ")").
_LINK = re.compile(r"\[([^\[\]]+)\]\(([^()\s]+)\)")


def _links(escaped: str) -> str:
    """Markdown links of already escaped text as anchors."""
    return _LINK.sub(r'<a href="\2">\1</a>', escaped)


def _inline(text: str) -> str:
    """Escape, then turn ``**x**``, backquoted code and ``[text](url)`` links into tags
    (the only markup used)."""
    out = _links(html.escape(text))
    while "**" in out:
        a = out.find("**")
        b = out.find("**", a + 2)
        if b < 0:
            break
        inner = out[a + 2:b]
        out = out[:a] + f'<strong class="{inner}">{inner}</strong>' + out[b + 2:]
    while out.count("`") >= 2:
        a = out.find("`")
        b = out.find("`", a + 1)
        out = out[:a] + "<code>" + out[a + 1:b] + "</code>" + out[b + 1:]
    return out


def _html_table(t: Table) -> str:
    if not t.rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    rows = []
    for row in t.rows:
        cells = []
        for i, c in enumerate(row):
            cls = []
            if i in t.numeric:
                cls.append("num")
            if c in ("PASS", "FAIL", "INCONCLUSIVE", "NOT_RUN"):
                cls.append(c)
            attr = f' class="{" ".join(cls)}"' if cls else ""
            text = _links(html.escape(c)) if i in t.links else html.escape(c)
            cells.append(f"<td{attr}>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render_html(s: Summary, docs: str = "docs/") -> str:
    """The HTML report; with ``docs`` :data:`~prefixbench.report.doclinks.INLINE_BASE` its
    links point at the explanations it carries (prefixbench.report.explain)."""
    content = blocks(s, docs)
    if docs == INLINE_BASE:
        content = with_explanations(content)
    return html_of(content, f"prefixbench report {s.run_id}")


def with_explanations(content: Sequence[Block]) -> list[Block]:
    """``content`` and, after it, the docs sections its in-file links
    (:data:`~prefixbench.report.doclinks.INLINE_BASE`) point at
    (:func:`prefixbench.report.explain.explanation_blocks`)."""
    text = " ".join(_block_text(b) for b in content)
    used = re.findall(r"\]\(#(doc-[a-z0-9-]+)\)", text)
    return [*content, *(_piece_block(p) for p in explain.explanation_blocks(used))]


def _piece_block(piece: explain.Piece) -> Block:
    kind, value, anchor = piece
    if kind.startswith("heading"):
        return Heading(int(kind[-1]), value, anchor)
    if kind == "bullets":
        return Bullets(value)
    return Pre(value) if kind == "pre" else Para(value)


def _block_text(b: Block) -> str:
    if isinstance(b, Para | Heading | Pre):
        return b.text
    if isinstance(b, Bullets):
        return " ".join(b.items)
    if isinstance(b, Table):
        return " ".join(c for row in b.rows for c in row)
    return ""


def html_of(content: Sequence[Block], title_text: str) -> str:
    """Blocks as one self-contained HTML page."""
    parts: list[str] = []
    for b in content:
        if isinstance(b, Heading):
            anchor = f' id="{html.escape(b.anchor)}"' if b.anchor else ""
            parts.append(f"<h{b.level}{anchor}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            parts.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Pre):
            parts.append(f"<pre>{html.escape(b.text)}</pre>")
        elif isinstance(b, Table):
            parts.append(_html_table(b))
        elif isinstance(b, Plot):
            parts.append(f"<figure>{b.svg}<figcaption>{html.escape(b.title)}"
                         f"</figcaption></figure>")
    title = html.escape(title_text)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def _compile_line(s: Summary) -> str:
    """How many server starts compiled, with the shared compile cache's words."""
    compiled, starts = compilations([h.time for h in s.hosts if h.time is not None])
    if not starts:
        return ""
    unshared = sorted({(h.time.host, why) for h in s.hosts if h.time is not None
                       for why in h.time.unshared.values()})
    alone = "".join(f" {host} compiled its own graphs, not shared: {why}."
                    for host, why in unshared)
    return (f" Graphs: {compiled} of {starts} server starts compiled; the others restored "
            f"them from the fleet's compile cache or reused their own (compiled: the start "
            f"added graphs to its cache).{alone}")
