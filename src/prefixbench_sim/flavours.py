"""Host flavours of the simulated fleet: a host as a real Trn fleet would hand it over.

``bare``
    what ``up`` boots: Debian 12 with nothing of Neuron on it (an instance from a plain
    OS image).
``dlami``
    a host set up the way AWS's own vLLM image of a release is built, for each release
    whose manifest names a DLAMI (``dlami``): ``2.31.0-vllm-beta``, the vLLM 0.21 DLAMI of
    2026-07-20 on 2.31.0's packages (aws-neuron/deep-learning-containers 1fb9b21
    ``vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx``), the default; ``2.32.0``, today's
    vLLM 0.24 DLAMI (the same repository at tag 2.32.0,
    ``vllm/inference/0.24.0.1.1.0/Dockerfile.neuronx``):

    * the Neuron apt source exactly as that Dockerfile writes it:
      ``deb [signed-by=/etc/apt/keyrings/neuron.gpg] URL jammy main``, the key dearmored
      into that keyring; suite ``jammy`` whatever the host's codename (the simulated
      repository serves it: :data:`prefixbench_sim.artifacts_apt.AWS_SUITE`);
    * the release's Neuron packages installed at their pins (2.31.0-vllm-beta:
      aws-neuronx-tools 2.31.13; 2.32.0: 2.32.28), not held;
    * a ``neuron`` group, as AWS's security guide creates it to narrow the driver's
      ``/dev/neuron*`` rule to ``GROUP="neuron", MODE="0660"`` (the service user must
      join it);
    * the vLLM virtualenv at the DLAMI's path (the release manifest's ``dlami.venv``,
      which is also the ``vllm_env_adopt_venv`` default),
      holding the same vLLM build the bare hosts get (vLLM on CPU, from the harness's
      lock) and, as the DLAMI's plugin, a code-free stand-in distribution named
      ``vllm-neuron`` at the DLAMI wheel's own version, local label included
      (``dlami.plugin``: ``0.21.0.1.0.0+794754d``, ``0.24.0.1.1.0+e8242a9``; built by
      :mod:`prefixbench_sim.artifacts_pip`; it exists so that the adoption check, which
      reads that distribution's version, sees what it would see on a DLAMI).

    Not reproduced: the interpreter. AWS's image runs Python 3.13 (the Dockerfile's
    ``PYTHON_VERSION``) and the DLAMI Ubuntu 24.04's 3.12; the simulated hosts are Debian
    12 and their vLLM wheelhouse is built for its Python 3.11.

The sources of the DLAMI facts are named in the release manifest
(``data/neuron_releases/<release>.yml``, ``dlami`` and ``notes``).

The DLAMI's venv comes with the image, built before the host boots; here it is built the
first time a host is dressed (a pip install of the whole lock, 80-95 s of one core) and
kept as a tarball in the cache directory (``dlami-venv-<venv name>-<key>.tar``, the key over the
lock, the plugin's version, the venv's path and the hosts' interpreter), which later
dressings unpack in a few seconds. Its content is what the same pip install gives.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from pathlib import Path
from typing import Final

from prefixbench.hosts import releases
from prefixbench_sim import layout, newer_release
from prefixbench_sim.artifacts_apt import AWS_SUITE
from prefixbench_sim.artifacts_pip import LOCK_NAME, standin_version
from prefixbench_sim.fleet import Fleet
from prefixbench_sim.layout import SimHost
from prefixbench_sim.newer_release import Dressing
from prefixbench_sim.system import SimFleetError

FLAVOURS: Final = ("bare", "dlami", "newer")

#: Marker the dressing leaves, so that dressing an already dressed host is a no-op.
MARKER: Final = "/var/lib/prefixbench-sim/flavour"


def venv_cache_key(lock: bytes, plugin: str, venv: str, interpreter: str) -> str:
    """The key of a built DLAMI venv: anything that changes what pip would install, or
    where, or for which Python, changes it."""
    digest = hashlib.sha256()
    for part in (lock, plugin.encode(), venv.encode(), interpreter.encode()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:20]


def _interpreter_id(rootfs: Path) -> str:
    """The hosts' Python as their root filesystem image has it (name, image build)."""
    python = rootfs / "usr" / "bin" / "python3"
    target = str(python.readlink()) if python.is_symlink() else python.name
    return f"{target} {rootfs.stat().st_mtime_ns}"


def dressing_of(flavour: str, release: str) -> Dressing:
    """What ``flavour`` puts on a host: a known release's DLAMI (``dlami``), or the
    DLAMI of a release no manifest knows (``newer``: :mod:`prefixbench_sim.newer_release`)."""
    if flavour == "newer":
        return newer_release.NEWER
    rel = releases.load_release(release)
    return newer_release.of_release(rel, standin_version(rel))


