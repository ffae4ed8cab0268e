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


#: Distributions built for NVIDIA GPUs: a Neuron host cannot use them, and they weigh
#: gigabytes (vLLM 0.21.0 from PyPI alone pulls the CUDA torch, its nvidia-* libraries,
#: flashinfer and triton: ``pip install --dry-run --report`` of ``vllm==0.21.0``).
_GPU_PREFIXES = ("nvidia-", "cuda-", "cupy", "flashinfer")
_GPU_NAMES = frozenset({"triton", "xformers"})


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gpu_wheels(report: Mapping[str, Any]) -> list[str]:
    """``name==version`` of every CUDA/GPU distribution a ``--report`` would install: an
    ``nvidia-*``, ``cuda-*``, ``cupy*`` or ``flashinfer*`` distribution, triton, xformers,
    or a build whose local label names CUDA (``torch 2.11.0+cu128``)."""
    out = []
    for entry in would_install(report):
        name, _, version = entry.partition("==")
        norm = _normal(name)
        local = version.partition("+")[2].lower()
        if (norm.startswith(_GPU_PREFIXES) or norm in _GPU_NAMES
                or re.match(r"^cu\d", local) or re.search(r"-cu\d+$", norm)):
            out.append(entry)
    return out


def gpu_refusal(found: list[str]) -> str:
    """One line refusing a pip set that would install ``found`` (empty: nothing to say)."""
    if not found:
        return ""
    shown = ", ".join(found[:6]) + (f" and {len(found) - 6} more" if len(found) > 6 else "")
    return (f"the pip set would install {len(found)} CUDA/GPU distributions a Neuron host "
            f"does not use ({shown}), and vllm_env_gpu_wheels is refuse: they are vLLM's "
            "own pins (its wheel metadata), which AWS's images install as they are, so no "
            "index choice removes them; set vllm_env_gpu_wheels: allow (the default) to "
            "install them, or run on a DLAMI host whose venv is adopted; nothing was "
            "installed")


# A converged environment asked again: the answer is already known. When a dry run in the
# virtualenv itself resolved with nothing to install, the module keeps a stamp of what it
# asked (requirements, the requirement file's text, pip's options, the venv's interpreter)
# and of what the venv held (its installed distributions, by name and version). The same
# question about the same set has the same answer: pip keeps a satisfied distribution
# where it is. Anything else (another pin, another index, a package added or moved by
# hand) runs pip again. On the simulated hosts pip's own dry run costs about 5 s.

STAMP_NAME = ".prefixbench-resolved.json"
STAMP_FORMAT = 1


def _digest(parts: list[str]) -> str:
    import hashlib  # noqa: PLC0415 - only the stamp needs it

    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def request_key(requirements: list[str], requirements_text: str | None,
                pip_args: list[str], interpreter: str) -> str | None:
    """What a dry run is asked, as one digest; None when a part cannot be read (a
    requirement file that could not be fetched), so that pip runs."""
    if requirements_text is None:
        return None
    return _digest(["request", str(STAMP_FORMAT), *requirements, "--file--",
                    requirements_text, "--args--", *pip_args, "--python--", interpreter])


def installed_key(distributions: list[str]) -> str:
    """What the venv holds: its ``*.dist-info`` / ``*.egg-info`` folder names (each
    carries the distribution's name and version), order ignored."""
    return _digest(["installed", *sorted(distributions)])


def stamp(request: str, installed: str) -> dict[str, Any]:
    """The stamp a dry run with nothing to install leaves in the venv."""
    return {"format": STAMP_FORMAT, "request": request, "installed": installed}


def stamp_answers(saved: Mapping[str, Any] | None, request: str | None,
                  installed: str) -> bool:
    """True when ``saved`` answers this question about this venv: nothing to install."""
    return (request is not None and isinstance(saved, Mapping)
            and saved.get("format") == STAMP_FORMAT
            and saved.get("request") == request and saved.get("installed") == installed)
