"""Where the bundle's docs explain each verdict and each kind of failure, as links the
report renders next to them.

A target is a page of the repository's ``docs/`` folder and a heading's anchor in it
(``reading-the-report.md#hit-rate-as-expected``); ``tests/static/test_report_doclinks.py``
checks that every target names an existing page and heading. The links are relative to
the folder the report is written into, pointing at this checkout's ``docs/``; the
environment variable :data:`DOCS_BASE_ENV` points them at another copy, e.g. a published
URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["DOCS_BASE_ENV", "DOCS_DIR", "FAILURE_DOCS", "INLINE_BASE", "VERDICT_DOCS",
           "anchor_id", "docs_base", "failure_kind", "failure_link", "html_docs_base", "link",
           "verdict_link"]

#: The docs base of a report that carries the sections it links to (report.html: see
#: prefixbench.report.explain): each link points at an id in the file.
INLINE_BASE: Final = "#inline:"

#: Environment variable holding the docs' base URL (a folder, with or without a final /).
DOCS_BASE_ENV: Final = "PREFIXBENCH_DOCS_BASE"

#: The checkout's docs folder (src/prefixbench/report/ -> the repository root).
DOCS_DIR: Final = Path(__file__).resolve().parents[3] / "docs"

_REPORT: Final = "reading-the-report.md"
_FAILURES: Final = "failures-and-resume.md"
_SIZING: Final = "capacity-and-goodput.md"

#: Verdict name (``Verdict.name``, and the sweep and goodput checks) -> docs target.
VERDICT_DOCS: Final[Mapping[str, str]] = {
    "high_overlap_ttft_lower": f"{_REPORT}#ttft-lower-high-overlap",
    "no_overlap_no_regression": f"{_REPORT}#no-regression-no-overlap",
    "hit_rate_matches_expected": f"{_REPORT}#hit-rate-as-expected",
    "sustained_benefit_preserved": f"{_REPORT}#benefit-under-sustained-load",
    "capacity_curve": f"{_SIZING}#reading-the-capacity-curve",
    "no_overlap_no_uplift": f"{_SIZING}#no-uplift-without-reuse",
}

#: Failure kind -> docs target. :func:`failure_kind` decides the kind from the error.
FAILURE_DOCS: Final[Mapping[str, str]] = {
    "bench_failed": f"{_FAILURES}#a-bench-failed",
    "server_unhealthy": f"{_FAILURES}#a-server-never-became-healthy",
    "invalid_record": f"{_FAILURES}#a-record-failed-its-checks",
    "server_restarted": f"{_FAILURES}#the-server-restarted-during-a-bench",
    "record_rejected": f"{_FAILURES}#a-record-was-edited-after-it-was-written",
    "host_dropped": f"{_FAILURES}#a-host-dropped-out",
    "results_disk": f"{_FAILURES}#the-results-disk-is-full",
}

#: How each kind's error begins or what it holds, tried in this order; the first match
#: wins, and an error matching none is a plain failed bench. The texts are the ones the
#: bench action, the bench record's checks and the report's loader write.
_KIND_SIGNS: Final = (
    ("record_rejected", "result rejected,"),
    ("host_dropped", "no result at all from this host"),
    ("server_unhealthy", "not run:"),
    ("server_restarted", "the server restarted during the bench"),
    ("invalid_record", "invalid record:"),
    ("results_disk", "results disk"),
)


def failure_kind(error: str) -> str:
    """The kind of a failure marker's error (a key of :data:`FAILURE_DOCS`)."""
    for kind, sign in _KIND_SIGNS:
        if error.startswith(sign) or sign in error:
            return kind
    return "bench_failed"


def docs_base(out_dir: str | Path | None = None) -> str:
    """The base the links start with, ending in ``/``: :data:`DOCS_BASE_ENV` when set;
    else the checkout's docs folder relative to ``out_dir`` (where the report is written);
    else ``docs/``."""
    base = os.environ.get(DOCS_BASE_ENV, "").strip()
    if not base and out_dir is not None and DOCS_DIR.is_dir():
        base = Path(os.path.relpath(DOCS_DIR, Path(out_dir).resolve())).as_posix()
    base = base or "docs"
    return base if base.endswith("/") else base + "/"


def html_docs_base() -> str:
    """The base of an HTML report's links: the published docs (:data:`DOCS_BASE_ENV`)
    when set, else :data:`INLINE_BASE`: an HTML report is handed over as one file, so it
    links the sections it carries (prefixbench.report.explain), never the checkout."""
    return docs_base() if os.environ.get(DOCS_BASE_ENV, "").strip() else INLINE_BASE


def anchor_id(target: str) -> str:
    """The in-file id of a docs target (``page.md#anchor``) in a report that carries its
    explanations (:data:`INLINE_BASE`)."""
    return "doc-" + re.sub(r"[^a-z0-9]+", "-", target.lower()).strip("-")


def link(base: str, target: str) -> str:
    """A Markdown link to ``target`` under ``base``, named after the page; with
    :data:`INLINE_BASE`, to the section carried in the report itself."""
    page = target.split("#", 1)[0].removesuffix(".md")
    if base == INLINE_BASE:
        return f"[{page}](#{anchor_id(target)})"
    return f"[{page}]({base}{target})"


def verdict_link(base: str, name: str) -> str:
    """The link explaining a verdict, or "" for a name without a page."""
    target = VERDICT_DOCS.get(name)
    return link(base, target) if target else ""


def failure_link(base: str, error: str) -> str:
    """The link explaining a failure with this error."""
    return link(base, FAILURE_DOCS[failure_kind(error)])
