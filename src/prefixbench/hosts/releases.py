"""Neuron SDK release manifests: which package versions make up a release.

A manifest is ``data/neuron_releases/<release>.yml``, one per release the bundle knows
(several may share a ``major.minor``: ``2.31.0``, ``2.31.0-vllm-beta``, ``2.31.1``); the
format is ``data/neuron_releases/README.md``. The provisioning roles install exactly what
the manifest of a host's release names (``hosts.release_match`` says which release a host
is on); the simulated fleet builds its apt repository from the same files. Pure: no host
is touched here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from prefixbench.hosts import release_fields as fields

#: A manifest is missing, malformed or incomplete; the message names the fix.
ReleaseError = fields.ReleaseError

RELEASES_DIR: Final = Path(__file__).resolve().parents[1] / "data" / "neuron_releases"
SCHEMA: Final = 2
#: ``prefixbench_neuron_release``'s value for "read each host's release".
AUTO: Final = "auto"

#: A release id: AWS's version, optionally with a label for a set published under it.
_ID_RE: Final = re.compile(r"^\d+\.\d+\.\d+(-[a-z0-9]+)*$")
#: What a user may name: an id, or a ``major.minor`` series (its newest release).
_RELEASE_RE: Final = re.compile(r"^\d+\.\d+(\.\d+(-[a-z0-9]+)*)?$")
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DEB_NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_PIP_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION_RE: Final = re.compile(r"^\d+(\.\d+)*$")
_KNOWN_KEYS: Final = frozenset({"schema", "release", "version", "date", "title", "sources",
                                "apt", "pip", "os", "notes", "python", "dlami", "server",
                                "bench_client", "compile_key", "gpu_only",
                                "prefix_caching", "unknown", "provenance",
                                "compile_route"})
#: The id of a release read from a host (``hosts.host_read``), not from a manifest file.
HOST_READ: Final = "host-read"
_PY_RE: Final = re.compile(r"^3\.\d+$")
_SOURCE_RE: Final = re.compile(r"^(git\+)?https://\S+@[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class Release:
    """One Neuron SDK release as its manifest describes it."""

    release: str
    apt_packages: Mapping[str, str | None]
    apt_prerequisites: tuple[str, ...] = ()
    pip_packages: Mapping[str, str | None] = field(default_factory=dict)
    vllm: str | None = None
    os_support: Mapping[str, str] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    notes: str = ""
    #: {package: public source of its pinned version}, apt and pip (``vllm`` included).
    origin: Mapping[str, str] = field(default_factory=dict)
    #: {pip package: PEP 508 direct URL} for packages installed from source, not by name.
    pip_sources: Mapping[str, str] = field(default_factory=dict)
    #: Interpreter versions ("3.11") the release's wheels exist for; empty: not stated.
    python_supported: tuple[str, ...] = ()
    python_source: str = ""
    #: The DLAMI that carries the release's vLLM venv: venv, plugin, ssm_parameter,
    #: name_filter, source (all strings); empty when AWS published none.
    dlami: Mapping[str, str] = field(default_factory=dict)
    #: AWS's SDK version (``2.31.0`` for ``2.31.0-vllm-beta``), its date, its name.
    version: str = ""
    date: str = ""
    title: str = ""
    #: ``{variable: value}`` of every ``vllm serve`` unit, and on Trn3 only.
    server_environment: Mapping[str, str] = field(default_factory=dict)
    trn3_environment: Mapping[str, str] = field(default_factory=dict)
    #: pip requirements of ``vllm bench serve`` beyond vLLM's own.
    bench_requirements: tuple[str, ...] = ()
    #: The venv distributions whose versions key the compile cache.
    compile_distributions: tuple[str, ...] = ()
    #: Where the release's server keeps its compiled graphs, relative to VLLM_CACHE_ROOT
    #: (``compile_key.cache_dir``); "" when the release does not say (nothing shared).
    compile_cache_dir: str = ""
    #: What a unit sets to compile on the release's route (``compile_route.environment``:
    #: on 2.33+ the native route named, which turns its precompile cache on).
    compile_route_environment: Mapping[str, str] = field(default_factory=dict)
    #: vLLM's GPU-only dependencies as pip resolves its pins ``{name: version}``, and
    #: their download size in MB (what an own venv installs, as AWS's image does).
    gpu_only: Mapping[str, str] = field(default_factory=dict)
    gpu_only_mb: int = 0
    #: The ``vllm serve`` unit's LD_LIBRARY_PATH directories on Neuron, in order, as
    #: AWS's vLLM image of the release sets them (``server.library_path``).
    library_path: tuple[str, ...] = ()
    library_path_source: str = ""
    #: The ``kv_segment_size_buckets`` values the release's plugin supports
    #: (``prefix_caching.segment_sizes``).
    segment_sizes: tuple[int, ...] = ()
    #: ``unknown``: ``{fact: where it was looked for}``, what AWS's pages do not say.
    unknown_facts: Mapping[str, str] = field(default_factory=dict)
    #: ``provenance`` of a release read from a host: ``{fact: "read from ..." or
    #: "assumed from <release>"}`` (``hosts.host_read``); empty for a manifest.
    provenance: Mapping[str, str] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """``major.minor``."""
        return ".".join(self.release.split(".")[:2])

    @property
    def order(self) -> tuple[tuple[int, ...], str]:
        """Sort key: AWS's version, then its date (the newest set of a version last)."""
        return (version_tuple(self.version or self.release), self.date)

    def label(self) -> str:
        """``2.31.0-vllm-beta (Neuron 2.31 - vLLM Neuron Beta, 2026-07-20)``."""
        return f"{self.release} ({self.title or self.release}, {self.date or 'undated'})"

    def unknown(self) -> list[str]:
        """``apt:<name>`` / ``pip:<name>`` for every version the manifest marks unknown."""
        out = [f"apt:{n}" for n, v in self.apt_packages.items() if v is None]
        out += [f"pip:{n}" for n, v in self.pip_packages.items() if v is None]
        if self.vllm is None:
            out.append("pip:vllm")
        return out + sorted(self.unknown_facts)

    def require_complete(self) -> None:
        """Raise :class:`ReleaseError` when any version is unknown."""
        missing = self.unknown()
        if missing:
            raise ReleaseError(
                f"Neuron SDK {self.release}: versions unknown for {', '.join(missing)}; "
                f"fill them in {self.release}.yml before installing this release"
            )

    def python_refusal(self, version: str) -> str | None:
        """None when ``version`` ("3.12.3" or "3.12") can run the release's wheels."""
        if not self.python_supported:
            return None
        minor = ".".join(version.split(".")[:2])
        if minor in self.python_supported:
            return None
        return (f"Python {minor} cannot run Neuron SDK {self.release}'s wheels (built for "
                f"Python {', '.join(self.python_supported)})")

    def known_apt(self) -> dict[str, str]:
        return {n: v for n, v in self.apt_packages.items() if v is not None}

    def apt_pins(self) -> list[str]:
        """``name=version*`` pins (the glob admits a Debian suffix such as ``-a1b2c3``)."""
        self.require_complete()
        return [f"{n}={v}*" for n, v in self.known_apt().items()]

    def prerequisites_for(self, kernel: str) -> list[str]:
        return [p.replace("{kernel}", kernel) for p in self.apt_prerequisites]


