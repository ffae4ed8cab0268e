"""No plot text is cut: every legend label fits inside its SVG (the hit-ratio legend's
"expected (served tokens: the verdict's)" ran past the right edge)."""

from __future__ import annotations

import html
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