def dlami_script(dressing: Dressing | releases.Release, suite: str = AWS_SUITE,
                 artifact_url: str = layout.ARTIFACT_URL, *, venv_ready: bool = False) -> str:
    """The shell script (run as root inside the host) that makes a bare host a DLAMI one;
    with ``venv_ready`` the venv is already in place (unpacked from the cache)."""
    if isinstance(dressing, releases.Release):
        dressing.require_complete()
        dressing = newer_release.of_release(dressing, standin_version(dressing))
    repo = f"{artifact_url}neuron-apt"
    pins = " ".join(shlex.quote(p) for p in dressing.apt_pins())
    plugin = dressing.plugin
    dlami_venv = dressing.venv
    if not plugin or not dlami_venv:
        raise ValueError(f"Neuron SDK {dressing.label} names no vllm-neuron version or "
                         "DLAMI venv")
    index = f"{artifact_url}pip/simple"
    trusted = artifact_url.split("//", 1)[1].split(":", 1)[0]
    venv = shlex.quote(dlami_venv)
    build = "# The DLAMI's vLLM virtualenv: unpacked from the cache, as built before.\n" \
        if venv_ready else f"""# The DLAMI's vLLM virtualenv.
rm -rf {venv}
python3 -m venv {venv}
{venv}/bin/pip install -q --index-url {index} --trusted-host {trusted} --no-deps \\
  -r {artifact_url}pip/{LOCK_NAME}
{venv}/bin/pip install -q --index-url {index} --trusted-host {trusted} --no-deps \\
  vllm-neuron=={plugin}
"""
    return f"""set -eu
if [ -e {MARKER} ]; then cat {MARKER}; exit 0; fi
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
# As AWS's vLLM 0.21 image writes it: a dearmored keyring and suite {suite}.
mkdir -p /etc/apt/keyrings
curl -fsS --max-time 30 {repo}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/neuron.gpg
chmod 0644 /etc/apt/keyrings/neuron.gpg
echo "deb [signed-by=/etc/apt/keyrings/neuron.gpg] {repo} {suite} main" \\
  > /etc/apt/sources.list.d/neuron.list
apt-get update -q
apt-get install -y -q "linux-headers-$(uname -r)" {pins}
{build}# AWS's hardening of the device rule (GROUP="neuron", MODE="0660") starts with the group.
getent group neuron >/dev/null || groupadd -r neuron
mkdir -p "$(dirname {MARKER})"
echo "dlami {dressing.label}" > {MARKER}
cat {MARKER}
"""


def dress(fleet: Fleet, host: SimHost, flavour: str, release: str = "2.31.0-vllm-beta") -> str:
    """Give a booted bare host ``flavour`` (idempotent); returns the host's flavour line."""
    if flavour not in FLAVOURS:
        raise SimFleetError(f"unknown host flavour {flavour!r} (known: {', '.join(FLAVOURS)})")
    if flavour == "bare":
        return "bare"
    dressing = dressing_of(flavour, release)
    paths = fleet.paths
    merged = paths.merged(host.name)
    venv = dressing.venv.lstrip("/")
    tarball = paths.cache / "dlami-venv-{}-{}.tar".format(Path(venv).name, venv_cache_key(
        (paths.www / "pip" / LOCK_NAME).read_bytes(), dressing.plugin, venv,
        _interpreter_id(paths.rootfs)))
    dressed = (merged / MARKER.lstrip("/")).exists()
    unpacked = not dressed and bool(venv) and tarball.is_file()
    if unpacked:
        subprocess.run(["rm", "-rf", str(merged / venv)], check=True)
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(merged)], check=True,
                       timeout=600)
    script = dlami_script(dressing, venv_ready=unpacked)
    proc = fleet.exec(host, ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                             "HOME=/root", "sh", "-c", script], timeout=1200)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SimFleetError(f"{host.name}: dressing as {flavour} failed:\n{tail}")
    if not dressed and not unpacked and venv:
        _keep_venv(merged, venv, tarball)
    return proc.stdout.strip().splitlines()[-1]


def _keep_venv(root: Path, venv: str, tarball: Path) -> None:
    """Write the venv just built to ``tarball`` (atomically), dropping older builds."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    for old in tarball.parent.glob(f"dlami-venv-{Path(venv).name}-*.tar"):
        old.unlink()
    partial = tarball.with_name(f".{tarball.name}.{os.getpid()}")
    try:
        subprocess.run(["tar", "-cf", str(partial), "-C", str(root), venv], check=True,
                       timeout=600)
        partial.replace(tarball)
    finally:
        partial.unlink(missing_ok=True)
