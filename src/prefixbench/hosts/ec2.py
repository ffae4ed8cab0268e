"""EC2 instances to a Trn fleet inventory: selection, grouping, host variables, errors.

The pure half of the ``prefixbench_ec2`` inventory plugin. The plugin asks boto3 for
``describe_instances`` pages and hands every instance dict to :func:`instance_record`,
which keeps only what the inventory needs (a JSON-safe projection, also what the inventory
cache stores). Everything after that happens here: which instances are selected
(:func:`select`), what they are called and which groups they join (:func:`build_hosts`),
why nothing was selected (:func:`explain_no_match`), and the one-line message of an AWS
error (:func:`client_error_message`). Nothing here imports ansible or boto3.

Groups::

    neuron_fleet
      trn2, trn3             family from the instance type (prefixbench.hosts.instances.family)
    type_trn2_48xlarge       instance type, every character outside [A-Za-z0-9_] -> "_"
    az_us_east_1a            availability zone, same rule
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from prefixbench.hosts.instances import family

__all__ = [
    "DEFAULT_HOSTNAME_TAG",
    "DEFAULT_INSTANCE_TYPES",
    "FLEET_GROUP",
    "HOSTNAME_SOURCES",
    "Ec2InventoryError",
    "Host",
    "HostnameSource",
    "Selection",
    "build_hosts",
    "client_error_message",
    "explain_no_match",
    "from_cache",
    "instance_record",
    "resolve_regions",
    "safe_group_name",
    "select",
    "to_cache",
]

#: Instance types selected when the configuration names none.
DEFAULT_INSTANCE_TYPES: Final = ("trn2*", "trn3*")
#: The group every playbook of the bundle targets.
FLEET_GROUP: Final = "neuron_fleet"
#: Tag whose value names a host; instances without it are named by their instance id.
DEFAULT_HOSTNAME_TAG: Final = "Name"

HostnameSource = Literal["private_ip", "public_ip", "instance_id"]
#: What ``ansible_host`` is: an address for SSH, or the instance id for ``aws_ssm``.
HOSTNAME_SOURCES: Final[tuple[HostnameSource, ...]] = ("private_ip", "public_ip", "instance_id")

#: Version of the cached value's layout; a cache entry of another version is ignored.
CACHE_VERSION: Final = 1

_UNSAFE_GROUP_CHARS = re.compile(r"[^A-Za-z0-9_]")
_UNSAFE_HOST_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")

#: Error codes of a caller that is known but not allowed to describe instances.
_DENIED_CODES: Final = frozenset({
    "UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "Blocked"})
#: Error codes of credentials that AWS does not accept at all.
_REJECTED_CODES: Final = frozenset({
    "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken",
    "ExpiredTokenException", "RequestExpired", "UnrecognizedClientException",
    "InvalidAccessKeyId", "IncompleteSignature"})
_REGION_CODES: Final = frozenset({"OptInRequired", "InvalidRegion", "UnsupportedOperation"})


class Ec2InventoryError(ValueError):
    """A configuration or selection problem; the message is one line for the user."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def safe_group_name(name: str) -> str:
    """A group name Ansible accepts without a warning: ``us-east-1a`` -> ``us_east_1a``."""
    return _UNSAFE_GROUP_CHARS.sub("_", name)


