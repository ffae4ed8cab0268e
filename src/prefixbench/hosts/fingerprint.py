"""Host fingerprints: what each host ran, and which hosts of a fleet differ.

A run directory holds one ``<host>/fingerprint.json`` per host (written by the benchmark
phase)::

    {"schema_version": 1, "host", "instance_type", "family", "platform": "neuron"|"cpu",
     "os", "kernel", "neuron_release", "neuron_packages": {deb: version},
     "neuron_driver", "vllm_version", "vllm_neuron_version",
     "units": {"vllm-baseline.service": sha256, "vllm-cached.service": sha256},
     "model": {"source", "revision"}, "observed_instance_type", "neuron_devices",
     "neuron_cores", "sources": {field: source}, "collected_at"}

``instance_type`` (and ``family``) are the inventory's setting. What the host itself
reported sits beside them: ``observed_instance_type`` (EC2's instance metadata, else
``neuron-ls``), ``neuron_devices`` and ``neuron_cores`` (``neuron-ls -j``). ``sources``
names where each such value came from: ``inventory``, ``imds``, ``neuron-ls``, or for
``neuron_driver`` the file it was read from (:data:`REAL_DRIVER_FILE` on a real host).
A value no host reported is null and has no source.

:meth:`Fingerprint.identity` is every field that must agree across a reproducible fleet
(all but ``host`` and ``collected_at``), flattened to ``dotted.keys`` so that a drift can
be named to the package (``neuron_packages.aws-neuronx-runtime-lib``).
:func:`group_by_identity` groups hosts with identical identities; :func:`drift` names, for
every host outside the majority group, each field whose value differs from the majority.

A fleet compares like with like: :func:`cohorts` groups hosts by what should make them
equal (:data:`COHORT_FIELDS`: instance family and type, Neuron release, model, and the
rendered units, which hold the settings), and :func:`drift_within_cohorts` is drift
inside each cohort only. A Trn3 host beside Trn2 hosts is another cohort, not drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "COHORT_FIELDS",
    "FINGERPRINT_SCHEMA_VERSION",
    "REAL_DRIVER_FILE",
    "Cohort",
    "Drift",
    "Fingerprint",
    "FingerprintError",
    "FingerprintGroup",
    "cohorts",
    "drift",
    "drift_within_cohorts",
    "group_by_identity",
]

FINGERPRINT_SCHEMA_VERSION: Final = 1

#: Where the Neuron kernel driver reports its version. The simulated hosts have no driver
#: and write their version to a marker file instead, which the fingerprint names as such.
REAL_DRIVER_FILE: Final = "/sys/module/neuron/version"

#: What should make two hosts equal (identity keys, before the first dot): hosts that
#: differ here are different populations, compared apart; any other difference inside
#: one cohort is drift. ``units`` are the rendered server units: the settings.
COHORT_FIELDS: Final = ("family", "instance_type", "neuron_release", "model", "units")

#: Fields that identify the host or the moment, not the software: never compared.
_NOT_IDENTITY: Final = frozenset({"host", "collected_at", "schema_version"})


class FingerprintError(ValueError):
    """A fingerprint file is malformed; the message names the file and the key."""


def _opt_str(data: Mapping[str, Any], key: str, source: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool | dict | list):
        raise FingerprintError(f"{source}: {key!r} must be a string or null, got {value!r}")
    return str(value)


def _opt_int(data: Mapping[str, Any], key: str, source: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FingerprintError(f"{source}: {key!r} must be a whole number or null, "
                               f"got {value!r}")
    return value


def _str_map(data: Mapping[str, Any], key: str, source: str) -> dict[str, str]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise FingerprintError(f"{source}: {key!r} must be a mapping, got {value!r}")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


@dataclass(frozen=True)
class Fingerprint:
    """What one host ran: packages, versions, rendered units, model revision."""

    host: str
    instance_type: str | None = None
    family: str | None = None
    platform: str | None = None
    os: str | None = None
    kernel: str | None = None
    neuron_release: str | None = None
    neuron_packages: Mapping[str, str] = field(default_factory=dict)
    neuron_driver: str | None = None
    vllm_version: str | None = None
    vllm_neuron_version: str | None = None
    units: Mapping[str, str] = field(default_factory=dict)
    model: Mapping[str, str] = field(default_factory=dict)
    observed_instance_type: str | None = None
    neuron_devices: int | None = None
    neuron_cores: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    collected_at: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<memory>") -> Fingerprint:
        if not isinstance(data, Mapping):
            raise FingerprintError(f"{source}: a fingerprint must be a JSON object")
        version = data.get("schema_version", FINGERPRINT_SCHEMA_VERSION)
        if version != FINGERPRINT_SCHEMA_VERSION:
            raise FingerprintError(
                f"{source}: schema_version {version!r} is not {FINGERPRINT_SCHEMA_VERSION}")
        host = data.get("host")
        if not isinstance(host, str) or not host:
            raise FingerprintError(f"{source}: 'host' must be a non-empty string")
        return cls(
            host=host,
            instance_type=_opt_str(data, "instance_type", source),
            family=_opt_str(data, "family", source),
            platform=_opt_str(data, "platform", source),
            os=_opt_str(data, "os", source),
            kernel=_opt_str(data, "kernel", source),
            neuron_release=_opt_str(data, "neuron_release", source),
            neuron_packages=_str_map(data, "neuron_packages", source),
            neuron_driver=_opt_str(data, "neuron_driver", source),
            vllm_version=_opt_str(data, "vllm_version", source),
            vllm_neuron_version=_opt_str(data, "vllm_neuron_version", source),
            units=_str_map(data, "units", source),
            model=_str_map(data, "model", source),
            observed_instance_type=_opt_str(data, "observed_instance_type", source),
            neuron_devices=_opt_int(data, "neuron_devices", source),
            neuron_cores=_opt_int(data, "neuron_cores", source),
            sources=_str_map(data, "sources", source),
            collected_at=_opt_str(data, "collected_at", source),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": FINGERPRINT_SCHEMA_VERSION,
            "host": self.host,
            "instance_type": self.instance_type,
            "family": self.family,
            "platform": self.platform,
            "os": self.os,
            "kernel": self.kernel,
            "neuron_release": self.neuron_release,
            "neuron_packages": dict(self.neuron_packages),
            "neuron_driver": self.neuron_driver,
            "vllm_version": self.vllm_version,
            "vllm_neuron_version": self.vllm_neuron_version,
            "units": dict(self.units),
            "model": dict(self.model),
            "observed_instance_type": self.observed_instance_type,
            "neuron_devices": self.neuron_devices,
            "neuron_cores": self.neuron_cores,
            "sources": dict(self.sources),
            "collected_at": self.collected_at,
        }

    def identity(self) -> dict[str, str | None]:
        """The fields that must agree across a fleet, flattened to dotted keys.

        A package present on one host and absent on another shows as ``None`` on the
        host that lacks it (see :func:`drift`).
        """
        out: dict[str, str | None] = {}
        for key, value in self.to_dict().items():
            if key in _NOT_IDENTITY:
                continue
            if isinstance(value, dict):
                for sub, subval in sorted(value.items()):
                    out[f"{key}.{sub}"] = subval
            else:
                out[key] = None if value is None else str(value)
        return out

    def source(self, key: str) -> str | None:
        """Where the host's value of ``key`` came from (None: not recorded)."""
        return self.sources.get(key) or None

    def real_driver(self) -> bool:
        """The Neuron driver version was read from the driver itself, not a marker."""
        return bool(self.neuron_driver) and self.source("neuron_driver") == REAL_DRIVER_FILE

    def identity_key(self) -> tuple[tuple[str, str | None], ...]:
        """A hashable form of :meth:`identity`."""
        return tuple(sorted(self.identity().items()))


