"""Where a Neuron host connects out to while the bundle sets it up, for its settings.

The endpoints, each with its reason and source, are data (``data/egress.yml``).
:func:`needed` picks those a host's settings use and puts the host of a configured URL
(a mirror) in place of the default's, so the list an operator opens in a firewall is the
one the run will use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

EGRESS_FILE: Final = Path(__file__).resolve().parent.parent / "data" / "egress.yml"
#: What needs an endpoint (see the data file's header).
WHEN: Final = ("provision", "venv", "venv_source", "hf", "s3", "tiktoken", "compile_s3")


@dataclass(frozen=True)
class Endpoint:
    """One host a Neuron host connects to."""

    host: str
    port: int
    when: str
    reason: str
    source: str
    #: The setting whose URL replaces the host, if any.
    setting: str = ""

    def line(self) -> str:
        return f"{self.host}:{self.port} ({self.when}): {self.reason} [{self.source}]"


@functools.cache
def load(path: Path = EGRESS_FILE) -> tuple[Endpoint, ...]:
    """The endpoints file (ValueError for an entry without host, port, when, reason and
    source, or with an unknown ``when``)."""
    out = []
    for entry in yaml.safe_load(path.read_text()):
        try:
            point = Endpoint(host=str(entry["host"]), port=int(entry["port"]),
                             when=str(entry["when"]), reason=" ".join(str(entry["reason"])
                                                                      .split()),
                             source=" ".join(str(entry["source"]).split()),
                             setting=str(entry.get("setting") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: every endpoint needs host, port, when, reason and "
                             f"source ({exc})") from None
        if point.when not in WHEN:
            raise ValueError(f"{path}: {point.host}: when {point.when!r} is not one of "
                             f"{', '.join(WHEN)}")
        out.append(point)
    return tuple(out)


def _uses(s: Mapping[str, Any]) -> set[str]:
    uses = {"venv", "venv_source"}  # unknown here whether a DLAMI venv is adopted
    if not s.get("prefixbench_skip_provision"):
        uses.add("provision")
    source = s.get("model_cache_source", "hf")
    if source in ("hf", "s3"):
        uses.add(str(source))
    if s.get("model_cache_tiktoken"):
        uses.add("tiktoken")
    if str(s.get("prefixbench_compile_cache_store") or "").startswith("s3://"):
        uses.add("compile_s3")
    return uses


def _configured(point: Endpoint, s: Mapping[str, Any]) -> Endpoint | None:
    """``point`` with the host of its setting's URL, when that URL is set and names
    another host; None when it points at a file (no egress)."""
    if not point.setting:
        return point
    value = s.get(point.setting)
    urls = value if isinstance(value, list) else [value] if value else []
    if not urls:
        return point
    parts = urlsplit(str(urls[0]))
    if parts.scheme == "file":
        return None
    if not parts.hostname or parts.hostname == point.host:
        return point
    port = parts.port or (80 if parts.scheme == "http" else 443)
    return replace(point, host=parts.hostname, port=port,
                   source=f"{point.setting} (instead of {point.host})")


def _bucket(point: Endpoint, s: Mapping[str, Any]) -> Endpoint:
    """An S3 endpoint with the settings' bucket and region filled in where known."""
    if point.when == "s3":
        bucket = str(s.get("model_cache_s3_bucket") or "")
        uri = str(s.get("model_cache_s3_uri") or "")
        region = str(s.get("model_cache_s3_region") or "")
    elif point.when == "compile_s3":
        uri = str(s.get("prefixbench_compile_cache_store") or "")
        bucket, region = "", str(s.get("prefixbench_compile_cache_s3_region") or "")
    else:
        return point
    if not bucket and uri.startswith("s3://"):
        bucket = uri[len("s3://"):].split("/", 1)[0]
    host = point.host
    if bucket:
        host = host.replace("<bucket>", bucket)
    if region:
        host = host.replace("<region>", region)
    return replace(point, host=host)


def needed(s: Mapping[str, Any], endpoints: tuple[Endpoint, ...] | None = None
           ) -> list[Endpoint]:
    """The endpoints a host with settings ``s`` needs, mirrors in place of defaults."""
    uses = _uses(s)
    out: list[Endpoint] = []
    for point in endpoints if endpoints is not None else load():
        if point.when not in uses:
            continue
        configured = _configured(_bucket(point, s), s)
        if configured is not None and configured not in out:
            out.append(configured)
    return out