def version_tuple(version: str) -> tuple[int, ...]:
    """The leading dotted numbers of a version, as integers: ``2.31.15.0-5c7949a6a`` ->
    ``(2, 31, 15, 0)``; what is not a number ends it."""
    out = []
    for part in upstream_version(version).split("+", 1)[0].split("."):
        digits = re.match(r"^\d+", part)
        if not digits:
            break
        out.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(out)


def upstream_version(debian_version: str) -> str:
    """The upstream part of a Debian version: no epoch, nothing from the first ``-``."""
    return debian_version.split(":", 1)[-1].split("-", 1)[0]


def version_matches(installed: str, wanted: str) -> bool:
    """Whether an installed Debian version is the manifest's upstream version."""
    return upstream_version(installed) == wanted


def _str_map(value: Any, where: str, name_re: re.Pattern[str]) -> dict[str, str | None]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ReleaseError(f"{where}: expected a mapping of package name to version")
    out: dict[str, str | None] = {}
    for name, version in value.items():
        if not isinstance(name, str) or not name_re.match(name):
            raise ReleaseError(f"{where}: invalid package name {name!r}")
        if version is not None and (not isinstance(version, str)
                                    or not _VERSION_RE.match(version)):
            raise ReleaseError(
                f"{where}.{name}: version must be a quoted dotted number or null "
                f"(unknown), not {version!r}"
            )
        out[name] = version
    return out


