"""Which Hub commit a model directory holds: the logic of the prefixbench_hf_revision module.

``hf download REPO --revision REV --local-dir DIR`` resolves REV (a branch, a tag or a
commit) to one commit and keeps, for every file it wrote, a metadata file
``DIR/.cache/huggingface/download/<path>.metadata`` whose first line is that commit
(then the file's ETag and a timestamp). Reading those files gives the resolved commit on
the host, with no Hub request and no token. Plain Python; no Ansible imports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECORD_NAME = ".prefixbench-model.json"
METADATA_DIR = Path(".cache") / "huggingface" / "download"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class RevisionError(Exception):
    """The directory does not name one commit; the message says why."""


def is_commit(text: str) -> bool:
    """True for a full 40-hex commit id."""
    return bool(_COMMIT.match(text))


def commit_of_metadata(texts: Mapping[str, str]) -> str:
    """The one commit named by the metadata files ``{path: text}``.

    Raises :class:`RevisionError` when there are none, when a first line is not a commit,
    or when files of more than one commit are mixed (an interrupted re-download).
    """
    if not texts:
        raise RevisionError("no Hub download metadata (was the model downloaded with "
                            "hf download --local-dir?)")
    commits: dict[str, list[str]] = {}
    for path, text in texts.items():
        first = text.splitlines()[0].strip() if text.strip() else ""
        if not is_commit(first):
            raise RevisionError(f"{path}: first line {first!r} is not a commit id")
        commits.setdefault(first, []).append(path)
    if len(commits) > 1:
        named = ", ".join(f"{c[:12]} ({len(p)} files)" for c, p in sorted(commits.items()))
        raise RevisionError(f"files of more than one commit: {named}; download again")
    return next(iter(commits))


def read_metadata(local_dir: Path) -> dict[str, str]:
    """``{relative path: text}`` of every download metadata file under ``local_dir``."""
    root = local_dir / METADATA_DIR
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8", errors="replace")
            for p in sorted(root.rglob("*.metadata")) if p.is_file()}


def read_record(local_dir: Path) -> dict[str, Any] | None:
    """The bundle's model record in ``local_dir``, or None when absent or unreadable."""
    try:
        data = json.loads((local_dir / RECORD_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def inspect(local_dir: Path, repo_id: str, requested: str) -> dict[str, Any]:
    """What the module returns: the commit on disk, the record, and whether it is current.

    ``current`` is true when the record names this repository and requested revision,
    and the files on disk are of the commit it recorded: nothing to download.
    """
    commit: str | None
    problem = ""
    try:
        commit = commit_of_metadata(read_metadata(local_dir))
    except RevisionError as exc:
        commit, problem = None, str(exc)
    if commit is not None and is_commit(requested) and commit != requested:
        problem = f"the files are of commit {commit}, not the requested {requested}"
        commit = None
    record = read_record(local_dir)
    current = bool(
        record is not None and commit is not None
        and record.get("source") == "hf"
        and record.get("repo_id") == repo_id
        and record.get("requested_revision") == requested
        and record.get("revision") == commit
        and (local_dir / "config.json").is_file())
    return {"commit": commit, "record": record, "current": current, "problem": problem}
