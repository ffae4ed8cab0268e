"""Inline SVG plots, written by hand (no plotting library, no external assets)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from prefixbench.measure.stats import percentile
from prefixbench.report.model import HostSummary, Summary
from prefixbench.report.vocab import CACHED

__all__ = ["distribution_plot", "grouped_bars", "hit_ratio_plot", "host_bars", "line_plot",
           "nice_ticks", "text_width"]

COLORS = {"baseline": "#8c959f", "cached": "#2f6fde", "queries": "#2f6fde",
          "by_source": "#54aeff", "cold": "#d1242f", "warm": "#2f6fde"}
_FONT = 'font-family="system-ui,sans-serif" font-size="12"'
#: The angle (degrees) group names under bars are drawn at.
_SLANT = 25


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def text_width(text: str, size: float = 12.0) -> int:
    """A generous width (px) of ``text`` in the plots' sans-serif font at ``size``: 0.62
    em a character (wider than the average glyph of system-ui fonts), so a margin sized
    with it never cuts a label."""
    return math.ceil(len(text) * size * 0.62)


def nice_ticks(hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values from 0 to at least ``hi``."""
    if hi <= 0 or not math.isfinite(hi):
        return [0.0, 1.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    count = math.ceil(hi / step - 1e-9)
    return [i * step for i in range(count + 1)]


def _num(x: float) -> str:
    return f"{x:.1f}"


def grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, str]],
    values: Sequence[Sequence[float | None]],
    *,
    unit: str,
    markers: Sequence[Sequence[tuple[float, str, str]]] | None = None,
    fraction: bool = False,
) -> str:
    """Vertical grouped bars: ``values[g][s]`` for group ``g`` and series ``s``.

    ``markers[g]`` are horizontal lines across group ``g``: (value, color, label).
    ``fraction`` shows the axis in percent.
    """
    bar_w, gap = 26, 22
    legend = [(n, c, "rect") for n, c in series]
    seen: set[str] = set()
    for row in markers or []:
        for _v, c, label in row:
            if label not in seen:
                seen.add(label)
                legend.append((label, c, "line"))
    # The legend sits right of the plot: the margin holds its longest label whole. The
    # group names run down-left from under their group at 25 degrees: the left and bottom
    # margins hold the longest whole, and the image the title and every legend line.
    top = 34
    right = max(230, 12 + 18 + text_width(max((lb for lb, _c, _k in legend), key=len,
                                                 default="")) + 12)
    plot_h = 220
    group_w = bar_w * len(series) + gap
    longest = max((text_width(g) for g in groups), default=0)
    slant = math.radians(_SLANT)
    left = max(100, math.ceil(longest * math.cos(slant) - gap / 2 - bar_w * len(series) / 2
                              + 12 * math.sin(slant)) + 4)
    bottom = max(90, 16 + math.ceil(longest * math.sin(slant) + 12 * math.cos(slant)) + 6)
    width = max(left + max(group_w * len(groups), 200) + right,
                left + text_width(title, 14) + 10)
    height = max(top + plot_h + bottom, top + 8 + 18 * len(legend) + 10)
    finite = [v for row in values for v in row if v is not None and math.isfinite(v)]
    finite += [m[0] for row in (markers or []) for m in row]
    ticks = nice_ticks(max(finite, default=1.0) * 1.05)
    ymax = ticks[-1] or 1.0

    def y(v: float) -> float:
        return top + plot_h - plot_h * v / ymax

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" {_FONT}>',
           f'<text x="{left}" y="18" font-size="14" font-weight="600">{_e(title)}</text>']
    for t in ticks:
        label = f"{t * 100:.0f}%" if fraction else f"{t:g}"
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{_num(y(t))}" '
                   f'y2="{_num(y(t))}" stroke="#e5e8ec"/>'
                   f'<text x="{left - 6}" y="{_num(y(t) + 4)}" text-anchor="end">{label}</text>')
    ux = left - 48
    out.append(f'<text x="{ux}" y="{top + plot_h / 2}" transform="rotate(-90 {ux} '
               f'{top + plot_h / 2})" text-anchor="middle">{_e(unit)}</text>')
    for g, name in enumerate(groups):
        x0 = left + g * group_w + gap / 2
        for s, (_sname, color) in enumerate(series):
            v = values[g][s]
            if v is None or not math.isfinite(v):
                continue
            x = x0 + s * bar_w
            out.append(f'<rect x="{_num(x)}" y="{_num(y(v))}" width="{bar_w - 3}" '
                       f'height="{_num(top + plot_h - y(v))}" fill="{color}">'
                       f'<title>{_e(name)} {_e(series[s][0])}: {v:.4g}</title></rect>')
        for value, color, label in (markers[g] if markers else ()):
            out.append(f'<line x1="{_num(x0 - 4)}" x2="{_num(x0 + bar_w * len(series) + 1)}" '
                       f'y1="{_num(y(value))}" y2="{_num(y(value))}" stroke="{color}" '
                       f'stroke-width="2.5"><title>{_e(label)}: {value:.4g}</title></line>')
        cx = x0 + bar_w * len(series) / 2
        out.append(f'<text x="{_num(cx)}" y="{top + plot_h + 16}" text-anchor="end" '
                   f'transform="rotate(-{_SLANT} {_num(cx)} {top + plot_h + 16})">'
                   f'{_e(name)}</text>')
    out.append(f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" '
               f'y2="{top + plot_h}" stroke="#57606a"/>')
    for i, (label, color, kind) in enumerate(legend):
        ly = top + 8 + i * 18
        lx = width - right + 12
        if kind == "rect":
            out.append(f'<rect x="{lx}" y="{ly - 9}" width="12" height="12" fill="{color}"/>')
        else:
            out.append(f'<line x1="{lx}" x2="{lx + 12}" y1="{ly - 3}" y2="{ly - 3}" '
                       f'stroke="{color}" stroke-width="2.5"/>')
        out.append(f'<text x="{lx + 18}" y="{ly + 1}">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def host_bars(s: Summary) -> str:
    """Per host, median TTFT (ms) of each configuration, one chart per workload."""
    workloads: list[str] = []
    for h in s.hosts:
        for b in h.benches:
            if b.workload not in workloads:
                workloads.append(b.workload)
    charts = []
    confs = [("baseline", COLORS["baseline"]), ("cached", COLORS["cached"])]
    for wl in workloads:
        hosts = [h.host for h in s.hosts]
        values = []
        for h in s.hosts:
            row: list[float | None] = []
            for conf, _c in confs:
                found = h.bench(conf, wl)
                row.append(found.median_ttft_ms.median
                           if found and found.median_ttft_ms else None)
            values.append(row)
        charts.append(grouped_bars(f"Median TTFT: {wl}", hosts, confs, values, unit="ms"))
    return '<div style="display:flex;flex-wrap:wrap;gap:12px">' + "".join(charts) + "</div>"


def hit_ratio_plot(s: Summary) -> str:
    """Both measured hit ratios per host and cached workload, marked with the expectation
    the hit-rate verdict uses (``BenchSummary.verdict_expectation``) and the tutorial's
    formula beside it."""
    groups: list[str] = []
    values: list[list[float | None]] = []
    markers: list[list[tuple[float, str, str]]] = []
    for h in s.hosts:
        for b in h.benches:
            if b.configuration != CACHED:
                continue
            groups.append(f"{h.host} {b.workload}")
            values.append([b.hit_ratio_queries.median if b.hit_ratio_queries else None,
                           b.hit_ratio_by_source.median if b.hit_ratio_by_source else None])
            row = []
            held = b.verdict_expectation
            if held is not None:
                row.append((held[0], "#1d232a", held[1]))
            if b.expected_tutorial is not None:
                row.append((b.expected_tutorial, "#bf8700", "expected (tutorial formula)"))
            markers.append(row)
    if not groups:
        return "<p><em>no cached runs</em></p>"
    return grouped_bars("Cache hit ratio, measured vs expected", groups,
                        [("hits / queries", COLORS["queries"]),
                         ("cache_hit / (hit+compute)", COLORS["by_source"])],
                        values, unit="hit ratio", markers=markers, fraction=True)


def distribution_plot(h: HostSummary) -> str:
    """Box and strip plot of per-request times per run; cold requests in red."""
    rows = [b for b in h.benches if b.per_request_ms]
    left, right, top, row_h = 210, 30, 40, 46
    height = top + row_h * len(rows) + 40
    left = max(left, 10 + max((text_width(f"{b.configuration} / {b.workload}")
                               for b in rows), default=0) + 8)
    hi = max((max(b.per_request_ms) for b in rows), default=1.0)
    ticks = nice_ticks(hi * 1.02, 8)
    xmax = ticks[-1] or 1.0
    plot_w = 1100 - left - right

    def x(v: float) -> float:
        return left + plot_w * v / xmax

    sources = {b.cold_warm.source for b in rows if b.cold_warm}
    what = "TTFT" if sources == {"ttfts"} or not sources else "latency"
    title = (f"{h.host}: per-request {what} (ms); red = cold (first use of a prefix), "
             f"blue = warm")
    width = max(1100, left + text_width(title, 14) + 10)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" {_FONT}>',
           f'<text x="{left}" y="18" font-size="14" font-weight="600">{_e(title)}</text>']
    bottom = top + row_h * len(rows)
    for t in ticks:
        out.append(f'<line x1="{_num(x(t))}" x2="{_num(x(t))}" y1="{top - 6}" y2="{bottom}" '
                   f'stroke="#eef0f3"/><text x="{_num(x(t))}" y="{bottom + 16}" '
                   f'text-anchor="middle">{t:g}</text>')
    for i, b in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        vals = list(b.per_request_ms)
        q1, med, q3 = (percentile(vals, q) for q in (25, 50, 75))
        out.append(f'<text x="{left - 10}" y="{_num(cy + 4)}" text-anchor="end">'
                   f'{_e(b.configuration)} / {_e(b.workload)}</text>')
        out.append(f'<line x1="{_num(x(min(vals)))}" x2="{_num(x(max(vals)))}" '
                   f'y1="{_num(cy)}" y2="{_num(cy)}" stroke="#57606a"/>')
        out.append(f'<rect x="{_num(x(q1))}" y="{_num(cy - 12)}" '
                   f'width="{_num(max(x(q3) - x(q1), 1))}" height="24" fill="#f3f5f8" '
                   f'stroke="#57606a"/>')
        out.append(f'<line x1="{_num(x(med))}" x2="{_num(x(med))}" y1="{_num(cy - 12)}" '
                   f'y2="{_num(cy + 12)}" stroke="#1d232a" stroke-width="2"/>')
        cold = b.per_request_cold or (False,) * len(vals)
        for j, (v, c) in enumerate(zip(vals, cold, strict=False)):
            jitter = ((j * 7919) % 17 - 8) * 1.1
            color = COLORS["cold"] if c else COLORS["warm"]
            r = 3.2 if c else 2.2
            out.append(f'<circle cx="{_num(x(v))}" cy="{_num(cy + jitter)}" r="{r}" '
                       f'fill="{color}" fill-opacity="{0.9 if c else 0.55}"/>')
    out.append(f'<text x="{left + plot_w / 2}" y="{bottom + 32}" text-anchor="middle">'
               f'{what} (ms)</text></svg>')
    return "".join(out)


