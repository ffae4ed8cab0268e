"""A Neuron release read from the host: the release object of a host whose packages no
complete manifest describes (a release newer than any this bundle knows, or one whose
manifest leaves facts unknown), usable wherever a manifest is (``releases.for_settings``).

Each value is read from the host where the host can say it, else taken from the newest
known release that states it and flagged as assumed; ``provenance`` says which, per value:

* read: the Neuron debs' versions (dpkg), the venv's vLLM, plugin and compiler versions
  and interpreter (``importlib.metadata`` inside it), the compile-timeout and other unit
  variables the plugin's and vLLM's installed code names (among those some known release
  sets), the library directories that exist;
* assumed: the segment sizes the plugin accepts, the unit variables' values, the bench
  client's and compile key's lists, the OS list (the host's OS runs its own Neuron: the
  bundle installs nothing there).

The shape handed in is :class:`HostFacts` (``facts_from_probe`` of the
``prefixbench_neuron_venvs`` module's result). Pure: no host is touched here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prefixbench.hosts.releases import HOST_READ, Release

#: What a venv must hold to be a vLLM Neuron environment.
VLLM_DISTRIBUTIONS: Final = ("vllm", "vllm-neuron")
#: What the bundle never checks on a host read from itself (beyond the assumed values).
NEVER_CHECKED: Final = (
    "the tutorial's settings at this release (its page for it is not in the bundle)",
    "that the plugin accepts the settings' kv_segment_size_buckets before it compiles",
)


@dataclass(frozen=True)
class Venv:
    """A vLLM environment found on a host: its path and what it reports."""

    path: str
    vllm: str | None
    plugin: str | None
    #: ``{distribution: version or None}`` read in the venv (vllm and the plugin too).
    distributions: Mapping[str, str | None] = field(default_factory=dict)
    #: The venv interpreter's version ("3.14.0"), "" when not read.
    python: str = ""
    #: The variable names the plugin's and vLLM's code names, among those asked; None
    #: when the code was not read.
    environment_names: tuple[str, ...] | None = None

    @property
    def is_vllm_neuron(self) -> bool:
        return self.vllm is not None and self.plugin is not None


@dataclass(frozen=True)
class HostFacts:
    """What the probe read on one host beyond its debs."""

    venvs: tuple[Venv, ...] = ()
    #: ``{directory: exists}`` of every library directory some known release names.
    directories: Mapping[str, bool] = field(default_factory=dict)


def facts_from_probe(result: Mapping[str, Any]) -> HostFacts:
    """The ``prefixbench_neuron_venvs`` module's result as :class:`HostFacts`: ``venvs``
    (each ``path``, ``rc``, ``python``, ``distributions``, ``environment_names``; one whose
    interpreter did not run, ``rc`` not 0, is absent) and ``directories``."""
    venvs = []
    for item in result.get("venvs") or []:
        if item.get("rc") != 0:
            continue
        dists = {str(k): (str(v) if v else None)
                 for k, v in (item.get("distributions") or {}).items()}
        names = item.get("environment_names")
        venvs.append(Venv(str(item.get("path", "")), dists.get("vllm"),
                          dists.get("vllm-neuron"), dists, str(item.get("python") or ""),
                          None if names is None else tuple(str(n) for n in names)))
    dirs = {str(k): bool(v) for k, v in (result.get("directories") or {}).items()}
    return HostFacts(tuple(venvs), dirs)


def venv_patterns(rels: Sequence[Release]) -> list[str]:
    """Globs for AWS's DLAMI vLLM venvs whatever the version in their name: each known
    DLAMI venv with its trailing version (``_0_24_0_1_1_0``) turned into ``*``."""
    return sorted({re.sub(r"(_\d+)+$", "", r.dlami["venv"]) + "*"
                   for r in rels if r.dlami.get("venv")})


def probe_arguments(rels: Sequence[Release], adopt: str) -> dict[str, Any]:
    """The ``prefixbench_neuron_venvs`` module's arguments: the DLAMI globs (with
    ``vllm_env_adopt_venv: auto``) or the named venv, the distributions to read, the unit
    variables and library directories every known release names."""
    dists = {"vllm", *VLLM_DISTRIBUTIONS, *(n for r in rels for n in r.pip_packages),
             *(n for r in rels for n in r.compile_distributions)}
    names = {n for r in rels for n in (*r.server_environment, *r.trn3_environment)}
    return {"patterns": venv_patterns(rels) if adopt == "auto" else [],
            "paths": [] if adopt in ("auto", "") else [adopt],
            "distributions": sorted(dists), "environment_names": sorted(names),
            "scan": list(VLLM_DISTRIBUTIONS),
            "directories": sorted({d for r in rels for d in r.library_path})}


def _stated(rels: Sequence[Release], base: Release | None, has: Callable[[Release], bool]
            ) -> Release:
    """``base`` when it states the fact, else the newest of ``rels`` that does."""
    if base is not None and has(base):
        return base
    return max((r for r in rels if has(r)), key=lambda r: r.order)


def build(host: str, packages: Mapping[str, str], venv: Venv, *, facts: HostFacts,
          rels: Sequence[Release], base: Release | None = None) -> dict[str, Any]:
    """The manifest-shaped release of ``host`` (``releases.parse_release`` reads it):
    ``base``'s facts where its manifest states them (the release its debs match), else
    read from the host, else assumed from the newest known release stating them."""
    prov: dict[str, str] = {}
    src = f"read from {host}"

    def take(key: str, has: Callable[[Release], bool]) -> Release:
        rel = _stated(rels, base, has)
        prov[key] = (f"from the {rel.release} manifest" if rel is base
                     else f"assumed from {rel.release}")
        return rel

    prov["apt.packages"] = f"{src} (dpkg)"
    pip = {n: p for n, v in venv.distributions.items()
           if n != "vllm" and (p := _release_part(v))}
    prov["pip"] = f"{src}: {venv.path}"
    seg = take("prefix_caching.segment_sizes", lambda r: bool(r.segment_sizes))
    env_rel = take("server.environment",
                   lambda r: "server.environment" not in r.unknown_facts)
    environment = dict(env_rel.server_environment)
    if venv.environment_names is not None and env_rel is not base:
        values = {n: v for r in sorted(rels, key=lambda r: r.order)
                  for n, v in r.server_environment.items()}
        environment = {n: v for n, v in values.items() if n in venv.environment_names}
        prov["server.environment"] = (f"names {src} (the plugin's and vLLM's code); "
                                      f"values assumed from the releases that set them")
    lib_rel = take("server.library_path", lambda r: bool(r.library_path))
    library = list(lib_rel.library_path)
    if facts.directories and lib_rel is not base:
        ordered = list(dict.fromkeys(
            d for r in sorted(rels, key=lambda r: r.order, reverse=True)
            for d in r.library_path))
        there = [d for d in ordered if facts.directories.get(d)]
        if there:
            library = there
            prov["server.library_path"] = f"{src} (the directories that exist)"
    key_rel = take("compile_key.distributions", lambda r: bool(r.compile_distributions))
    # The compilation route: the newest release's that names one (2.33+: the native route
    # and its precompile cache), assumed. Where the graphs are kept is never assumed: only
    # a manifest that says so shares them (servers.compile_cache.unshared_reason).
    route: dict[str, str] = {}
    prov["compile_route.environment"] = "no known release names a route"
    if any(r.compile_route_environment for r in [*rels, *([base] if base else [])]):
        route = dict(take("compile_route.environment",
                          lambda r: bool(r.compile_route_environment)
                          ).compile_route_environment)
    cache_dir = base.compile_cache_dir if base is not None else ""
    bench_rel = take("bench_client.requirements", lambda r: bool(r.bench_requirements))
    minor = ".".join(venv.python.split(".")[:2])
    prov["python.supported"] = f"{src}: the venv's interpreter" if minor else "not read"
    prov["os"] = "every OS a known release lists (the bundle installs nothing here)"
    os_support = {k: v for r in rels for k, v in r.os_support.items()}
    return {
        "schema": 2, "release": base.release if base else HOST_READ,
        "version": base.version if base else "", "date": base.date if base else "",
        "title": (base.title + ", completed from the host") if base else
                 "Neuron read from the host, newer than any release this bundle knows",
        "sources": [f"read from {host}"],
        "apt": {"packages": dict(packages) if base is None
                else base.known_apt() | dict(packages),
                "origin": {n: f"{src} (dpkg)" for n in packages}},
        "pip": {"vllm": _release_part(venv.vllm), "packages": pip,
                "origin": {n: f"{src}: {venv.path}" for n in ("vllm", *pip)}},
        "python": {"supported": [minor] if minor else [], "source": prov["python.supported"]},
        "dlami": {"venv": venv.path, "plugin": venv.plugin or "", "source": src},
        "server": {"environment": environment,
                   "trn3_environment": dict(env_rel.trn3_environment),
                   "source": prov["server.environment"], "library_path": library,
                   "library_path_source": prov["server.library_path"]},
        "prefix_caching": {"segment_sizes": list(seg.segment_sizes),
                           "source": prov["prefix_caching.segment_sizes"]},
        "bench_client": {"requirements": list(bench_rel.bench_requirements),
                         "source": prov["bench_client.requirements"]},
        "compile_key": {"distributions": list(key_rel.compile_distributions),
                        **({"cache_dir": cache_dir} if cache_dir else {}),
                        "source": prov["compile_key.distributions"]},
        "compile_route": {"environment": route,
                          "source": prov["compile_route.environment"]},
        "os": os_support, "provenance": prov,
        "notes": "could not check: " + "; ".join(unchecked(prov)),
    }


def unchecked(provenance: Mapping[str, str]) -> list[str]:
    """What the bundle could not check for a release read from the host: each value
    assumed in whole or in part (the unit's variables: their names read, their values
    assumed), and what it never checks there."""
    return [f"{k} ({v})" for k, v in sorted(provenance.items())
            if re.search(r"\bassumed\b", v)] + list(NEVER_CHECKED)


def versions_read(rel: Release) -> str:
    """``aws-neuronx-dkms 2.31.7.0, ..., vllm 0.29.0, vllm-neuron ..., neuronx-cc ...``:
    the versions a release read from the host runs (the compiler when present)."""
    parts = [f"{n} {v}" for n, v in sorted(rel.known_apt().items())]
    parts.append(f"vllm {rel.vllm}")
    parts += [f"{n} {rel.dlami.get('plugin') if n == 'vllm-neuron' else rel.pip_packages[n]}"
              for n in ("vllm-neuron", "neuronx-cc", "nki") if rel.pip_packages.get(n)]
    return ", ".join(parts)


def _release_part(version: str | None) -> str | None:
    """The dotted release part of a Python version (``0.29.0.1.2.0+e8242a9`` ->
    ``0.29.0.1.2.0``; ``2.11.0+cpu`` -> ``2.11.0``); None when there is none."""
    found = re.match(r"^\d+(\.\d+)*", (version or "").strip())
    return found.group() if found else None
