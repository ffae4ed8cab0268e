"""The pure half of the EC2 inventory: selection, naming, grouping, cache and messages."""

from __future__ import annotations

from typing import Any

import pytest

from prefixbench.hosts import ec2


def record(iid: str, *, itype: str = "trn2.48xlarge", state: str = "running",
           az: str = "us-east-1a", tags: dict[str, str] | None = None,
           private_ip: str | None = "10.0.0.1", public_ip: str | None = None) -> dict[str, Any]:
    return {"instance_id": iid, "instance_type": itype, "state": state,
            "availability_zone": az, "region": az[:-1], "private_ip": private_ip,
            "public_ip": public_ip, "tags": tags or {}}


def test_instance_record_keeps_only_what_the_inventory_uses() -> None:
    raw = {"InstanceId": "i-1", "InstanceType": "trn3.48xlarge", "State": {"Name": "running"},
           "Placement": {"AvailabilityZone": "us-east-2b"}, "PrivateIpAddress": "10.1.2.3",
           "Tags": [{"Key": "Name", "Value": "n1"}], "LaunchTime": object(),
           "ImageId": "ami-0123456789abcdef0"}
    assert ec2.instance_record(raw, "us-east-2") == {
        "instance_id": "i-1", "instance_type": "trn3.48xlarge", "state": "running",
        "availability_zone": "us-east-2b", "region": "us-east-2", "private_ip": "10.1.2.3",
        "public_ip": None, "image_id": "ami-0123456789abcdef0", "tags": {"Name": "n1"}}


def test_selection_defaults_and_validation() -> None:
    sel = ec2.Selection.from_options(["us-east-1", "us-east-1"], None, {"Project": "pb"})
    assert sel.regions == ("us-east-1",)
    assert sel.instance_types == ("trn2*", "trn3*")
    assert sel.tags == (("Project", ("pb",)),)
    with pytest.raises(ec2.Ec2InventoryError, match="regions: 'useast' is not a region"):
        ec2.Selection.from_options(["useast"], None, None)
    with pytest.raises(ec2.Ec2InventoryError, match=r"tags\.Project: give at least one"):
        ec2.Selection.from_options(["us-east-1"], None, {"Project": []})
    with pytest.raises(ec2.Ec2InventoryError, match="tags: expected a mapping"):
        ec2.Selection.from_options(["us-east-1"], None, ["Project"])


def test_api_filters_leave_wildcard_types_to_the_client() -> None:
    sel = ec2.Selection.from_options(["us-east-1"], None, {"Project": ["a", "b"]})
    assert sel.api_filters() == [
        {"Name": "instance-state-name", "Values": ["running"]},
        {"Name": "tag:Project", "Values": ["a", "b"]}]
    literal = ec2.Selection.from_options(["us-east-1"], ["trn2.48xlarge"], {"Project": "a"})
    assert {"Name": "instance-type", "Values": ["trn2.48xlarge"]} in literal.api_filters()
    assert literal.api_filters(diagnostic=True) == [
        {"Name": "instance-type", "Values": ["trn2.48xlarge"]}]


def test_select_running_trn_with_every_tag() -> None:
    sel = ec2.Selection.from_options(["us-east-1"], None, {"Project": "pb", "Team": ["x", "y*"]})
    rows = [
        record("i-1", tags={"Project": "pb", "Team": "x"}),
        record("i-2", tags={"Project": "pb", "Team": "yz"}, itype="trn3.48xlarge"),
        record("i-3", tags={"Project": "pb", "Team": "x"}, state="stopped"),
        record("i-4", tags={"Project": "pb", "Team": "x"}, itype="m5.large"),
        record("i-5", tags={"Project": "pb"}),
        record("i-6", tags={"Project": "other", "Team": "x"}),
        record("i-1", tags={"Project": "pb", "Team": "x"}),  # listed twice: kept once
    ]
    assert [r["instance_id"] for r in ec2.select(rows, sel)] == ["i-1", "i-2"]


@pytest.mark.parametrize(("rows", "expected"), [
    ([], "no instance in region(s) us-east-1 has an instance type matching trn2*, trn3* "
         "(no instances at all)"),
    ([record("i-1", itype="m5.large")], "(instance types there: m5.large x1)"),
    ([record("i-1", state="stopped", tags={"Project": "pb"}),
      record("i-2", state="stopped", tags={"Project": "pb"}), record("i-3")],
     "2 instance(s) of type trn2*, trn3* in region(s) us-east-1 with tag(s) Project=pb, "
     "none running (states: stopped x2)"),
    ([record("i-1", tags={"Project": "other"}), record("i-2")],
     "2 instance(s) of type trn2*, trn3* in region(s) us-east-1, none with tag "
     "Project=pb (Project values there: other x1, <no such tag> x1)"),
])
def test_explain_no_match_names_the_filter_that_matched_nothing(
        rows: list[dict[str, Any]], expected: str) -> None:
    sel = ec2.Selection.from_options(["us-east-1"], None, {"Project": "pb"})
    assert expected in ec2.explain_no_match(rows, sel)


