"""Host flavours of the simulated fleet: a host as a real Trn fleet would hand it over.

``bare``
    what ``up`` boots: Debian 12 with nothing of Neuron on it (an instance from a plain
    OS image).
``dlami``
    a host set up the way AWS's own vLLM 0.21 image is built (aws-neuron/
    deep-learning-containers ``vllm/inference/0.21.0.1.0.0/Dockerfile.neuronx`` at tag
    2.31.1, the published build of the stack the vLLM 0.21 DLAMI carries):

    * the Neuron apt source exactly as that Dockerfile writes it:
      ``deb [signed-by=/etc/apt/keyrings/neuron.gpg] URL jammy main``, the key dearmored
      into that keyring; suite ``jammy`` whatever the host's codename (the simulated
      repository serves it: :data:`prefixbench.sim.artifacts_apt.AWS_SUITE`);
    * the release's Neuron packages installed at their pins (2.31.1: aws-neuronx-tools
      2.31.15), not held;
    * a ``neuron`` group, as AWS's security guide creates it to narrow the driver's
      ``/dev/neuron*`` rule to ``GROUP="neuron", MODE="0660"`` (the service user must
      join it);
    * the vLLM virtualenv at the DLAMI's path (the release manifest's ``dlami.venv``,
      which is also the ``vllm_env_adopt_venv`` default),
      holding the same vLLM build the bare hosts get (vLLM on CPU, from the harness's
      lock) and, as the DLAMI's plugin, a code-free stand-in distribution named
      ``vllm-neuron`` at the DLAMI wheel's own version, local label included
      (``dlami.plugin``: ``0.21.0.1.0.0+794754d``; built by
      :mod:`prefixbench.sim.artifacts_pip`; it exists so that the adoption check, which
      reads that distribution's version, sees what it would see on a DLAMI).

    Not reproduced: the interpreter. AWS's image runs Python 3.13 (the Dockerfile's
    ``PYTHON_VERSION``) and the DLAMI Ubuntu 24.04's 3.12; the simulated hosts are Debian
    12 and their vLLM wheelhouse is built for its Python 3.11.

The sources of the DLAMI facts are named in the release manifest
(``data/neuron_releases/<release>.yml``, ``dlami`` and ``notes``).
"""

from __future__ import annotations

import shlex
from typing import Final

from prefixbench.hosts import releases
from prefixbench.sim import layout
from prefixbench.sim.artifacts_apt import AWS_SUITE
from prefixbench.sim.artifacts_pip import LOCK_NAME, standin_version
from prefixbench.sim.fleet import Fleet
from prefixbench.sim.layout import SimHost
from prefixbench.sim.system import SimFleetError

FLAVOURS: Final = ("bare", "dlami")

#: Marker the dressing leaves, so that dressing an already dressed host is a no-op.
MARKER: Final = "/var/lib/prefixbench-sim/flavour"


def dlami_script(release: releases.Release, suite: str = AWS_SUITE,
                 artifact_url: str = layout.ARTIFACT_URL) -> str:
    """The shell script (run as root inside the host) that makes a bare host a DLAMI one."""
    repo = f"{artifact_url}neuron-apt"
    pins = " ".join(shlex.quote(p) for p in release.apt_pins())
    plugin = standin_version(release)
    dlami_venv = release.dlami.get("venv")
    if not plugin or not dlami_venv:
        raise ValueError(f"Neuron SDK {release.release} names no vllm-neuron version or "
                         "DLAMI venv")
    index = f"{artifact_url}pip/simple"
    trusted = artifact_url.split("//", 1)[1].split(":", 1)[0]
    venv = shlex.quote(dlami_venv)
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
# The DLAMI's vLLM virtualenv.
python3 -m venv {venv}
{venv}/bin/pip install -q --index-url {index} --trusted-host {trusted} --no-deps \\
  -r {artifact_url}pip/{LOCK_NAME}
{venv}/bin/pip install -q --index-url {index} --trusted-host {trusted} --no-deps \\
  vllm-neuron=={plugin}
# AWS's hardening of the device rule (GROUP="neuron", MODE="0660") starts with the group.
getent group neuron >/dev/null || groupadd -r neuron
mkdir -p "$(dirname {MARKER})"
echo "dlami {release.release}" > {MARKER}
cat {MARKER}
"""


def dress(fleet: Fleet, host: SimHost, flavour: str, release: str = "2.31") -> str:
    """Give a booted bare host ``flavour`` (idempotent); returns the host's flavour line."""
    if flavour not in FLAVOURS:
        raise SimFleetError(f"unknown host flavour {flavour!r} (known: {', '.join(FLAVOURS)})")
    if flavour == "bare":
        return "bare"
    script = dlami_script(releases.load_release(release))
    proc = fleet.exec(host, ["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
                             "HOME=/root", "sh", "-c", script], timeout=1200)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SimFleetError(f"{host.name}: dressing as {flavour} failed:\n{tail}")
    return proc.stdout.strip().splitlines()[-1]
