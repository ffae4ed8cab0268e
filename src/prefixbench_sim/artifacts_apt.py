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
``data/neuron_releases/`` (``null`` versions skipped), and those of the simulated
release no manifest knows (:mod:`prefixbench_sim.newer_release`, simulation-only). A
package named with a single version anywhere also gets one simulation-only older
version, so a test can put a host at a version other than the release's. Like the real
runtime-lib and collectives debs, those two carry a Debian suffix
(``2.33.10.0-<hash>``), so roles must pin ``=<version>*``.
There is also a ``linux-headers-<kernel>`` package for the kernel this machine runs
(the containers share it), so a role's ``linux-headers-{{ ansible_facts.kernel }}``
step runs unchanged.

What they install (nothing of AWS Neuron; every Description says so):

- ``aws-neuronx-dkms``: ``/usr/src/aws-neuronx-<ver>/dkms.conf`` and
  ``/var/lib/prefixbench-sim/neuron-driver-version``; no kernel module.
- ``aws-neuronx-runtime-lib`` / ``-collectives``: placeholder ``libnrt.so.<ver>`` /
  ``libnccom.so.<ver>`` (+ symlinks) under ``/opt/aws/neuron/lib``.
- ``aws-neuronx-tools``: ``/opt/aws/neuron/bin/neuron-ls`` and ``neuron-top``
  (:mod:`prefixbench_sim.host_neuron_ls`) and the instance catalog they read.
- ``aws-neuronx-oci-hook``: a version marker under ``/opt/aws/neuron/share``.

The packages themselves (names, versions, control fields, files) are
:mod:`prefixbench_sim.apt_packages`; this module builds the debs, the indexes, the signed
``Release`` and the repository. The signing key is generated once (``gpg --batch``) and
kept in ``<cache>/apt-key``. Debs are reproducible (``SOURCE_DATE_EPOCH``, fixed modes and
owners, sorted content); the repository is rebuilt only when an input changes (stamp
``.inputs.sha256``).
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from prefixbench.hosts import instances, releases
from prefixbench_sim import newer_release
from prefixbench_sim._build import (
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
from prefixbench_sim.apt_packages import ARCH, COMPONENT, FILE_MODE, DebSpec, all_specs

SUITE: Final = "bookworm"
#: AWS writes its Neuron apt source with suite ``jammy`` whatever the host's codename
#: (aws-neuron/deep-learning-containers vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx at
#: tag 2.31.1, an Ubuntu 24.04 image); the repository serves the same packages under both,
#: so a host dressed as AWS leaves it (prefixbench_sim.flavours) finds them.
AWS_SUITE: Final = "jammy"
SUITES: Final = (SUITE, AWS_SUITE)
REPO_DIRNAME: Final = "neuron-apt"
KEY_FILENAME: Final = "GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB"
KEY_UID: Final = "prefixbench simulated Neuron repository <neuron-sim@prefixbench.invalid>"
#: Bump when what the packages contain changes in a way the inputs do not show.
LAYOUT_VERSION: Final = 2

_DIR_MODE: Final = 0o755


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
            path.chmod(FILE_MODE)
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


def release_file(dist: Path, epoch: int, suite: str = SUITE) -> str:
    """``Release`` for ``dist`` (= ``.../dists/<suite>``), hashing every index under it."""
    indexes = sorted(p for p in dist.rglob("*") if p.is_file()
                     and p.name not in {"Release", "InRelease", "Release.gpg"})
    date = email.utils.formatdate(epoch, usegmt=True)
    head = [
        "Origin: prefixbench-sim", "Label: prefixbench simulated Neuron SDK",
        f"Suite: {suite}", f"Codename: {suite}", f"Date: {date}",
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
    for suite in SUITES:
        _verify_suite(repo, repo / "dists" / suite)


def _verify_suite(repo: Path, dist: Path) -> None:
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


def served_specs(rels: Sequence[releases.Release], catalog_json: str, kernel: str
                 ) -> list[DebSpec]:
    """Every deb the repository serves: each manifest's packages and the simulated
    release's no manifest knows."""
    return all_specs(rels, catalog_json, kernel, newer_release.APT)


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
    specs = served_specs(rels, cat_json, kern)
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
        for suite in SUITES:
            dist = tmp / "dists" / suite
            bindir = dist / COMPONENT / f"binary-{ARCH}"
            atomic_write(bindir / "Packages", index)
            atomic_write(bindir / "Packages.gz", gzip.compress(index, 9, mtime=0))
            atomic_write(dist / "Release", release_file(dist, source_date_epoch(), suite))
            key.sign(dist / "Release")
        atomic_write(tmp / KEY_FILENAME, key.export_armored())
        verify_repo(tmp)
        write_stamp(tmp / ".inputs.sha256", digest)
        for path in tmp.rglob("*"):
            path.chmod(_DIR_MODE if path.is_dir() else FILE_MODE)
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