def parse_release(data: Any, origin: str = "<manifest>") -> Release:
    """Validate a loaded manifest and turn it into a :class:`Release`."""
    if not isinstance(data, Mapping):
        raise ReleaseError(f"{origin}: not a mapping")
    extra = set(data) - _KNOWN_KEYS
    if extra:
        raise ReleaseError(f"{origin}: unknown keys {sorted(extra)}")
    if data.get("schema") != SCHEMA:
        raise ReleaseError(f"{origin}: schema must be {SCHEMA}, not {data.get('schema')!r}")
    release = data.get("release")
    if not isinstance(release, str) or not (_ID_RE.match(release) or release == HOST_READ):
        raise ReleaseError(f"{origin}: release must be a quoted id like \"2.31.0\" or "
                           "\"2.31.0-vllm-beta\"")
    apt = data.get("apt") or {}
    pip = data.get("pip") or {}
    if not isinstance(apt, Mapping) or not isinstance(pip, Mapping):
        raise ReleaseError(f"{origin}: apt and pip must be mappings")
    apt_packages = _str_map(apt.get("packages"), f"{origin}: apt.packages", _DEB_NAME_RE)
    if not apt_packages:
        raise ReleaseError(f"{origin}: apt.packages is empty")
    prereq = apt.get("prerequisites") or []
    if not isinstance(prereq, list) or not all(isinstance(p, str) for p in prereq):
        raise ReleaseError(f"{origin}: apt.prerequisites must be a list of package names")
    vllm = pip.get("vllm")
    if vllm is not None and (not isinstance(vllm, str) or not _VERSION_RE.match(vllm)):
        raise ReleaseError(f"{origin}: pip.vllm must be a quoted version or null")
    os_support = data.get("os") or {}
    if not isinstance(os_support, Mapping):
        raise ReleaseError(f"{origin}: os must map '<distribution> <version>' to a note")
    sources = data.get("sources") or []
    origins: dict[str, str] = {}
    for section, pinned in (("apt", apt.get("packages")), ("pip", pip.get("packages"))):
        part = (apt if section == "apt" else pip).get("origin") or {}
        if not isinstance(part, Mapping):
            raise ReleaseError(f"{origin}: {section}.origin must map a package "
                               "to its source")
        origins.update({str(k): str(v) for k, v in part.items()})
        for name, version in (pinned or {}).items():
            if version is not None and not str(part.get(name) or "").strip():
                raise ReleaseError(
                    f"{origin}: {section}.packages.{name} is pinned to {version} "
                    f"but {section}.origin names no public source for it")
        if section == "pip" and vllm is not None and not str(part.get("vllm") or "").strip():
            raise ReleaseError(f"{origin}: pip.vllm is pinned to {vllm} but "
                               "pip.origin names no public source for it")
    python = data.get("python") or {}
    supported = python.get("supported") or [] if isinstance(python, Mapping) else None
    if not isinstance(supported, list) or not all(
            isinstance(v, str) and _PY_RE.match(v) for v in supported):
        raise ReleaseError(f"{origin}: python.supported must be a list of "
                           "quoted versions like \"3.12\"")
    dlami = data.get("dlami") or {}
    if not isinstance(dlami, Mapping):
        raise ReleaseError(f"{origin}: dlami must be a mapping")
    sources_map = pip.get("sources") or {}
    if not isinstance(sources_map, Mapping) or not all(
            isinstance(v, str) and _SOURCE_RE.match(v) for v in sources_map.values()):
        raise ReleaseError(f"{origin}: pip.sources must map a package to a direct URL "
                           "such as git+https://host/repo.git@<commit>")
    for name in sources_map:
        if name not in (pip.get("packages") or {}):
            raise ReleaseError(f"{origin}: pip.sources.{name} is not in pip.packages")
        if not str((pip.get("origin") or {}).get(name) or "").strip():
            raise ReleaseError(f"{origin}: pip.sources.{name} has no public source in "
                               "pip.origin")
    return Release(
        **_extras(data, origin, release),
        release=release,
        apt_packages=apt_packages,
        apt_prerequisites=tuple(prereq),
        pip_packages=_str_map(pip.get("packages"), f"{origin}: pip.packages", _PIP_NAME_RE),
        vllm=vllm,
        os_support={str(k): str(v) for k, v in os_support.items()},
        sources=tuple(str(s) for s in sources),
        notes=str(data.get("notes") or ""),
        origin=origins,
        python_supported=tuple(supported),
        python_source=str(python.get("source", "")) if isinstance(python, Mapping) else "",
        dlami={str(k): str(v) for k, v in dlami.items()},
        pip_sources={str(k): str(v) for k, v in sources_map.items()},
    )


