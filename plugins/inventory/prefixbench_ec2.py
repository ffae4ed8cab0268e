"""Inventory plugin: the running Trn2/Trn3 instances of an AWS account, over boto3.

A thin adapter over :mod:`prefixbench.hosts.ec2`, shaped like amazon.aws ``aws_ec2``: read the
options, take the cached result or ask EC2, and hand the transform to the pure helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from prefixbench.hosts import ec2

try:
    import boto3
    import botocore.exceptions
except ImportError:  # reported when the plugin is used, not when it is loaded
    boto3 = None

DOCUMENTATION = r"""
name: prefixbench_ec2
short_description: Running Trn2/Trn3 EC2 instances as the prefixbench fleet
description:
  - Selects B(running) EC2 instances whose instance type matches O(instance_types)
    (C(trn2*) and C(trn3*) by default) and, optionally, carry the tags in O(tags), in
    every region of O(regions).
  - Groups them into C(neuron_fleet) with one child group per family (C(trn2), C(trn3)),
    plus C(type_<instance type>) and C(az_<availability zone>) groups, every character
    outside C([A-Za-z0-9_]) replaced by C(_) (C(type_trn2_48xlarge), C(az_us_east_1a)).
  - Names hosts by the O(hostname_tag) tag, else by instance id (two instances with the
    same name become C(<name>-<instance id>)). Sets C(ansible_host) per O(hostname_source),
    and the host variables C(prefixbench_instance_type), C(ec2_instance_id),
    C(ec2_availability_zone), C(ec2_region), C(ec2_private_ip_address),
    C(ec2_public_ip_address) and C(ec2_tags).
  - Fails with one line when the credentials are missing or rejected, no region is known,
    EC2 denies the call, or no instance is selected (then it says which filter matched
    nothing), unless O(allow_empty) is set.
  - The configuration file name must end with C(prefixbench_ec2.yml) or C(prefixbench_ec2.yaml).
author: prefixbench
requirements:
  - boto3
extends_documentation_fragment:
  - constructed
  - inventory_cache
options:
  plugin:
    description: Marks the file as this plugin's configuration.
    required: true
    choices: [prefixbench_ec2]
  regions:
    description:
      - Regions to query. Empty means the default region of the AWS session
        (C(AWS_REGION), C(AWS_DEFAULT_REGION) or the profile); no region at all is an error.
    type: list
    elements: str
    default: []
  instance_types:
    description: Instance-type patterns (C(*) and C(?) wildcards); any one must match.
    type: list
    elements: str
    default: ['trn2*', 'trn3*']
  tags:
    description:
      - "Tag filters, C({key: value}) or C({key: [values]}); values take wildcards. An
        instance must carry every key with one of its values."
    type: dict
    default: {}
  image_ids:
    description:
      - AMI ids the instances must run (e.g. the Neuron DLAMI's, whose id per region the
        SSM parameter in the release manifest gives); empty for any image.
    type: list
    elements: str
    default: []
  hostname_tag:
    description: Tag whose value names the host; instances without it are named by instance id.
    type: str
    default: Name
  hostname_source:
    description:
      - What C(ansible_host) is. C(instance_id) is for the C(community.aws.aws_ssm) connection.
    type: str
    default: private_ip
    choices: [private_ip, public_ip, instance_id]
  allow_empty:
    description: Accept an inventory with no host instead of failing.
    type: bool
    default: false
  aws_profile:
    description: Named AWS profile.
    type: str
    env:
      - name: AWS_PROFILE
  aws_access_key_id:
    description: Access key; boto3's own chain (environment, profile, instance role) otherwise.
    type: str
  aws_secret_access_key:
    description: Secret key that goes with O(aws_access_key_id).
    type: str
  aws_session_token:
    description: Session token of temporary credentials.
    type: str
  endpoint_url:
    description: EC2 endpoint (a VPC endpoint, or a local moto server in tests).
    type: str
    env:
      - name: PREFIXBENCH_EC2_ENDPOINT_URL
"""

EXAMPLES = r"""
# inventories/aws/fleet.prefixbench_ec2.yml
plugin: prefixbench_ec2
regions: [us-east-2]
tags:
  Project: prefixbench
# For SSM instead of SSH (and ansible_connection: community.aws.aws_ssm in group_vars):
# hostname_source: instance_id
keyed_groups:
  - key: ec2_tags.Team | default('none')
    prefix: team
