"""The docs sections a report links to, carried inside ``report.html`` so that the file
handed over explains itself wherever it is opened.

Links from the report to the docs (:mod:`prefixbench.report.doclinks`) are relative to
the checkout the report was written from: dead once the file is mailed or uploaded. For
the HTML report they point instead at an in-file anchor (:data:`INLINE_BASE`), and
:func:`explanation_blocks` appends, under "Explanations", the text of each linked section
as read from the bundle's docs (its links flattened to their text, which would not
resolve either). :data:`~prefixbench.report.doclinks.DOCS_BASE_ENV` (a published copy of
the docs) still makes them plain links.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from prefixbench.report.doclinks import (
    DOCS_DIR,
    FAILURE_DOCS,
    INLINE_BASE,
    VERDICT_DOCS,
    anchor_id,
)

__all__ = ["INLINE_BASE", "Piece", "anchor_id", "explanation_blocks", "section_text"]

_HEADING: Final = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_LINK: Final = re.compile(r"\[([^\[\]]+)\]\([^()\s]+\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def section_text(target: str, docs_dir: Path = DOCS_DIR) -> tuple[str, list[str]]:
    """The heading and the lines of the section ``target`` names, up to the next heading
    of its level or above; ``("", [])`` when the page or heading is not there."""
    page, _, anchor = target.partition("#")
    path = docs_dir / page
    if not path.is_file():
        return "", []
    lines = path.read_text(encoding="utf-8").splitlines()
    level, title, body = 0, "", []
    fenced = False
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if level and m and len(m.group(1)) <= level:
            break
        if level:
            body.append(line)
        elif m and _slug(m.group(2)) == anchor:
            level, title = len(m.group(1)), m.group(2)
    return title, body


#: One piece of an explanation: ``(kind, value, anchor)``, kind ``heading2``,
#: ``heading3``, ``para``, ``bullets`` (a tuple of items) or ``pre``; the report's
#: document turns each into its block.
Piece = tuple[str, Any, str]


def _pieces(lines: Sequence[str]) -> list[Piece]:
    """Markdown lines as paragraphs, bullets, and tables or code as preformatted text;
    links flattened to their text."""
    out: list[Piece] = []
    chunk: list[str] = []

    def flush() -> None:
        if not chunk:
            return
        text = [_LINK.sub(r"\1", c) for c in chunk]
        if text[0].lstrip().startswith(("|", "```")):
            out.append(("pre", "\n".join(t for t in text if not t.lstrip().startswith("```")),
                        ""))
        elif text[0].lstrip().startswith("- "):
            items: list[str] = []
            for t in text:
                if t.lstrip().startswith("- "):
                    items.append(t.lstrip()[2:])
                elif items:
                    items[-1] += " " + t.strip()
            out.append(("bullets", tuple(items), ""))
        else:
            out.append(("para", " ".join(t.strip() for t in text), ""))
        chunk.clear()

    for line in lines:
        if line.strip():
            chunk.append(line)
        else:
            flush()
    flush()
    return out


def explanation_blocks(used: Iterable[str], docs_dir: Path = DOCS_DIR) -> list[Piece]:
    """"Explanations": each docs section whose in-file id is in ``used``, in the order of
    the first use, under a heading carrying that id."""
    targets = {anchor_id(t): t for t in (*VERDICT_DOCS.values(), *FAILURE_DOCS.values())}
    ids = [i for i in dict.fromkeys(used) if i in targets]
    if not ids:
        return []
    out: list[Piece] = [("heading2", "Explanations (from the bundle's docs)", ""),
                        ("para", "The sections of the prefixbench docs this report links "
                                 "to, carried in the file so that it reads the same "
                                 "wherever it is opened.", "")]
    for i in ids:
        title, body = section_text(targets[i], docs_dir)
        page = targets[i].split("#", 1)[0]
        out.append(("heading3", f"{title or targets[i]} (docs/{page})", i))
        out += _pieces(body) if body else [(
            "para", f"docs/{targets[i]} of the prefixbench bundle (not found beside this "
                    f"installation)", "")]
    return out