@dataclass(frozen=True)
class FingerprintGroup:
    """Hosts whose identities are equal."""

    hosts: tuple[str, ...]
    identity: Mapping[str, str | None]
    majority: bool

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "identity": dict(self.identity),
                "majority": self.majority}


@dataclass(frozen=True)
class Drift:
    """One field of one host that differs from the fleet's majority."""

    host: str
    field: str
    value: str | None
    majority_value: str | None
    #: The cohort the host is compared within (:func:`drift_within_cohorts`; "" when
    #: the fleet is one cohort).
    cohort: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "field": self.field, "value": self.value,
                "majority_value": self.majority_value, "cohort": self.cohort}


@dataclass(frozen=True)
class Cohort:
    """Hosts that should be equal: the same :data:`COHORT_FIELDS`."""

    #: What tells it from the fleet's other cohorts ("" when there is one).
    label: str
    hosts: tuple[str, ...]
    key: Mapping[str, str | None]

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "hosts": list(self.hosts), "key": dict(self.key)}


def group_by_identity(fingerprints: Sequence[Fingerprint]) -> list[FingerprintGroup]:
    """Hosts grouped by identity, largest group first (ties: first host name).

    The first group is the majority (``majority=True``); with a tie for the largest
    group, the one whose first host sorts first is taken as the reference.
    """
    buckets: dict[tuple[tuple[str, str | None], ...], list[Fingerprint]] = {}
    for fp in fingerprints:
        buckets.setdefault(fp.identity_key(), []).append(fp)
    ordered = sorted(buckets.values(),
                     key=lambda fps: (-len(fps), min(f.host for f in fps)))
    return [
        FingerprintGroup(hosts=tuple(sorted(f.host for f in fps)),
                         identity=fps[0].identity(), majority=i == 0)
        for i, fps in enumerate(ordered)
    ]