"""

NAME = "prefixbench_ec2"


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """Running Trn instances of the configured regions, tags and instance types."""

    NAME = NAME

    def verify_file(self, path: str) -> bool:
        return bool(super().verify_file(path)) and path.endswith(
            (f"{NAME}.yml", f"{NAME}.yaml"))

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache=cache)
        self._read_config_data(path)
        if boto3 is None:
            raise AnsibleParserError(f"{NAME}: boto3 is not installed in "
                                     f"{sys.executable}'s environment")
        try:
            session = self._session()
            selection = ec2.Selection.from_options(
                ec2.resolve_regions(self.get_option("regions") or [], session.region_name,
                                    source=path),
                self.get_option("instance_types"), self.get_option("tags"),
                self.get_option("image_ids"))
            cache_key = self.get_cache_key(path)
            records = None
            if cache and self.get_option("cache") and cache_key in self._cache:
                records = ec2.from_cache(self._cache[cache_key], selection)
            if records is None:
                records = ec2.select(self._describe(session, selection), selection)
                if not records and not self.get_option("allow_empty"):
                    candidates = self._describe(session, selection, diagnostic=True)
                    raise ec2.Ec2InventoryError(
                        "nothing selected: " + ec2.explain_no_match(candidates, selection)
                        + " (set allow_empty: true to accept an empty inventory)")
                if self.get_option("cache"):
                    self._cache[cache_key] = ec2.to_cache(records, selection)
            hosts = ec2.build_hosts(records, hostname_tag=self.get_option("hostname_tag"),
                                    hostname_source=self.get_option("hostname_source"))
        except ec2.Ec2InventoryError as exc:
            raise AnsibleParserError(f"{NAME}: {exc}") from None
        if not hosts:
            self.display.warning(f"{NAME}: {path} selected no instance (allow_empty: true)")
        self._populate(hosts)

    def _session(self) -> Any:
        try:
            return boto3.session.Session(
                profile_name=self.get_option("aws_profile") or None,
                aws_access_key_id=self.get_option("aws_access_key_id") or None,
                aws_secret_access_key=self.get_option("aws_secret_access_key") or None,
                aws_session_token=self.get_option("aws_session_token") or None)
        except botocore.exceptions.ProfileNotFound as exc:
            raise ec2.Ec2InventoryError(f"{exc} (check AWS_PROFILE / aws_profile)") from None

    def _describe(self, session: Any, selection: ec2.Selection,
                  diagnostic: bool = False) -> list[dict[str, Any]]:
        """Every instance the API filters let through, as records, region by region."""
        records: list[dict[str, Any]] = []
        for region in selection.regions:
            client = session.client("ec2", region_name=region,
                                    endpoint_url=self.get_option("endpoint_url") or None)
            try:
                pages = client.get_paginator("describe_instances").paginate(
                    Filters=selection.api_filters(diagnostic=diagnostic))
                for page in pages:
                    for reservation in page.get("Reservations", []):
                        records += [ec2.instance_record(i, region)
                                    for i in reservation.get("Instances", [])]
            except botocore.exceptions.NoCredentialsError:
                raise ec2.Ec2InventoryError(
                    "no AWS credentials found: set AWS_PROFILE (or aws_profile), "
                    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run where an instance role "
                    "or SSO session provides them") from None
            except botocore.exceptions.ClientError as exc:
                error: Mapping[str, Any] = exc.response.get("Error", {})
                raise ec2.Ec2InventoryError(ec2.client_error_message(
                    region, "DescribeInstances", str(error.get("Code", "?")),
                    str(error.get("Message", "")))) from None
            except botocore.exceptions.BotoCoreError as exc:
                raise ec2.Ec2InventoryError(
                    f"EC2 DescribeInstances failed in {region}: {exc}") from None
        return records

    def _populate(self, hosts: list[ec2.Host]) -> None:
        inventory = self.inventory
        inventory.add_group(ec2.FLEET_GROUP)
        strict = self.get_option("strict")
        for host in hosts:
            for group in host.groups:
                inventory.add_group(group)
            inventory.add_child(ec2.FLEET_GROUP, host.family)
            inventory.add_host(host.name, group=host.family)
            for group in host.groups[1:]:
                inventory.add_child(group, host.name)
            for key, value in host.vars.items():
                inventory.set_variable(host.name, key, value)
            hostvars = inventory.get_host(host.name).get_vars()
            self._set_composite_vars(self.get_option("compose"), hostvars, host.name, strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, host.name,
                                              strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars,
                                           host.name, strict)
