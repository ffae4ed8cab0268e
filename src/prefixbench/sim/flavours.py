"""Host flavours of the simulated fleet: a host as a real Trn fleet would hand it over.

``bare``
    what ``up`` boots: Debian 12 with nothing of Neuron on it (an instance from a plain
    OS image).
``dlami``
    a host set up the way the Neuron DLAMI and AWS's Neuron setup guide leave one:

    * the Neuron apt repository listed in ``/etc/apt/sources.list.d/neuron.list`` as a
      plain ``deb URL CODENAME main`` line, without ``signed-by``, its key trusted
      system-wide (the guide pipes it into ``apt-key add``; this writes the same key
      into ``/etc/apt/trusted.gpg.d/``, which is what ``apt-key add`` amounts to and
      needs no gnupg);
    * the release's Neuron packages installed at their pins, not held;
    * a ``neuron`` group, as AWS's security guide creates it to narrow the driver's
      ``/dev/neuron*`` rule to ``GROUP="neuron", MODE="0660"`` (the service user must
      join it);
    * the vLLM virtualenv at the DLAMI's path (the release manifest's ``dlami.venv``,
      which is also the ``vllm_env_adopt_venv`` default),
      holding the same vLLM build the bare hosts get (vLLM on CPU, from the harness's
      lock) and, as the DLAMI's plugin, a code-free stand-in distribution named
      ``vllm-neuron`` at the release's version (built by
      :mod:`prefixbench.sim.artifacts_pip`; it exists so that the adoption check, which
      reads that distribution's version, sees what it would see on a DLAMI).

The sources of the DLAMI facts are named in the release manifest
(``data/neuron_releases/<release>.yml``, ``dlami`` and ``notes``).
"""

from __future__ import annotations

import shlex
from typing import Final

from prefixbench.hosts import releases
from prefixbench.sim import layout
from prefixbench.sim.artifacts_pip import LOCK_NAME
from prefixbench.sim.fleet import Fleet
from prefixbench.sim.layout import SimHost
from prefixbench.sim.system import SimFleetError

FLAVOURS: Final = ("bare", "dlami")

#: Marker the dressing leaves, so that dressing an already dressed host is a no-op.
MARKER: Final = "/var/lib/prefixbench-sim/flavour"


def dlami_script(release: releases.Release, codename: str = "bookworm",
                 artifact_url: str = layout.ARTIFACT_URL) -> str:
    """The shell script (run as root inside the host) that makes a bare host a DLAMI one."""
    repo = f"{artifact_url}neuron-apt"
    pins = " ".join(shlex.quote(p) for p in release.apt_pins())
    plugin = release.pip_packages.get("vllm-neuron")
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
# AWS's guide: a plain source line, the key trusted system-wide (apt-key add).
curl -fsS --max-time 30 {repo}/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \\
  -o /etc/apt/trusted.gpg.d/neuron.asc
chmod 0644 /etc/apt/trusted.gpg.d/neuron.asc
echo "deb {repo} {codename} main" > /etc/apt/sources.list.d/neuron.list
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