def test_build_hosts_names_groups_and_vars() -> None:
    rows = [record("i-1", tags={"Name": "bench a"}, az="us-west-2c"),
            record("i-2", itype="trn3.48xlarge"),
            record("i-3", tags={"Name": "dup"}), record("i-4", tags={"Name": "dup"})]
    hosts = ec2.build_hosts(rows)
    assert [h.name for h in hosts] == ["bench-a", "i-2", "dup-i-3", "dup-i-4"]
    assert hosts[0].groups == ("trn2", "type_trn2_48xlarge", "az_us_west_2c")
    assert hosts[1].family == "trn3"
    assert hosts[0].vars["ansible_host"] == "10.0.0.1"
    assert hosts[0].vars["prefixbench_instance_type"] == "trn2.48xlarge"
    assert hosts[0].vars["ec2_instance_id"] == "i-1"
    assert hosts[0].vars["ec2_availability_zone"] == "us-west-2c"
    assert hosts[0].vars["ec2_tags"] == {"Name": "bench a"}
    assert [h.name for h in ec2.build_hosts(rows[:1], hostname_tag="Missing")] == ["i-1"]


def test_hostname_source() -> None:
    rows = [record("i-1", public_ip="3.3.3.3")]
    assert ec2.build_hosts(rows, hostname_source="instance_id")[0].vars["ansible_host"] == "i-1"
    assert ec2.build_hosts(rows, hostname_source="public_ip")[0].vars["ansible_host"] == "3.3.3.3"
    with pytest.raises(ec2.Ec2InventoryError, match=r"instance.s. i-2 have no public IP"):
        ec2.build_hosts([record("i-2")], hostname_source="public_ip")
    with pytest.raises(ec2.Ec2InventoryError, match="hostname_source: 'dns'"):
        ec2.build_hosts(rows, hostname_source="dns")


def test_cache_value_is_reused_only_for_the_same_selection() -> None:
    sel = ec2.Selection.from_options(["us-east-1"], None, {"Project": "pb"})
    value = ec2.to_cache([record("i-1")], sel)
    assert ec2.from_cache(value, sel) == [record("i-1")]
    other = ec2.Selection.from_options(["us-east-1"], None, {"Project": "x"})
    assert ec2.from_cache(value, other) is None
    assert ec2.from_cache({"version": 0}, sel) is None
    assert ec2.from_cache(None, sel) is None


def test_resolve_regions() -> None:
    assert ec2.resolve_regions(["eu-west-1"], "us-east-1") == ("eu-west-1",)
    assert ec2.resolve_regions([], "us-east-1") == ("us-east-1",)
    with pytest.raises(ec2.Ec2InventoryError, match="no AWS region: set `regions"):
        ec2.resolve_regions([], None, "f.prefixbench_ec2.yml")


@pytest.mark.parametrize(("code", "start"), [
    ("UnauthorizedOperation", "access denied in us-east-1: the credentials may not call"),
    ("AccessDenied", "access denied in us-east-1"),
    ("AuthFailure", "AWS rejected the credentials in us-east-1"),
    ("OptInRequired", "region us-east-1 cannot be used"),
    ("Throttling", "EC2 DescribeInstances failed in us-east-1 [Throttling: a b]"),
])
def test_client_error_message_is_one_line(code: str, start: str) -> None:
    line = ec2.client_error_message("us-east-1", "DescribeInstances", code, "a\n b")
    assert line.startswith(start)
    assert "\n" not in line


def test_safe_group_name() -> None:
    assert ec2.safe_group_name("trn2u.48xlarge") == "trn2u_48xlarge"
    assert ec2.safe_group_name("us-east-1a") == "us_east_1a"


def test_image_ids_select_the_dlami_instances_and_explain_a_miss() -> None:
    sel = ec2.Selection.from_options(["us-east-1"], None, {"Project": "pb"},
                                     ["ami-0123456789abcdef0"])
    assert {"Name": "image-id", "Values": ["ami-0123456789abcdef0"]} in sel.api_filters()
    base = {"instance_id": "i-1", "instance_type": "trn2.48xlarge", "state": "running",
            "region": "us-east-1", "tags": {"Project": "pb"}}
    assert sel.matches({**base, "image_id": "ami-0123456789abcdef0"})
    assert not sel.matches({**base, "image_id": "ami-0fedcba9876543210"})
    why = ec2.explain_no_match([{**base, "image_id": "ami-0fedcba9876543210"}], sel)
    assert "none from image(s) ami-0123456789abcdef0" in why
    assert "ami-0fedcba9876543210 x1" in why
    with pytest.raises(ec2.Ec2InventoryError, match="image_ids: 'dlami' is not an AMI id"):
        ec2.Selection.from_options(["us-east-1"], None, None, ["dlami"])
