"""Will pip resolve this set? The logic of the prefixbench_pip_resolve module.

Before anything is installed into a host's vLLM environment, the same ``pip install``
runs with ``--dry-run --report`` (against the same indexes, in the same virtualenv, or in
a throwaway one when it does not exist yet). pip's resolver then either lists what it
would install, or fails; a failure is turned into one line that names the clashing
requirements, taken from pip's own "The conflict is caused by:" block. Plain Python; no
Ansible imports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_CAUSE_HEAD = re.compile(r"^The conflict is caused by:\s*$")
_CANNOT = re.compile(r"^ERROR: Cannot install (.+?) because these package versions have "
                     r"conflicting dependencies\.?\s*$")
_ERROR = re.compile(r"^ERROR: (.+)$")
_NOISE = ("To fix this you could try", "ResolutionImpossible", "For help visit",
          "[notice]", "Additionally, some packages")


def conflict_causes(output: str) -> list[str]:
    """The indented lines under pip's "The conflict is caused by:" heading."""
    causes: list[str] = []
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if _CAUSE_HEAD.match(line.strip()):
            for follow in lines[i + 1:]:
                if not follow.startswith((" ", "\t")) or not follow.strip():
                    if causes:
                        break
                    continue
                causes.append(follow.strip())
            break
    return causes


def summarize_failure(output: str) -> str:
    """One line for a failed dry run: the clash when pip names one, else pip's error."""
    causes = conflict_causes(output)
    if causes:
        return "pip cannot resolve the set: " + "; ".join(causes)
    for line in output.splitlines():
        match = _CANNOT.match(line.strip())
        if match:
            return f"pip cannot install {match.group(1)} together"
    errors = [m.group(1).strip() for line in output.splitlines()
              if (m := _ERROR.match(line.strip()))
              and not any(n in line for n in _NOISE)]
    if errors:
        return "pip: " + errors[0]
    tail = [line.strip() for line in output.splitlines() if line.strip()]
    return "pip failed: " + (tail[-1] if tail else "no output")


def would_install(report: Mapping[str, Any]) -> list[str]:
    """``name==version`` of every distribution a ``--report`` says pip would install."""
    out = []
    for item in report.get("install") or []:
        meta = item.get("metadata") or {}
        name, version = meta.get("name"), meta.get("version")
        if name and version:
            out.append(f"{name}=={version}")
    return sorted(out, key=str.lower)