def _relative_dir(value: Any, where: str) -> str:
    """A directory below another (``neuron/compile_cache``): "" when absent."""
    if value is None:
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"[\w.-]+(/[\w.-]+)*", value) \
            or ".." in value.split("/"):
        raise ReleaseError(f"{where} must be a relative directory such as "
                           "neuron/compile_cache")
    return value


def _extras(data: Mapping[str, Any], origin: str, release: str) -> dict[str, Any]:
    """The schema-2 keys: version, date, title, server, bench_client, compile_key."""
    version = data.get("version")
    if release == HOST_READ and version == "":
        pass
    elif not isinstance(version, str) or not _VERSION_RE.match(version) \
            or not release.startswith(version):
        raise ReleaseError(f"{origin}: version must be AWS's SDK version the id starts "
                           f"with (\"{release.split('-', maxsplit=1)[0]}\")")
    date = data.get("date")
    if not isinstance(date, str) or not (_DATE_RE.match(date) or release == HOST_READ):
        raise ReleaseError(f"{origin}: date must be AWS's release date as \"YYYY-MM-DD\"")
    sections = {}
    for key in ("server", "bench_client", "compile_key", "gpu_only", "prefix_caching",
                "compile_route"):
        part = data.get(key) or {}
        if not isinstance(part, Mapping):
            raise ReleaseError(f"{origin}: {key} must be a mapping")
        if part and not str(part.get("source") or "").strip():
            raise ReleaseError(f"{origin}: {key}.source names no public source")
        sections[key] = part
    unknown = fields.unknown_facts(data.get("unknown"), origin)
    provenance = data.get("provenance") or {}
    if not isinstance(provenance, Mapping):
        raise ReleaseError(f"{origin}: provenance must map a fact to where it came from")
    return {
        "unknown_facts": unknown,
        "provenance": {str(k): str(v) for k, v in provenance.items()},
        "version": version, "date": date, "title": str(data.get("title") or ""),
        "server_environment": fields.env(sections["server"].get("environment"),
                                   f"{origin}: server.environment"),
        "trn3_environment": fields.env(sections["server"].get("trn3_environment"),
                                 f"{origin}: server.trn3_environment"),
        "bench_requirements": fields.str_list(sections["bench_client"].get("requirements"),
                                        f"{origin}: bench_client.requirements"),
        "compile_distributions": fields.str_list(sections["compile_key"].get("distributions"),
                                           f"{origin}: compile_key.distributions"),
        "compile_cache_dir": _relative_dir(sections["compile_key"].get("cache_dir"),
                                           f"{origin}: compile_key.cache_dir"),
        "compile_route_environment": fields.env(sections["compile_route"].get("environment"),
                                                f"{origin}: compile_route.environment"),
        **fields.gpu_only(sections["gpu_only"], origin),
        "library_path": fields.library_path(sections["server"], origin,
                                            "server.library_path" in unknown),
        "library_path_source": str(sections["server"].get("library_path_source") or ""),
        "segment_sizes": fields.segment_sizes(sections["prefix_caching"], origin,
                                              "prefix_caching.segment_sizes" in unknown),
    }


def segment_refusal(setting: str, sizes: Sequence[int], allowed: Sequence[int],
                    whose: str) -> str:
    """One line when a configured segment size is not in ``allowed`` (``whose`` list:
    "Neuron 2.32.0"); "" when every one is."""
    bad = [v for v in sizes if v not in allowed]
    if not bad:
        return ""
    return (f"{setting} {bad} not supported on {whose}: use one of "
            f"{', '.join(f'[{v}]' for v in allowed)} (prefix_caching.segment_sizes in "
            "prefixbench/data/neuron_releases/)")


