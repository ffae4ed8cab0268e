"""A host's fingerprint from what the benchmark phase read on it.

The tasks gather raw facts (packages, the venv's distribution versions, the Neuron
driver version and the file it came from, checksums of the rendered units, the model
record, the instance type EC2's metadata gives, ``neuron-ls -j``); this module turns
them into ``<host>/fingerprint.json`` (:mod:`prefixbench.hosts.fingerprint` reads it back).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.hosts import host_read, provision, releases
from prefixbench.hosts.fingerprint import FINGERPRINT_SCHEMA_VERSION, Fingerprint
from prefixbench.hosts.instances import family


def _slurped(results: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the first successful ``slurp`` among ``results``."""
    return _slurped_from(results)[0]


def _slurped_from(results: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """The text of the first successful ``slurp`` among ``results``, and its file."""
    for item in results:
        if not item.get("failed") and item.get("content"):
            text = base64.b64decode(str(item["content"])).decode("utf-8", "replace").strip()
            if text:
                return text, str(item.get("source") or "") or None
    return None, None


@dataclass(frozen=True)
class NeuronLs:
    """What ``neuron-ls -j`` reported: devices, logical NeuronCores, the instance type it
    names (each None when it did not report it)."""

    devices: int | None = None
    cores: int | None = None
    instance_type: str | None = None


def neuron_ls(result: Mapping[str, Any] | None) -> NeuronLs:
    """Read a ``neuron-ls -j`` run (rc, stdout); nothing when it failed or printed no
    device list. Cores are the sum of ``nc_count`` when every device gives a whole one."""
    if not result or result.get("rc") != 0:
        return NeuronLs()
    try:
        devices = json.loads(str(result.get("stdout") or ""))
    except json.JSONDecodeError:
        return NeuronLs()
    if not isinstance(devices, list) or not all(isinstance(d, Mapping) for d in devices):
        return NeuronLs()
    counts = [d.get("nc_count") for d in devices]
    cores = (sum(c for c in counts if isinstance(c, int)) if devices and all(
        isinstance(c, int) and not isinstance(c, bool) for c in counts) else None)
    named = {str(d["instance_type"]) for d in devices if d.get("instance_type")}
    return NeuronLs(devices=len(devices), cores=cores,
                    instance_type=named.pop() if len(named) == 1 else None)


def fingerprint(host: str, settings: Mapping[str, Any], raw: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The fingerprint dict of one host (validated by :class:`Fingerprint`).

    ``raw`` holds what the tasks read: ``facts`` (ansible_facts), ``packages``
    (package_facts), ``venv_versions`` (JSON printed by the venv's python), ``driver``
    (slurp results, first success wins), ``units`` (stat results with sha256) and
    ``model`` (slurp results of the model record), ``imds`` (``instance_type`` from EC2's
    metadata, null off EC2) and ``neuron_ls`` (rc and stdout of ``neuron-ls -j``).
    ``sources`` records where each host-reported value came from.
    """
    facts: Mapping[str, Any] = raw.get("facts") or {}
    packages: Mapping[str, Sequence[Mapping[str, Any]]] = raw.get("packages") or {}
    venv_versions = str(raw.get("venv_versions") or "")
    driver: Sequence[Mapping[str, Any]] = raw.get("driver") or []
    units: Sequence[Mapping[str, Any]] = raw.get("units") or []
    model: Sequence[Mapping[str, Any]] = raw.get("model") or []
    release = releases.for_settings(settings)
    installed = provision.installed_versions(packages)
    neuron_packages = {name: installed[name] for name in release.known_apt()
                       if name in installed}
    try:
        versions = json.loads(venv_versions) if venv_versions else {}
    except json.JSONDecodeError:
        versions = {}
    model_text = _slurped(model)
    try:
        model_record = json.loads(model_text) if model_text else {}
    except json.JSONDecodeError:
        model_record = {}
    unit_sums = {}
    for item in units:
        stat = item.get("stat") or {}
        if stat.get("exists"):
            unit_sums[str(stat["path"]).rsplit("/", 1)[-1]] = str(stat.get("checksum", ""))
    instance_type = str(settings.get("prefixbench_instance_type", ""))
    driver_version, driver_file = _slurped_from(driver)
    listed = neuron_ls(raw.get("neuron_ls"))
    imds_type = str((raw.get("imds") or {}).get("instance_type") or "").strip() or None
    observed, observed_from = ((imds_type, "imds") if imds_type else
                               (listed.instance_type, "neuron-ls") if listed.instance_type
                               else (None, None))
    sources = {"instance_type": "inventory"}
    if observed_from:
        sources["observed_instance_type"] = observed_from
    if listed.devices is not None:
        sources["neuron_devices"] = "neuron-ls"
    if listed.cores is not None:
        sources["neuron_cores"] = "neuron-ls"
    if driver_file:
        sources["neuron_driver"] = driver_file
    if release.provenance:  # a release read from the host (hosts.host_read)
        sources["neuron_release"] = (f"{release.title}; could not check: "
                                     f"{'; '.join(host_read.unchecked(release.provenance))}")
    data = {
        "schema_version": FINGERPRINT_SCHEMA_VERSION,
        "host": host,
        "instance_type": instance_type,
        "family": family(instance_type),
        "platform": settings.get("prefixbench_platform"),
        "os": f"{facts.get('distribution', '?')} {facts.get('distribution_version', '?')}",
        "kernel": facts.get("kernel"),
        "neuron_release": release.release,
        "neuron_packages": neuron_packages,
        "neuron_driver": driver_version,
        "vllm_version": versions.get("vllm"),
        "vllm_neuron_version": versions.get("vllm-neuron"),
        "units": unit_sums,
        "model": {"source": str(model_record.get("source", "")),
                  "revision": str(model_record.get("revision", ""))},
        "observed_instance_type": observed,
        "neuron_devices": listed.devices,
        "neuron_cores": listed.cores,
        "sources": sources,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    Fingerprint.from_dict(data, f"fingerprint of {host}")
    return data
