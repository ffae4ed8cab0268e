"""The simulated Neuron SDK apt repository served to the simulated fleet.

Layout under ``<www>/neuron-apt/`` (a flat Debian archive, suite ``bookworm``, component
``main``, architecture ``amd64``)::

    GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB       ASCII-armored public key (same name as upstream)
    dists/bookworm/Release, InRelease, Release.gpg
    dists/bookworm/main/binary-amd64/Packages, Packages.gz
    pool/main/a/<package>/<package>_<version>_amd64.deb

A host uses it exactly as it would use ``https://apt.repos.neuron.amazonaws.com``::

    deb [signed-by=/etc/apt/keyrings/neuron.asc] http://10.213.0.1:8080/neuron-apt bookworm main

The packages carry the real names and the versions of every Neuron release manifest in
``data/neuron_releases/`` (``null`` versions skipped). A package named with a single
version anywhere also gets one simulation-only older version, so a test can put a host
at a version other than the release's. Like the real runtime-lib and collectives debs,
those two carry a Debian suffix (``2.33.10.0-<hash>``), so roles must pin ``=<version>*``.
There is also a ``linux-headers-<kernel>`` package for the kernel this machine runs
(the containers share it), so a role's ``linux-headers-{{ ansible_facts.kernel }}``
step runs unchanged.

What they install (nothing of AWS Neuron; every Description says so):

- ``aws-neuronx-dkms``: ``/usr/src/aws-neuronx-<ver>/dkms.conf`` and
  ``/var/lib/prefixbench-sim/neuron-driver-version``; no kernel module.
- ``aws-neuronx-runtime-lib`` / ``-collectives``: placeholder ``libnrt.so.<ver>`` /
  ``libnccom.so.<ver>`` (+ symlinks) under ``/opt/aws/neuron/lib``.
- ``aws-neuronx-tools``: ``/opt/aws/neuron/bin/neuron-ls`` and ``neuron-top``
  (:mod:`prefixbench.sim.host_neuron_ls`) and the instance catalog they read.
- ``aws-neuronx-oci-hook``: a version marker under ``/opt/aws/neuron/share``.

The signing key is generated once (``gpg --batch``) and kept in ``<cache>/apt-key``.
Debs are reproducible (``SOURCE_DATE_EPOCH``, fixed modes and owners, sorted content);
the repository is rebuilt only when an input changes (stamp ``.inputs.sha256``).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from prefixbench.hosts import instances, releases
from prefixbench.sim import host_neuron_ls
from prefixbench.sim._build import (
    BuildError,
    atomic_write,
    cache_dir,
    digest_inputs,
    log,
    run,
    sha256_bytes,
    sha256_file,
    source_date_epoch,
    stamp_matches,
    timed,
    write_stamp,
)

SUITE: Final = "bookworm"
COMPONENT: Final = "main"
ARCH: Final = "amd64"
REPO_DIRNAME: Final = "neuron-apt"
KEY_FILENAME: Final = "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
KEY_UID: Final = "prefixbench simulated Neuron repository <neuron-sim@prefixbench.invalid>"
MAINTAINER: Final = "prefixbench simulated fleet <neuron-sim@prefixbench.invalid>"
#: Bump when what the packages contain changes in a way the inputs do not show.
LAYOUT_VERSION: Final = 1

#: Real Neuron debs of these names carry a ``-<hash>`` Debian revision.
SUFFIXED: Final = frozenset({"aws-neuronx-runtime-lib", "aws-neuronx-collectives"})

NEURON_ROOT: Final = "/opt/aws/neuron"
SIM_SHARE: Final = f"{NEURON_ROOT}/share/prefixbench-sim"
CATALOG_PATH: Final = f"{SIM_SHARE}/instance_types.json"

_DIR_MODE: Final = 0o755
_FILE_MODE: Final = 0o644
_EXEC_MODE: Final = 0o755


@dataclass(frozen=True)
class DebFile:
    """A file (or, with ``link``, a symlink) a package installs at absolute ``path``."""

    path: str
    data: bytes = b""
    mode: int = _FILE_MODE
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


# --------------------------------------------------------------------------- specs


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


def repo_versions(rels: Iterable[releases.Release]) -> dict[str, dict[str, bool]]:
    """``{package: {upstream version: simulation-only?}}`` for every manifest package."""
    known: dict[str, set[str]] = {}
    for rel in rels:
        for name, version in rel.known_apt().items():
            known.setdefault(name, set()).add(version)
    out: dict[str, dict[str, bool]] = {}
    for name, versions in sorted(known.items()):
        out[name] = dict.fromkeys(sorted(versions), False)
        if len(versions) == 1:
            out[name][simulated_older(next(iter(versions)))] = True
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


def all_specs(rels: Sequence[releases.Release], catalog_json: str, kernel: str) -> list[DebSpec]:
    specs = [
        neuron_spec(name, upstream, sim_only, catalog_json)
        for name, versions in repo_versions(rels).items()
        for upstream, sim_only in versions.items()
    ]
    specs.append(headers_spec(kernel))
    return sorted(specs, key=lambda s: (s.name, s.version))


# --------------------------------------------------------------------------- debs


def _stage(spec: DebSpec, root: Path, epoch: int) -> None:
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(spec.control())
    for f in spec.files:
        target = root / f.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.link is not None:
            target.symlink_to(f.link)
        else:
            target.write_bytes(f.data)
            target.chmod(f.mode)
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_dir() and not path.is_symlink():
            path.chmod(_DIR_MODE)
        if path.name == "control":
            path.chmod(_FILE_MODE)
        os.utime(path, (epoch, epoch), follow_symlinks=False)
    root.chmod(_DIR_MODE)
    os.utime(root, (epoch, epoch))


def build_deb(spec: DebSpec, out_dir: Path) -> Path:
    """``dpkg-deb --build`` ``spec`` into ``out_dir`` reproducibly; returns the .deb path."""
    epoch = source_date_epoch()
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / spec.filename
    with tempfile.TemporaryDirectory(prefix="pb-deb-") as tmp:
        root = Path(tmp) / "root"
        _stage(spec, root, epoch)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)],
            env=env)
    return out


# --------------------------------------------------------------------------- indexes


def packages_stanza(spec: DebSpec, deb: Path) -> str:
    data = deb.read_bytes()
    fields = [*spec.fields(), ("Filename", spec.pool_path), ("Size", str(len(data))),
              ("MD5sum", hashlib.md5(data, usedforsecurity=False).hexdigest()),
              ("SHA256", sha256_bytes(data))]
    return "".join(f"{k}: {v}\n" for k, v in fields) + spec.description_field()


def release_file(dist: Path, epoch: int) -> str:
    """``Release`` for ``dist`` (= ``.../dists/<suite>``), hashing every index under it."""
    indexes = sorted(p for p in dist.rglob("*") if p.is_file()
                     and p.name not in {"Release", "InRelease", "Release.gpg"})
    date = email.utils.formatdate(epoch, usegmt=True)
    head = [
        "Origin: prefixbench-sim", "Label: prefixbench simulated Neuron SDK",
        f"Suite: {SUITE}", f"Codename: {SUITE}", f"Date: {date}",
        f"Architectures: {ARCH}", f"Components: {COMPONENT}",
        "Description: SIMULATED AWS Neuron repository for the prefixbench test fleet",
    ]
    md5 = ["MD5Sum:"]
    sha = ["SHA256:"]
    for p in indexes:
        data = p.read_bytes()
        rel = p.relative_to(dist).as_posix()
        md5.append(f" {hashlib.md5(data, usedforsecurity=False).hexdigest()} "
                   f"{len(data):>8} {rel}")
        sha.append(f" {sha256_bytes(data)} {len(data):>8} {rel}")
    return "\n".join(head + md5 + sha) + "\n"


# --------------------------------------------------------------------------- key


@dataclass(frozen=True)
class RepoKey:
    """The harness's signing key, in its own GnuPG home."""

    home: Path
    fingerprint: str
    _env: Mapping[str, str] = field(default_factory=dict, repr=False)

    def gpg(self, *args: str, input_data: bytes | None = None) -> bytes:
        argv = ["gpg", "--homedir", str(self.home), "--batch", "--yes", "--quiet",
                "--pinentry-mode", "loopback", "--passphrase", "", *args]
        try:
            return run(argv, input_data=input_data).stdout
        finally:
            stop_agent(self.home)

    def export_armored(self) -> bytes:
        return self.gpg("--armor", "--export", self.fingerprint)

    def sign(self, release: Path) -> None:
        """Write ``InRelease`` and ``Release.gpg`` next to ``release``."""
        common = ["--local-user", self.fingerprint, "--digest-algo", "SHA256"]
        self.gpg(*common, "--clearsign", "--output", str(release.with_name("InRelease")),
                 str(release))
        self.gpg(*common, "--armor", "--detach-sign", "--output",
                 str(release.with_name("Release.gpg")), str(release))


