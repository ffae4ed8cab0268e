"""Neuron SDK release manifests: which package versions make up a release.

A manifest is ``data/neuron_releases/<major>.<minor>.yml``; its format is documented at
the top of each file. The provisioning roles install exactly what the manifest of their
release names; the simulated fleet builds its apt repository from the same files. Pure:
no host is touched here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

RELEASES_DIR: Final = Path(__file__).resolve().parents[1] / "data" / "neuron_releases"
SCHEMA: Final = 1

_RELEASE_RE: Final = re.compile(r"^\d+\.\d+(\.\d+)?$")
_DEB_NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_PIP_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION_RE: Final = re.compile(r"^\d+(\.\d+)*$")
_KNOWN_KEYS: Final = frozenset({"schema", "release", "sources", "apt", "pip", "os", "notes",
                                "python", "dlami"})
_PY_RE: Final = re.compile(r"^3\.\d+$")
_SOURCE_RE: Final = re.compile(r"^(git\+)?https://\S+@[0-9a-f]{7,40}$")


class ReleaseError(ValueError):
    """A manifest is missing, malformed or incomplete; the message names the fix."""


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
    #: The DLAMI that carries the release's vLLM venv: venv, ssm_parameter, name_filter,
    #: source (all strings); empty when none is known.
    dlami: Mapping[str, str] = field(default_factory=dict)

    @property
    def series(self) -> str:
        """``major.minor`` (the manifest's file name)."""
        return ".".join(self.release.split(".")[:2])

    def unknown(self) -> list[str]:
        """``apt:<name>`` / ``pip:<name>`` for every version the manifest marks unknown."""
        out = [f"apt:{n}" for n, v in self.apt_packages.items() if v is None]
        out += [f"pip:{n}" for n, v in self.pip_packages.items() if v is None]
        if self.vllm is None:
            out.append("pip:vllm")
        return out

    def require_complete(self) -> None:
        """Raise :class:`ReleaseError` when any version is unknown."""
        missing = self.unknown()
        if missing:
            raise ReleaseError(
                f"Neuron SDK {self.release}: versions unknown for {', '.join(missing)}; "
                f"fill them in {self.series}.yml before installing this release"
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
    if not isinstance(release, str) or not _RELEASE_RE.match(release):
        raise ReleaseError(f"{origin}: release must be a quoted version like \"2.31.0\"")
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


def origin_label(data: Mapping[str, Any]) -> str:
    return f"manifest of {data.get('release', '?')}"


def available_releases(directory: Path = RELEASES_DIR) -> list[str]:
    """The ``major.minor`` names of every manifest in ``directory``, oldest first."""
    names = [p.stem for p in directory.glob("*.yml") if _RELEASE_RE.match(p.stem)]
    return sorted(names, key=lambda n: tuple(int(x) for x in n.split(".")))


def load_release(name: str, directory: Path = RELEASES_DIR) -> Release:
    """Load the manifest of release ``name`` (``2.31`` or ``2.31.0``)."""
    if not _RELEASE_RE.match(name):
        raise ReleaseError(f"not a Neuron SDK release: {name!r} (expected e.g. 2.31)")
    series = ".".join(name.split(".")[:2])
    path = directory / f"{series}.yml"
    if not path.is_file():
        known = ", ".join(available_releases(directory)) or "none"
        raise ReleaseError(
            f"unknown Neuron SDK release {name}: no manifest {path.name} "
            f"(known: {known}); add {directory / path.name} to support it"
        )
    rel = parse_release(yaml.safe_load(path.read_text()), path.name)
    if rel.series != series:
        raise ReleaseError(f"{path.name}: release {rel.release} does not match its file name")
    if name.count(".") == 2 and rel.release != name:
        raise ReleaseError(f"{path.name} describes {rel.release}, not {name}")
    return rel


def load_all(directory: Path = RELEASES_DIR) -> list[Release]:
    return [load_release(n, directory) for n in available_releases(directory)]