#: Colors of successive series of a line plot.
LINE_COLORS = ("#2f6fde", "#bf8700", "#1a7f37", "#8250df", "#cf222e", "#57606a")


def line_plot(
    title: str,
    lines: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    dots: Sequence[tuple[str, Sequence[tuple[float, float]]]] = (),
    *,
    x_label: str,
    y_label: str,
    vlines: Sequence[tuple[float, str]] = (),
    fraction: bool = False,
) -> str:
    """Lines (``(name, [(x, y), ...])``, drawn through their points in x order), dots
    (measured points, one color per series after the lines'), and vertical markers
    ``(x, label)``. The x axis starts at 0; ``fraction`` shows y in percent."""
    left, top, bottom = 70, 34, 50
    names = [label for _x, label in vlines] + [n for n, _p in (*lines, *dots)]
    right = max(260, 16 + 18 + text_width(max(names, key=len, default="")) + 12)
    # The axis labels span the plot at most, the title and the legend fit the image.
    plot_w = max(460, text_width(x_label) + 20)
    plot_h = max(240, text_width(y_label) + 20)
    width = max(left + plot_w + right, left + text_width(title, 14) + 10)
    height = max(top + plot_h + bottom, top + 8 + 18 * len(names) + 10)
    xs = [x for _n, pts in (*lines, *dots) for x, _y in pts] + [x for x, _l in vlines]
    ys = [y for _n, pts in (*lines, *dots) for _x, y in pts]
    xticks = nice_ticks(max(xs, default=1.0))
    yticks = nice_ticks(max(ys, default=1.0) * 1.05)
    xmax, ymax = xticks[-1] or 1.0, yticks[-1] or 1.0

    def px(v: float) -> float:
        return left + plot_w * v / xmax

    def py(v: float) -> float:
        return top + plot_h - plot_h * v / ymax

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}" {_FONT}>',
           f'<text x="{left}" y="18" font-size="14" font-weight="600">{_e(title)}</text>']
    for t in yticks:
        label = f"{t * 100:.0f}%" if fraction else f"{t:g}"
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{_num(py(t))}" '
                   f'y2="{_num(py(t))}" stroke="#e5e8ec"/>'
                   f'<text x="{left - 6}" y="{_num(py(t) + 4)}" text-anchor="end">{label}</text>')
    for t in xticks:
        out.append(f'<text x="{_num(px(t))}" y="{top + plot_h + 16}" '
                   f'text-anchor="middle">{t:g}</text>')
    out.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 36}" '
               f'text-anchor="middle">{_e(x_label)}</text>')
    uy = top + plot_h / 2
    out.append(f'<text x="{left - 50}" y="{uy}" transform="rotate(-90 {left - 50} {uy})" '
               f'text-anchor="middle">{_e(y_label)}</text>')
    out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
               f'y2="{top + plot_h}" stroke="#57606a"/>')
    legend: list[tuple[str, str, str]] = []
    for x, label in vlines:
        out.append(f'<line x1="{_num(px(x))}" x2="{_num(px(x))}" y1="{top}" '
                   f'y2="{top + plot_h}" stroke="#8c959f" stroke-dasharray="4 3">'
                   f'<title>{_e(label)}: {x:g}</title></line>')
        legend.append((label, "#8c959f", "dash"))
    for i, (name, pts) in enumerate(lines):
        color = LINE_COLORS[i % len(LINE_COLORS)]
        path = " ".join(f"{_num(px(x))},{_num(py(y))}" for x, y in sorted(pts))
        if path:
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"><title>{_e(name)}</title></polyline>')
        legend.append((name, color, "line"))
    for i, (name, pts) in enumerate(dots):
        color = LINE_COLORS[(len(lines) + i) % len(LINE_COLORS)]
        for x, y in pts:
            out.append(f'<circle cx="{_num(px(x))}" cy="{_num(py(y))}" r="4.5" '
                       f'fill="{color}"><title>{_e(name)}: {x:g}, {y:.4g}</title></circle>')
        legend.append((name, color, "dot"))
    for i, (label, color, kind) in enumerate(legend):
        ly = top + 8 + i * 18
        lx = left + plot_w + 16
        if kind == "dot":
            out.append(f'<circle cx="{lx + 6}" cy="{ly - 3}" r="4.5" fill="{color}"/>')
        else:
            dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
            out.append(f'<line x1="{lx}" x2="{lx + 12}" y1="{ly - 3}" y2="{ly - 3}" '
                       f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{lx + 18}" y="{ly + 1}">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)