def stop_agent(home: Path) -> None:
    """End the gpg-agent gpg started for ``home`` (only that one)."""
    if shutil.which("gpgconf"):
        run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"])


def ensure_key(home: Path) -> RepoKey:
    """Load the signing key from ``home`` or generate it there (ed25519, no passphrase)."""
    fpr_file = home / "fingerprint"
    if fpr_file.is_file() and (home / "pubring.kbx").is_file():
        return RepoKey(home, fpr_file.read_text().strip())
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True, mode=0o700)
    key = RepoKey(home, "")
    with timed(f"generating the repository signing key in {home}"):
        key.gpg("--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        listing = key.gpg("--with-colons", "--list-secret-keys").decode()
    fprs = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
    if not fprs:
        raise BuildError(f"gpg generated no key in {home}")
    atomic_write(fpr_file, fprs[0] + "\n", 0o600)
    return RepoKey(home, fprs[0])


# --------------------------------------------------------------------------- verify


def verify_repo(repo: Path) -> None:
    """Check ``InRelease`` and ``Release.gpg`` with ``gpgv`` against the exported key, and
    every index against the hashes in ``Release``; raise :class:`BuildError` on a mismatch.
    """
    dist = repo / "dists" / SUITE
    with tempfile.TemporaryDirectory(prefix="pb-gpgv-") as tmp:
        keyring = Path(tmp) / "neuron.gpg"
        run(["gpg", "--homedir", tmp, "--batch", "--yes", "--dearmor", "--output",
             str(keyring), str(repo / KEY_FILENAME)])
        run(["gpgv", "--keyring", str(keyring), str(dist / "InRelease")])
        run(["gpgv", "--keyring", str(keyring), str(dist / "Release.gpg"), str(dist / "Release")])
    section = False
    for line in (dist / "Release").read_text().splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line == "SHA256:"
            continue
        if section and line.startswith(" "):
            digest, size, rel = line.split()
            path = dist / rel
            if sha256_file(path) != digest or path.stat().st_size != int(size):
                raise BuildError(f"{path}: does not match the signed Release")


# --------------------------------------------------------------------------- build


@dataclass(frozen=True)
class AptRepo:
    root: Path
    key_file: Path
    packages: tuple[str, ...]


def build_apt_repo(
    www: Path,
    *,
    releases_dir: Path = releases.RELEASES_DIR,
    catalog_file: Path = instances.CATALOG_FILE,
    kernel: str | None = None,
    key_home: Path | None = None,
) -> AptRepo:
    """Build (or leave as it is, when nothing changed) ``<www>/neuron-apt``."""
    kern = kernel or os.uname().release
    rels = releases.load_all(releases_dir)
    if not rels:
        raise BuildError(f"no release manifests in {releases_dir}")
    cat_json = instances.catalog_json(instances.load_catalog(catalog_file))
    key = ensure_key(key_home or cache_dir() / "apt-key")
    specs = all_specs(rels, cat_json, kern)
    names = tuple(f"{s.name}={s.version}" for s in specs)
    repo = www / REPO_DIRNAME
    stamp = repo / ".inputs.sha256"
    digest = digest_inputs({
        "controls": [s.control() for s in specs],
        "files": [[f.path, sha256_bytes(f.data), f.mode, f.link] for s in specs for f in s.files],
        "key": key.fingerprint, "epoch": source_date_epoch(), "layout": LAYOUT_VERSION,
    })
    if stamp_matches(stamp, digest):
        log(f"apt repository up to date: {repo} ({len(specs)} packages)")
        return AptRepo(repo, repo / KEY_FILENAME, names)
    www.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".neuron-apt-", dir=www))
    try:
        with timed(f"building {len(specs)} simulated debs"):
            stanzas = []
            for spec in specs:
                deb = build_deb(spec, tmp / Path(spec.pool_path).parent)
                stanzas.append(packages_stanza(spec, deb))
        index = "\n".join(stanzas).encode()
        bindir = tmp / "dists" / SUITE / COMPONENT / f"binary-{ARCH}"
        atomic_write(bindir / "Packages", index)
        atomic_write(bindir / "Packages.gz", gzip.compress(index, 9, mtime=0))
        dist = tmp / "dists" / SUITE
        atomic_write(dist / "Release", release_file(dist, source_date_epoch()))
        key.sign(dist / "Release")
        atomic_write(tmp / KEY_FILENAME, key.export_armored())
        verify_repo(tmp)
        write_stamp(tmp / ".inputs.sha256", digest)
        for path in tmp.rglob("*"):
            path.chmod(_DIR_MODE if path.is_dir() else _FILE_MODE)
        tmp.chmod(_DIR_MODE)
        if repo.exists():
            shutil.rmtree(repo)
        tmp.replace(repo)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log(f"apt repository written: {repo} ({len(specs)} packages, signed by {key.fingerprint})")
    return AptRepo(repo, repo / KEY_FILENAME, names)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 -- CLI only

    parser = argparse.ArgumentParser(description="Build the simulated Neuron apt repository.")
    parser.add_argument("www", type=Path)
    args = parser.parse_args(argv)
    built = build_apt_repo(args.www.resolve())
    print("\n".join(built.packages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
