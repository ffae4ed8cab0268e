"""What the simulated Neuron apt repository's packages are: names, versions, control
fields and the files each installs.

The packages carry the real names and the versions of every Neuron release manifest in
``data/neuron_releases/`` (:func:`repo_versions`; a package named with a single version
anywhere also gets one simulation-only older version), plus ``linux-headers-<kernel>``
(:func:`headers_spec`). What each installs (nothing of AWS Neuron) is listed in
:mod:`prefixbench_sim.artifacts_apt`, which builds, indexes and signs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from prefixbench.hosts import releases
from prefixbench_sim import host_neuron_ls
from prefixbench_sim._build import BuildError, sha256_bytes

__all__ = [
    "ARCH",
    "CATALOG_PATH",
    "COMPONENT",
    "FILE_MODE",
    "DebFile",
    "DebSpec",
    "all_specs",
    "debian_version",
    "headers_spec",
    "neuron_spec",
    "repo_versions",
    "simulated_older",
    "tools_script",
]

COMPONENT: Final = "main"
ARCH: Final = "amd64"
MAINTAINER: Final = "prefixbench simulated fleet <neuron-sim@prefixbench.invalid>"

#: Real Neuron debs of these names carry a ``-<hash>`` Debian revision.
SUFFIXED: Final = frozenset({"aws-neuronx-runtime-lib", "aws-neuronx-collectives"})

NEURON_ROOT: Final = "/opt/aws/neuron"
SIM_SHARE: Final = f"{NEURON_ROOT}/share/prefixbench-sim"
CATALOG_PATH: Final = f"{SIM_SHARE}/instance_types.json"

FILE_MODE: Final = 0o644
_EXEC_MODE: Final = 0o755


@dataclass(frozen=True)
class DebFile:
    """A file (or, with ``link``, a symlink) a package installs at absolute ``path``."""

    path: str
    data: bytes = b""
    mode: int = FILE_MODE
    link: str | None = None


@dataclass(frozen=True)
class DebSpec:
    name: str
    version: str
    summary: str
    description: str
    files: tuple[DebFile, ...]
    depends: tuple[str, ...] = ()
    section: str = "misc"

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{ARCH}.deb"

    @property
    def pool_path(self) -> str:
        return f"pool/{COMPONENT}/{self.name[0]}/{self.name}/{self.filename}"

    def installed_size_kib(self) -> int:
        return sum(1 if f.link else max(1, -(-len(f.data) // 1024)) for f in self.files)

    def fields(self) -> list[tuple[str, str]]:
        out = [
            ("Package", self.name), ("Version", self.version), ("Architecture", ARCH),
            ("Maintainer", MAINTAINER), ("Installed-Size", str(self.installed_size_kib())),
        ]
        if self.depends:
            out.append(("Depends", ", ".join(self.depends)))
        out += [("Section", self.section), ("Priority", "optional")]
        return out

    def description_field(self) -> str:
        lines = [f"Description: {self.summary}"]
        for para in self.description.strip().split("\n\n"):
            if len(lines) > 1:
                lines.append(" .")
            lines += [f" {line.strip()}" for line in para.strip().splitlines()]
        return "\n".join(lines) + "\n"

    def control(self) -> str:
        return "".join(f"{k}: {v}\n" for k, v in self.fields()) + self.description_field()


def simulated_older(version: str) -> str:
    """A simulation-only version just below ``version`` (``2.31.13.0`` -> ``2.30.0.0``)."""
    parts = [int(p) for p in version.split(".")]
    if len(parts) > 1 and parts[1] > 0:
        parts = [parts[0], parts[1] - 1] + [0] * (len(parts) - 2)
    else:
        parts = [parts[0] - 1] + [0] * (len(parts) - 1)
    return ".".join(str(p) for p in parts)


def debian_version(name: str, upstream: str) -> str:
    if name in SUFFIXED:
        return f"{upstream}-{sha256_bytes(f'{name}={upstream}'.encode())[:9]}"
    return upstream


def repo_versions(rels: Iterable[releases.Release], extra: Mapping[str, str] | None = None
                  ) -> dict[str, dict[str, bool]]:
    """``{package: {upstream version: simulation-only?}}`` for every manifest package, and
    ``extra`` (simulation-only: the release no manifest knows,
    :data:`prefixbench_sim.newer_release.APT`)."""
    known: dict[str, set[str]] = {}
    for rel in rels:
        for name, version in rel.known_apt().items():
            known.setdefault(name, set()).add(version)
    out: dict[str, dict[str, bool]] = {}
    for name, versions in sorted(known.items()):
        out[name] = dict.fromkeys(sorted(versions), False)
        if len(versions) == 1:
            out[name][simulated_older(next(iter(versions)))] = True
    for name, version in sorted((extra or {}).items()):
        out.setdefault(name, {})[version] = True
    return out


_SIM_NOTE: Final = (
    "SIMULATION for the prefixbench test fleet: a stand-in with the real package's name\n"
    "and version that contains no AWS Neuron software, driver or library."
)


def _describe(what: str, sim_only: bool) -> str:
    extra = "\n\nThis version exists only in the simulated repository." if sim_only else ""
    return f"{_SIM_NOTE}\n\n{what}{extra}"


def _lib_files(base: str, soname_major: str, upstream: str) -> tuple[DebFile, ...]:
    real = f"{base}.so.{upstream}"
    placeholder = (f"prefixbench simulation: placeholder for {real}; not a shared object.\n"
                   ).encode()
    lib = f"{NEURON_ROOT}/lib"
    return (
        DebFile(f"{lib}/{real}", placeholder),
        DebFile(f"{lib}/{base}.so.{soname_major}", link=real),
        DebFile(f"{lib}/{base}.so", link=f"{base}.so.{soname_major}"),
    )


def neuron_spec(name: str, upstream: str, sim_only: bool, catalog_json: str) -> DebSpec:
    """The simulated deb of Neuron package ``name`` at ``upstream`` version."""
    version = debian_version(name, upstream)
    summary = f"SIMULATED {name} {upstream} (prefixbench test fleet, no Neuron software)"
    if name == "aws-neuronx-dkms":
        conf = (f'# prefixbench simulation: no kernel module is built or installed.\n'
                f'PACKAGE_NAME="aws-neuronx"\nPACKAGE_VERSION="{upstream}"\n').encode()
        files: tuple[DebFile, ...] = (
            DebFile(f"/usr/src/aws-neuronx-{upstream}/dkms.conf", conf),
            DebFile("/var/lib/prefixbench-sim/neuron-driver-version", f"{upstream}\n".encode()),
        )
        what = "Installs a dkms.conf and a driver version marker; builds no kernel module."
        return DebSpec(name, version, summary, _describe(what, sim_only), files,
                       section="kernel")
    if name == "aws-neuronx-runtime-lib":
        return DebSpec(name, version, summary, _describe(
            "Installs a placeholder libnrt under /opt/aws/neuron/lib.", sim_only),
            _lib_files("libnrt", "1", upstream), section="libs")
    if name == "aws-neuronx-collectives":
        return DebSpec(name, version, summary, _describe(
            "Installs a placeholder libnccom under /opt/aws/neuron/lib.", sim_only),
            _lib_files("libnccom", "2", upstream), section="libs")
    if name == "aws-neuronx-tools":
        script = tools_script(upstream)
        files = (
            DebFile(f"{NEURON_ROOT}/bin/neuron-ls", script, _EXEC_MODE),
            DebFile(f"{NEURON_ROOT}/bin/neuron-top", script, _EXEC_MODE),
            DebFile(CATALOG_PATH, catalog_json.encode()),
        )
        what = ("Installs neuron-ls and neuron-top that print a simulated device listing\n"
                "for the instance type in /etc/prefixbench-sim/instance.json.")
        return DebSpec(name, version, summary, _describe(what, sim_only), files,
                       depends=("python3",), section="utils")
    files = (DebFile(f"{SIM_SHARE}/{name}.version", f"{upstream}\n".encode()),)
    return DebSpec(name, version, summary, _describe("Installs a version marker.", sim_only),
                   files)


def headers_spec(kernel: str) -> DebSpec:
    """``linux-headers-<kernel>``: the role's prerequisite, for the shared kernel."""
    note = (f"prefixbench simulation: the simulated hosts share the machine's kernel "
            f"{kernel}; no headers are installed.\n").encode()
    return DebSpec(
        f"linux-headers-{kernel}", "1.0+prefixbench.sim",
        f"SIMULATED linux-headers-{kernel} (prefixbench test fleet, no headers)",
        _describe("Satisfies the Neuron prerequisite linux-headers-$(uname -r).", False),
        (DebFile(f"/usr/src/linux-headers-{kernel}/prefixbench-sim.txt", note),),
        section="kernel",
    )


def tools_script(version: str) -> bytes:
    """The host_neuron_ls source with its ``TOOLS_VERSION`` set to ``version``."""
    source = Path(host_neuron_ls.__file__).read_text()
    new, count = re.subn(r'^TOOLS_VERSION = "[^"]*"$', f'TOOLS_VERSION = "{version}"',
                         source, count=1, flags=re.MULTILINE)
    if count != 1:
        raise BuildError("host_neuron_ls.py has lost its TOOLS_VERSION line")
    return new.encode()


def all_specs(rels: Sequence[releases.Release], catalog_json: str, kernel: str,
              extra: Mapping[str, str] | None = None) -> list[DebSpec]:
    specs = [
        neuron_spec(name, upstream, sim_only, catalog_json)
        for name, versions in repo_versions(rels, extra).items()
        for upstream, sim_only in versions.items()
    ]
    specs.append(headers_spec(kernel))
    return sorted(specs, key=lambda s: (s.name, s.version))
