"""Parsers of a release manifest's unit sections (``server``, ``prefix_caching``,
``gpu_only``, ``bench_client``): each raises ``ReleaseError`` with the line that names the
fix. Split from ``hosts.releases`` (the loader), which re-exports nothing of it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final


class ReleaseError(ValueError):
    """A manifest is missing, malformed or incomplete; the message names the fix."""


_ENV_NAME_RE: Final = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def str_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ReleaseError(f"{where} must be a list of strings")
    return tuple(value)


def env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and _ENV_NAME_RE.match(k) and isinstance(v, str)
            for k, v in value.items()):
        raise ReleaseError(f"{where} must map an environment variable name to a quoted value")
    return dict(value)


def library_path(server: Mapping[str, Any], origin: str, unknown: bool = False
                 ) -> tuple[str, ...]:
    """``server.library_path``: absolute directories, each once, and their source; empty
    when the manifest's ``unknown`` names it and it is null."""
    dirs = server.get("library_path")
    if unknown and dirs is None:
        return ()
    if not isinstance(dirs, list) or not dirs or not all(
            isinstance(d, str) and d.startswith("/") and ":" not in d and d.strip() == d
            for d in dirs) or len(set(dirs)) != len(dirs):
        raise ReleaseError(f"{origin}: server.library_path must list the absolute "
                           "directories of the unit's LD_LIBRARY_PATH (as AWS's vLLM "
                           "image of the release sets them), each once")
    if not str(server.get("library_path_source") or "").strip():
        raise ReleaseError(f"{origin}: server.library_path_source names no public source")
    return tuple(dirs)


def segment_sizes(part: Mapping[str, Any], origin: str, unknown: bool = False
                  ) -> tuple[int, ...]:
    """``prefix_caching.segment_sizes``: the plugin's supported segment sizes; empty when
    the manifest's ``unknown`` names it and it is null."""
    sizes = part.get("segment_sizes")
    if unknown and sizes is None:
        return ()
    if not isinstance(sizes, list) or not sizes or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes) \
            or sorted(set(sizes)) != sizes:
        raise ReleaseError(f"{origin}: prefix_caching.segment_sizes must list the "
                           "kv_segment_size_buckets values the release's plugin supports, "
                           "ascending, each once")
    return tuple(sizes)


def gpu_only(part: Mapping[str, Any], origin: str) -> dict[str, Any]:
    packages = part.get("packages") or {}
    size = part.get("download_mb", 0)
    if not isinstance(packages, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in packages.items()):
        raise ReleaseError(f"{origin}: gpu_only.packages must map a distribution to the "
                           "quoted version pip resolves")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ReleaseError(f"{origin}: gpu_only.download_mb must be a whole number of MB")
    return {"gpu_only": dict(packages), "gpu_only_mb": size}


#: What a manifest may mark unknown as a whole (beyond a null package version).
UNKNOWABLE: Final = frozenset({"server.library_path", "server.environment",
                               "prefix_caching.segment_sizes", "compile_key.distributions",
                               "dlami.venv", "pip.sources", "python.supported",
                               "compile_key.cache_dir"})


def unknown_facts(value: Any, origin: str) -> dict[str, str]:
    """``unknown``: ``{fact: where AWS's pages were read and did not say it}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
            k in UNKNOWABLE and isinstance(v, str) and v.strip() for k, v in value.items()):
        raise ReleaseError(f"{origin}: unknown must map one of {sorted(UNKNOWABLE)} to "
                           "where it was looked for and not found")
    return {str(k): str(v) for k, v in value.items()}
