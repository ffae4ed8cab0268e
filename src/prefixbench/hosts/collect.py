"""A host's fingerprint from what the benchmark phase read on it.

The tasks gather raw facts (packages, the venv's distribution versions, the Neuron
driver version, checksums of the rendered units, the model record); this module turns
them into ``<host>/fingerprint.json`` (:mod:`prefixbench.hosts.fingerprint` reads it back).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from prefixbench.hosts import provision, releases
from prefixbench.hosts.fingerprint import FINGERPRINT_SCHEMA_VERSION, Fingerprint
from prefixbench.hosts.instances import family


def _slurped(results: Sequence[Mapping[str, Any]]) -> str | None:
    """The text of the first successful ``slurp`` among ``results``."""
    for item in results:
        if not item.get("failed") and item.get("content"):
            return base64.b64decode(str(item["content"])).decode("utf-8", "replace").strip()
    return None


def fingerprint(host: str, settings: Mapping[str, Any], raw: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The fingerprint dict of one host (validated by :class:`Fingerprint`).

    ``raw`` holds what the tasks read: ``facts`` (ansible_facts), ``packages``
    (package_facts), ``venv_versions`` (JSON printed by the venv's python), ``driver``
    (slurp results, first success wins), ``units`` (stat results with sha256) and
    ``model`` (slurp results of the model record).
    """
    facts: Mapping[str, Any] = raw.get("facts") or {}
    packages: Mapping[str, Sequence[Mapping[str, Any]]] = raw.get("packages") or {}
    venv_versions = str(raw.get("venv_versions") or "")
    driver: Sequence[Mapping[str, Any]] = raw.get("driver") or []
    units: Sequence[Mapping[str, Any]] = raw.get("units") or []
    model: Sequence[Mapping[str, Any]] = raw.get("model") or []
    release = releases.load_release(str(settings["prefixbench_neuron_release"]))
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
        "neuron_driver": _slurped(driver),
        "vllm_version": versions.get("vllm"),
        "vllm_neuron_version": versions.get("vllm-neuron"),
        "units": unit_sums,
        "model": {"source": str(model_record.get("source", "")),
                  "revision": str(model_record.get("revision", ""))},
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    Fingerprint.from_dict(data, f"fingerprint of {host}")
    return data