def segment_sizes(rels: Sequence[Release] | None = None) -> tuple[int, ...]:
    """Every segment size some known release supports, ascending (what a setting may be
    before a host's release is read)."""
    return tuple(sorted({v for r in (rels if rels is not None else load_all())
                         for v in r.segment_sizes}))


def available_releases(directory: Path = RELEASES_DIR) -> list[str]:
    """The id of every manifest in ``directory``, oldest first (by version, then date)."""
    return [r.release for r in load_all(directory)]


def _read(path: Path) -> Release:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ReleaseError(f"{path.name}: not YAML ({exc})") from exc
    rel = parse_release(data, path.name)
    if rel.release != path.stem:
        raise ReleaseError(f"{path.name}: release {rel.release} does not match its file name")
    return rel


def load_all(directory: Path = RELEASES_DIR) -> list[Release]:
    """Every release manifest in ``directory``, oldest first (by version, then date)."""
    rels = [_read(p) for p in sorted(directory.glob("*.yml")) if _ID_RE.match(p.stem)]
    return sorted(rels, key=lambda r: r.order)


def newest(rels: Sequence[Release]) -> Release:
    """The newest of ``rels`` (of :func:`installable` ones: what a bare host gets unless a
    release is named)."""
    if not rels:
        raise ReleaseError("no Neuron SDK release manifest is known")
    return max(rels, key=lambda r: r.order)


def installable(rels: Sequence[Release]) -> list[Release]:
    """The releases whose every version and fact is published (what a bare host can be
    given), oldest first."""
    return [r for r in rels if not r.unknown()]


#: The settings key carrying a release read from the host, manifest-shaped
#: (``hosts.host_read``); ``prefixbench_neuron_release`` is then ``host-read``, or the id
#: of the manifest whose unknown facts the host completed.
HOST_RELEASE_KEY: Final = "neuron_release_read"


def for_settings(settings: Mapping[str, Any]) -> Release:
    """The release of a host's validated settings, once its release has been read
    (``prefixbench_neuron_release`` is then the host's release id, not ``auto``, or
    ``host-read`` with the release read from the host beside it)."""
    read = settings.get(HOST_RELEASE_KEY)
    if isinstance(read, Mapping) and read:
        return parse_release(read, "the release read from the host")
    return load_release(str(settings.get("prefixbench_neuron_release", AUTO)))


def release_of(name_or_settings: str | Mapping[str, Any]) -> Release:
    """:func:`for_settings` of a host's settings, or :func:`load_release` of a name."""
    if isinstance(name_or_settings, Mapping):
        return for_settings(name_or_settings)
    return load_release(name_or_settings)


def load_release(name: str, directory: Path = RELEASES_DIR) -> Release:
    """The manifest of release ``name``: an id (``2.31.1``, ``2.31.0-vllm-beta``), or a
    ``major.minor`` series (``2.31``: its newest release)."""
    if name == AUTO:
        raise ReleaseError("prefixbench_neuron_release is auto and this host's release "
                           "has not been read yet (roles/neuron_sdk tasks_from: release "
                           "reads it; it runs before the vLLM environment is chosen)")
    if name == HOST_READ:
        raise ReleaseError("this host's release was read from the host: pass the host's "
                           "settings (releases.for_settings), not its id")
    if not isinstance(name, str) or not _RELEASE_RE.match(name):
        raise ReleaseError(f"not a Neuron SDK release: {name!r} (expected e.g. 2.32.0, or "
                           f"{AUTO} to read it from each host)")
    rels = load_all(directory)
    known = ", ".join(r.release for r in rels) or "none"
    if name.count(".") == 1:
        series = [r for r in rels if r.series == name]
        if not series:
            raise ReleaseError(f"unknown Neuron SDK release {name} (known: {known}); add "
                               f"its manifest to {directory} to support it")
        return newest(series)
    for rel in rels:
        if rel.release == name:
            return rel
    raise ReleaseError(f"unknown Neuron SDK release {name}: no manifest {name}.yml "
                       f"(known: {known}); add {directory / (name + '.yml')} to support it")
