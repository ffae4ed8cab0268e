"""No plot text is cut: every legend label fits inside its SVG (the hit-ratio legend's
"expected (served tokens: the verdict's)" ran past the right edge), and with a fleet's
real host names (an EC2 private DNS name) no group name, title or legend line either."""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

from report_runs import make_run

from prefixbench.report import plots
from prefixbench.report.build import build_summary

#: The widest a 12 px sans-serif glyph gets on average (0.6 em), used as the check.
EM = 0.6


def overflows(svg: str) -> list[str]:
    """Each left-aligned ``<text>`` whose estimated right end passes the SVG's width."""
    out = []
    for one in re.findall(r"<svg .*?</svg>", svg, flags=re.S):
        width = float(re.search(r'<svg [^>]*width="([\d.]+)"', one).group(1))  # type: ignore[union-attr]
        for x, attrs, text in re.findall(r'<text x="([\d.]+)"([^>]*)>([^<]*)</text>', one):
            if "text-anchor" in attrs or "rotate" in attrs:
                continue
            size = 14 if 'font-size="14"' in attrs else 12
            if float(x) + len(html.unescape(text)) * size * EM > width:
                out.append(html.unescape(text))
    return out


def test_the_hit_ratio_legend_is_whole(tmp_path: Path) -> None:
    s = build_summary(make_run(tmp_path, ("host-a", "host-b")))
    svg = plots.hit_ratio_plot(s)
    labels = re.findall(r'<text x="[\d.]+" y="[\d.]+">([^<]*)</text>', svg)
    assert any(label.startswith("expected (block-aligned") for label in labels), labels
    assert overflows(svg) == []


def test_a_long_series_name_fits_the_line_plot() -> None:
    name = "predicted: served-token expectation at concurrency 4 (band by arrival timing)"
    svg = plots.line_plot("t", [(name, [(1.0, 0.5), (2.0, 0.6)])], [], x_label="x",
                          y_label="y")
    assert overflows(svg) == []


def text_boxes(svg: str) -> list[tuple[str, float, float, float, float]]:
    """Each ``<text>``: its words and the box it spans (x0, y0, x1, y1), from its anchor,
    its rotation and a glyph 0.62 em wide and 1 em high (plots.text_width's estimate)."""
    out = []
    for attrs, words in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg):
        def num(name: str, a: str = attrs) -> float:
            m = re.search(rf'\b{name}="(-?[\d.]+)"', a)
            return float(m.group(1)) if m else 0.0
        size = num("font-size") or 12.0
        text = html.unescape(words)
        w = len(text) * size * 0.62
        x, y = num("x"), num("y")
        anchor = re.search(r'text-anchor="(\w+)"', attrs)
        lo = {"middle": -w / 2, "end": -w}.get(anchor.group(1) if anchor else "start", 0.0)
        rot = re.search(r"rotate\((-?[\d.]+)", attrs)
        a = math.radians(float(rot.group(1))) if rot else 0.0
        ends = [(x + t * math.cos(a), y + t * math.sin(a)) for t in (lo, lo + w)]
        up = (size * math.sin(a), -size * math.cos(a))  # the glyphs' height, rotated
        pts = [*ends, *((px + up[0], py + up[1]) for px, py in ends)]
        out.append((text, min(p[0] for p in pts), min(p[1] for p in pts),
                    max(p[0] for p in pts), max(p[1] for p in pts)))
    return out


def cut(svg: str) -> list[str]:
    """The texts that pass an edge of the SVG."""
    width = float(re.search(r'<svg [^>]*width="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    height = float(re.search(r'<svg [^>]*height="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    return [t for t, x0, y0, x1, y1 in text_boxes(svg)
            if x0 < 0 or y0 < 0 or x1 > width or y1 > height + 4]


def test_long_host_names_cut_no_text_of_the_run_reports_plots(tmp_path: Path) -> None:
    host = "trn2-fleet-01.us-east-1.compute.internal"
    s = build_summary(make_run(tmp_path, (host, "b")))
    svgs = [plots.hit_ratio_plot(s), plots.host_bars(s),
            *(plots.distribution_plot(h) for h in s.hosts)]
    assert all(host in svg for svg in svgs[:3])
    each = [one for svg in svgs for one in re.findall(r"<svg .*?</svg>", svg, flags=re.S)]
    assert len(each) == 1 + 3 + 2  # the hit ratios, TTFT per workload, per host
    assert [cut(one) for one in each] == [[]] * len(each)