def drift(fingerprints: Sequence[Fingerprint]) -> list[Drift]:
    """Every (host, field) outside the majority group that differs from the majority."""
    groups = group_by_identity(fingerprints)
    if len(groups) < 2:
        return []
    reference = groups[0].identity
    by_host = {fp.host: fp.identity() for fp in fingerprints}
    out: list[Drift] = []
    for group in groups[1:]:
        for host in group.hosts:
            ident = by_host[host]
            for key in sorted(set(ident) | set(reference)):
                mine, theirs = ident.get(key), reference.get(key)
                if mine != theirs:
                    out.append(Drift(host=host, field=key, value=mine, majority_value=theirs))
    return out


def _cohort_key(fp: Fingerprint) -> tuple[tuple[str, str | None], ...]:
    return tuple(sorted((k, v) for k, v in fp.identity().items()
                        if k.split(".", 1)[0] in COHORT_FIELDS))


def cohorts(fingerprints: Sequence[Fingerprint]) -> list[Cohort]:
    """Hosts grouped by :data:`COHORT_FIELDS`, largest first (ties: first host name);
    each labelled by what differs between the cohorts: the instance type, ``Neuron
    <release>``, ``model <source>@<revision>``, ``settings <k>`` (distinct units)."""
    buckets: dict[tuple[tuple[str, str | None], ...], list[str]] = {}
    for fp in fingerprints:
        buckets.setdefault(_cohort_key(fp), []).append(fp.host)
    ordered = sorted(buckets.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    keys = [dict(k) for k, _ in ordered]
    varies = {name for name in {n for k in keys for n in k} if len({k.get(name) for k in keys}) > 1}
    settings: dict[tuple[tuple[str, str | None], ...], int] = {}

    def label(key: Mapping[str, str | None]) -> str:
        parts = []
        top = {n.split(".", 1)[0] for n in varies}
        if top & {"family", "instance_type"}:
            parts.append(str(key.get("instance_type") or key.get("family") or "unknown type"))
        if "neuron_release" in top:
            parts.append(f"Neuron {key.get('neuron_release') or 'unknown'}")
        if "model" in top:
            parts.append(f"model {key.get('model.source')}@{key.get('model.revision')}")
        if "units" in top:
            units = tuple(sorted((k, v) for k, v in key.items() if k.startswith("units.")))
            parts.append(f"settings {settings.setdefault(units, len(settings) + 1)}")
        return ", ".join(parts)

    return [Cohort(label=label(k), hosts=tuple(sorted(hosts)), key=k)
            for k, (_, hosts) in zip(keys, ordered, strict=True)]


def drift_within_cohorts(fingerprints: Sequence[Fingerprint]) -> list[Drift]:
    """:func:`drift` inside each cohort: what differs between hosts that should be equal,
    each named with its cohort."""
    by_host = {fp.host: fp for fp in fingerprints}
    out: list[Drift] = []
    for c in cohorts(fingerprints):
        out += [Drift(host=d.host, field=d.field, value=d.value,
                      majority_value=d.majority_value, cohort=c.label)
                for d in drift([by_host[h] for h in c.hosts])]
    return out