def _str_list(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(
            isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
        raise Ec2InventoryError(f"{what}: expected a string or a list of strings, got {value!r}")
    out = tuple(str(v).strip() for v in value)
    if any(not v for v in out):
        raise Ec2InventoryError(f"{what}: empty value in {list(value)!r}")
    return out


@dataclass(frozen=True)
class Selection:
    """What the inventory selects: regions, instance-type patterns and tag filters.

    Only running instances are selected. Instance types and tag values are shell-style
    patterns (``*``, ``?``), as EC2's own filters take them. An instance matches when its
    type matches any pattern and, for every tag key, its value matches any listed value.
    """

    regions: tuple[str, ...]
    instance_types: tuple[str, ...] = DEFAULT_INSTANCE_TYPES
    tags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: AMI ids (e.g. the Neuron DLAMI's of each region); empty: any image.
    image_ids: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, regions: Any, instance_types: Any, tags: Any,
                     image_ids: Any = None) -> Selection:
        """Validate the plugin options; raise :class:`Ec2InventoryError` naming the option."""
        region_list = _str_list(regions, "regions")
        for region in region_list:
            if not _REGION.match(region):
                raise Ec2InventoryError(f"regions: {region!r} is not a region name "
                                        "(like us-east-1)")
        types = _str_list(instance_types, "instance_types") or DEFAULT_INSTANCE_TYPES
        if tags is None:
            tags = {}
        if not isinstance(tags, Mapping):
            raise Ec2InventoryError(f"tags: expected a mapping of tag key to value(s), "
                                    f"got {tags!r}")
        tag_filters: list[tuple[str, tuple[str, ...]]] = []
        for key, values in tags.items():
            if not isinstance(key, str) or not key:
                raise Ec2InventoryError(f"tags: tag keys must be non-empty strings, got {key!r}")
            vals = _str_list(values, f"tags.{key}")
            if not vals:
                raise Ec2InventoryError(f"tags.{key}: give at least one value")
            tag_filters.append((key, vals))
        images = _str_list(image_ids, "image_ids")
        for image in images:
            if not _AMI.match(image):
                raise Ec2InventoryError(f"image_ids: {image!r} is not an AMI id (like "
                                        "ami-0123456789abcdef0)")
        return cls(regions=tuple(dict.fromkeys(region_list)), instance_types=types,
                   tags=tuple(tag_filters), image_ids=tuple(dict.fromkeys(images)))

    def api_filters(self, *, diagnostic: bool = False) -> list[dict[str, Any]]:
        """``Filters`` for ``describe_instances``: a superset of :meth:`matches`.

        Wildcard instance types are matched here, not by EC2: EC2 takes them in filter
        values but its emulators (moto) compare instance types literally, and the same
        selection must come out of both. Literal types are filtered by EC2. The
        ``diagnostic`` filters (for :func:`explain_no_match`) keep every state and tag.
        """
        filters: list[dict[str, Any]] = []
        if not diagnostic:
            filters.append({"Name": "instance-state-name", "Values": ["running"]})
        if not any(c in p for p in self.instance_types for c in "*?["):
            filters.append({"Name": "instance-type", "Values": list(self.instance_types)})
        if not diagnostic:
            filters += [{"Name": f"tag:{k}", "Values": list(v)} for k, v in self.tags]
            if self.image_ids:
                filters.append({"Name": "image-id", "Values": list(self.image_ids)})
        return filters

    def matches_type(self, instance_type: str) -> bool:
        return any(fnmatch.fnmatchcase(instance_type, p) for p in self.instance_types)

    def matches_tag(self, tags: Mapping[str, str], key: str, values: Sequence[str]) -> bool:
        return key in tags and any(fnmatch.fnmatchcase(tags[key], v) for v in values)

    def matches(self, record: Mapping[str, Any]) -> bool:
        """Running, of a selected type, and carrying every selected tag."""
        tags = record.get("tags") or {}
        return (record.get("state") == "running"
                and self.matches_type(str(record.get("instance_type", "")))
                and all(self.matches_tag(tags, k, v) for k, v in self.tags)
                and self.matches_image(record))

    def matches_image(self, record: Mapping[str, Any]) -> bool:
        return not self.image_ids or record.get("image_id") in self.image_ids

    def fingerprint(self) -> dict[str, Any]:
        """What a cached result was selected by (a changed selection must not reuse it)."""
        return {"regions": list(self.regions), "instance_types": list(self.instance_types),
                "tags": {k: list(v) for k, v in self.tags}, "image_ids": list(self.image_ids)}

    def describe_tags(self) -> str:
        return ", ".join(f"{k}={'|'.join(v)}" for k, v in self.tags) or "(none)"


def resolve_regions(configured: Sequence[str], session_region: str | None,
                    source: str = "the inventory file") -> tuple[str, ...]:
    """The configured regions, else the session's default region, else an error."""
    if configured:
        return tuple(configured)
    if session_region:
        return (session_region,)
    raise Ec2InventoryError(
        f"no AWS region: set `regions: [us-east-1, ...]` in {source}, or AWS_REGION / "
        "AWS_DEFAULT_REGION, or a region in the AWS profile")


def instance_record(instance: Mapping[str, Any], region: str) -> dict[str, Any]:
    """The JSON-safe part of one ``describe_instances`` instance that the inventory uses."""
    tags = {str(t.get("Key")): str(t.get("Value", ""))
            for t in instance.get("Tags") or [] if t.get("Key") is not None}
    return {
        "instance_id": str(instance["InstanceId"]),
        "instance_type": str(instance.get("InstanceType", "")),
        "state": str((instance.get("State") or {}).get("Name", "unknown")),
        "availability_zone": str((instance.get("Placement") or {}).get("AvailabilityZone", "")),
        "region": region,
        "private_ip": instance.get("PrivateIpAddress") or None,
        "public_ip": instance.get("PublicIpAddress") or None,
        "image_id": instance.get("ImageId") or None,
        "tags": tags,
    }


def select(records: Iterable[Mapping[str, Any]], selection: Selection) -> list[dict[str, Any]]:
    """The selected records, deduplicated by instance id, in a stable order."""
    seen: dict[str, dict[str, Any]] = {}
    for rec in records:
        if selection.matches(rec):
            seen.setdefault(str(rec["instance_id"]), dict(rec))
    return sorted(seen.values(), key=lambda r: (r["region"], r["instance_type"],
                                                r["instance_id"]))


def explain_no_match(records: Iterable[Mapping[str, Any]], selection: Selection) -> str:
    """Say which filter left nothing, given the instances of the regions in any state.

    The filters apply in order: instance type, then each tag, then state running (so a
    stopped fleet reads "none running", not "none tagged"). The message names the first
    one that matched nothing and what the instances it looked at had instead.
    """
    rows = list(records)
    where = f"in region(s) {', '.join(selection.regions)}"
    types = ", ".join(selection.instance_types)
    survivors = [r for r in rows if selection.matches_type(str(r.get("instance_type", "")))]
    if not survivors:
        seen = Counter(str(r.get("instance_type")) for r in rows)
        other = (f" (instance types there: {_top(seen)})" if seen else " (no instances at all)")
        return f"no instance {where} has an instance type matching {types}{other}"
    for key, values in selection.tags:
        kept = [r for r in survivors if selection.matches_tag(r.get("tags") or {}, key, values)]
        if not kept:
            seen_values = Counter(str((r.get("tags") or {}).get(key, "<no such tag>"))
                                  for r in survivors)
            return (f"{len(survivors)} instance(s) of type {types} {where}"
                    f"{_tagged(selection, key)}, none with tag {key}={'|'.join(values)} "
                    f"({key} values there: {_top(seen_values)})")
        survivors = kept
    if selection.image_ids:
        kept = [r for r in survivors if selection.matches_image(r)]
        if not kept:
            images = Counter(str(r.get("image_id")) for r in survivors)
            return (f"{len(survivors)} instance(s) of type {types} {where}"
                    f"{_tagged(selection, None)}, none from image(s) "
                    f"{', '.join(selection.image_ids)} (images there: {_top(images)})")
        survivors = kept
    states = Counter(str(r.get("state")) for r in survivors)
    return (f"{len(survivors)} instance(s) of type {types} {where}"
            f"{_tagged(selection, None)}, none running (states: {_top(states)})")


def _tagged(selection: Selection, before: str | None) -> str:
    """`` with tags k=v, ...`` for the tag filters already applied (those before ``before``)."""
    applied = []
    for key, values in selection.tags:
        if key == before:
            break
        applied.append(f"{key}={'|'.join(values)}")
    return f" with tag(s) {', '.join(applied)}" if applied else ""


def _top(counter: Counter[str], limit: int = 5) -> str:
    items = [f"{k} x{n}" for k, n in counter.most_common(limit)]
    if len(counter) > limit:
        items.append(f"... {len(counter) - limit} more")
    return ", ".join(items)


@dataclass(frozen=True)
class Host:
    """One inventory host: its name, the groups it joins and its variables."""

    name: str
    family: str
    groups: tuple[str, ...]
    vars: dict[str, Any] = field(default_factory=dict)


def _hostname(record: Mapping[str, Any], tag: str) -> str:
    raw = str((record.get("tags") or {}).get(tag, "")).strip() if tag else ""
    name = _UNSAFE_HOST_CHARS.sub("-", raw).strip("-")
    return name or str(record["instance_id"])


def _ansible_host(record: Mapping[str, Any], source: HostnameSource) -> str | None:
    if source == "instance_id":
        return str(record["instance_id"])
    value = record.get("private_ip" if source == "private_ip" else "public_ip")
    return str(value) if value else None


def build_hosts(records: Sequence[Mapping[str, Any]], *,
                hostname_tag: str = DEFAULT_HOSTNAME_TAG,
                hostname_source: str = "private_ip") -> list[Host]:
    """Name the selected instances and place them in groups.

    Hosts are named by the ``hostname_tag`` tag (characters outside ``[A-Za-z0-9._-]``
    become ``-``), else by instance id; two instances with the same name are both named
    ``<name>-<instance id>`` rather than merged into one host.
    """
    if hostname_source not in HOSTNAME_SOURCES:
        raise Ec2InventoryError(f"hostname_source: {hostname_source!r} is not one of "
                                f"{', '.join(HOSTNAME_SOURCES)}")
    source: HostnameSource = hostname_source
    missing = [str(r["instance_id"]) for r in records if _ansible_host(r, source) is None]
    if missing:
        address = "public IP" if source == "public_ip" else "private IP"
        raise Ec2InventoryError(
            f"hostname_source {source}: instance(s) {', '.join(missing)} have no {address}; "
            "use hostname_source: private_ip, or instance_id with the aws_ssm connection")
    names = [_hostname(r, hostname_tag) for r in records]
    counts = Counter(names)
    hosts: list[Host] = []
    for tagged, rec in zip(names, records, strict=True):
        unique = counts[tagged] == 1 or tagged == rec["instance_id"]
        name = tagged if unique else f"{tagged}-{rec['instance_id']}"
        fam = family(str(rec["instance_type"]))
        groups = (safe_group_name(fam),
                  "type_" + safe_group_name(str(rec["instance_type"])),
                  "az_" + safe_group_name(str(rec["availability_zone"]) or "unknown"))
        hosts.append(Host(name=name, family=safe_group_name(fam), groups=groups, vars={
            "ansible_host": _ansible_host(rec, source),
            "prefixbench_instance_type": rec["instance_type"],
            "ec2_instance_id": rec["instance_id"],
            "ec2_availability_zone": rec["availability_zone"],
            "ec2_region": rec["region"],
            "ec2_private_ip_address": rec.get("private_ip"),
            "ec2_public_ip_address": rec.get("public_ip"),
            "ec2_image_id": rec.get("image_id"),
            "ec2_tags": dict(rec.get("tags") or {}),
        }))
    return hosts


def to_cache(records: Sequence[Mapping[str, Any]], selection: Selection) -> dict[str, Any]:
    """The inventory cache's value: the selected records and what selected them."""
    return {"version": CACHE_VERSION, "selection": selection.fingerprint(),
            "instances": [dict(r) for r in records]}


def from_cache(value: Any, selection: Selection) -> list[dict[str, Any]] | None:
    """The cached records when they were selected the same way, else ``None``."""
    if (not isinstance(value, Mapping) or value.get("version") != CACHE_VERSION
            or value.get("selection") != selection.fingerprint()
            or not isinstance(value.get("instances"), list)):
        return None
    return [dict(r) for r in value["instances"] if isinstance(r, Mapping)]


def client_error_message(region: str, operation: str, code: str, message: str) -> str:
    """One line for an AWS error response of ``operation`` in ``region``."""
    detail = _one_line(f"{code}: {message}" if message else code)
    if code in _DENIED_CODES:
        return (f"access denied in {region}: the credentials may not call {operation} "
                f"(grant ec2:DescribeInstances) [{detail}]")
    if code in _REJECTED_CODES:
        return (f"AWS rejected the credentials in {region} [{detail}]; check AWS_PROFILE, "
                "the access keys, or refresh the session token")
    if code in _REGION_CODES:
        return f"region {region} cannot be used by this account [{detail}]"
    return f"EC2 {operation} failed in {region} [{detail}]"
