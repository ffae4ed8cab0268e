"""The prefixbench_ec2 inventory plugin against moto: in-process, and through ansible-inventory.

Five instances: three trn2 (one stopped), one trn3, one m5.large. The plugin is loaded by
Ansible's plugin loader from plugins/inventory and parses real configuration files.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real AWS configuration leaks in: no profile, no files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "PREFIXBENCH_EC2_ENDPOINT_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def launch(client: Any, itype: str, name: str, az: str = "us-east-1a",
           **tags: str) -> str:
    tag_list = [{"Key": "Name", "Value": name}] + [{"Key": k, "Value": v}
                                                   for k, v in tags.items()]
    out = client.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=itype,
        Placement={"AvailabilityZone": az},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tag_list}])
    return str(out["Instances"][0]["InstanceId"])


def make_fleet(client: Any) -> dict[str, str]:
    ids = {
        "trn2-a": launch(client, "trn2.48xlarge", "trn2-a", Project="prefixbench", Team="x"),
        "trn2-b": launch(client, "trn2.48xlarge", "trn2-b", Project="other"),
        "trn2-stopped": launch(client, "trn2.48xlarge", "trn2-stopped", Project="prefixbench"),
        "trn3-a": launch(client, "trn3.48xlarge", "trn3-a", az="us-east-1b",
                         Project="prefixbench", Team="y"),
        "web": launch(client, "m5.large", "web", Project="prefixbench"),
    }
    client.stop_instances(InstanceIds=[ids["trn2-stopped"]])
    return ids


@pytest.fixture
def fleet() -> Iterator[dict[str, str]]:
    with mock_aws():
        yield make_fleet(boto3.client("ec2", region_name=REGION))


def write_config(tmp_path: Path, name: str = "fleet.prefixbench_ec2.yml",
                 **options: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"plugin": "prefixbench_ec2", "regions": [REGION],
                                    **options}))
    return path


def load_plugin() -> Any:
    from ansible.plugins.loader import inventory_loader  # noqa: PLC0415

    inventory_loader.add_directory(str(ROOT / "plugins" / "inventory"))
    plugin = inventory_loader.get("prefixbench_ec2")
    assert plugin is not None
    return plugin


def parse(path: Path, cache: bool = True) -> Any:
    from ansible.inventory.data import InventoryData  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    inventory = InventoryData()
    plugin = load_plugin()
    assert plugin.verify_file(str(path))
    plugin.parse(inventory, DataLoader(), str(path), cache=cache)
    with contextlib.suppress(AttributeError):  # as InventoryManager: no cache, no update
        plugin.update_cache_if_changed()
    return inventory


def members(inventory: Any, group: str) -> list[str]:
    return sorted(h.name for h in inventory.groups[group].get_hosts())


def test_verify_file(tmp_path: Path) -> None:
    plugin = load_plugin()
    for name in ("a.prefixbench_ec2.yml", "b.prefixbench_ec2.yaml", "prefixbench_ec2.yml",
                 "aws_ec2.yml", "hosts.yml"):
        (tmp_path / name).write_text("plugin: prefixbench_ec2\n")
    assert plugin.verify_file(str(tmp_path / "a.prefixbench_ec2.yml"))
    assert plugin.verify_file(str(tmp_path / "b.prefixbench_ec2.yaml"))
    assert plugin.verify_file(str(tmp_path / "prefixbench_ec2.yml"))
    assert not plugin.verify_file(str(tmp_path / "aws_ec2.yml"))
    assert not plugin.verify_file(str(tmp_path / "hosts.yml"))
    assert not plugin.verify_file(str(tmp_path / "missing.prefixbench_ec2.yml"))


def test_running_trn_hosts_in_their_groups(fleet: dict[str, str], tmp_path: Path) -> None:
    inventory = parse(write_config(tmp_path))
    assert members(inventory, "neuron_fleet") == ["trn2-a", "trn2-b", "trn3-a"]
    assert members(inventory, "trn2") == ["trn2-a", "trn2-b"]
    assert members(inventory, "trn3") == ["trn3-a"]
    assert members(inventory, "type_trn2_48xlarge") == ["trn2-a", "trn2-b"]
    assert members(inventory, "type_trn3_48xlarge") == ["trn3-a"]
    assert members(inventory, "az_us_east_1a") == ["trn2-a", "trn2-b"]
    assert members(inventory, "az_us_east_1b") == ["trn3-a"]
    assert sorted(inventory.hosts) == ["trn2-a", "trn2-b", "trn3-a"]
    assert {g.name for g in inventory.groups["neuron_fleet"].child_groups} == {"trn2", "trn3"}
    hostvars = inventory.get_host("trn3-a").get_vars()
    described = boto3.client("ec2", region_name=REGION).describe_instances(
        InstanceIds=[fleet["trn3-a"]])["Reservations"][0]["Instances"][0]
    assert hostvars["ansible_host"] == described["PrivateIpAddress"]
    assert hostvars["prefixbench_instance_type"] == "trn3.48xlarge"
    assert hostvars["ec2_instance_id"] == fleet["trn3-a"]
    assert hostvars["ec2_availability_zone"] == "us-east-1b"
    assert hostvars["ec2_tags"] == {"Name": "trn3-a", "Project": "prefixbench", "Team": "y"}


@pytest.mark.parametrize(("tags", "expected"), [
    ({"Project": "prefixbench"}, ["trn2-a", "trn3-a"]),
    ({"Project": ["prefixbench", "other"]}, ["trn2-a", "trn2-b", "trn3-a"]),
    ({"Project": "pre*"}, ["trn2-a", "trn3-a"]),
    ({"Project": "prefixbench", "Team": "x"}, ["trn2-a"]),
])
def test_tag_filters(fleet: dict[str, str], tmp_path: Path, tags: dict[str, Any],
                     expected: list[str]) -> None:
    inventory = parse(write_config(tmp_path, tags=tags))
    assert members(inventory, "neuron_fleet") == expected


def test_instance_types_and_hostname_source(fleet: dict[str, str], tmp_path: Path) -> None:
    inventory = parse(write_config(tmp_path, instance_types=["trn3.48xlarge"],
                                   hostname_source="instance_id", hostname_tag="Nope"))
    assert sorted(inventory.hosts) == [fleet["trn3-a"]]
    assert inventory.get_host(fleet["trn3-a"]).get_vars()["ansible_host"] == fleet["trn3-a"]


def test_constructed_options(fleet: dict[str, str], tmp_path: Path) -> None:
    inventory = parse(write_config(
        tmp_path, compose={"ansible_user": "'admin'"},
        groups={"big": "prefixbench_instance_type.endswith('48xlarge')"},
        keyed_groups=[{"key": "ec2_tags.Team | default('none')", "prefix": "team"}]))
    assert members(inventory, "big") == ["trn2-a", "trn2-b", "trn3-a"]
    assert members(inventory, "team_x") == ["trn2-a"]
    assert members(inventory, "team_none") == ["trn2-b"]
    assert inventory.get_host("trn2-a").get_vars()["ansible_user"] == "admin"


def test_no_match_fails_naming_the_filter(fleet: dict[str, str], tmp_path: Path) -> None:
    from ansible.errors import AnsibleParserError  # noqa: PLC0415

    with pytest.raises(AnsibleParserError) as info:
        parse(write_config(tmp_path, tags={"Project": "nope"}))
    message = str(info.value.message)
    assert message.startswith("prefixbench_ec2: nothing selected: 4 instance(s) of type "
                              "trn2*, trn3* in region(s) us-east-1, none with tag "
                              "Project=nope (Project values there: prefixbench x3, other x1)")
    assert "\n" not in message
    with pytest.raises(AnsibleParserError,
                       match=r"with tag.s. Name=trn2-stopped, none running .states: stopped x1"):
        parse(write_config(tmp_path, instance_types=["trn2*"], tags={"Name": "trn2-stopped"}))
    inventory = parse(write_config(tmp_path, tags={"Project": "nope"}, allow_empty=True))
    assert inventory.hosts == {}


def test_cache_is_used_until_flushed(fleet: dict[str, str], tmp_path: Path) -> None:
    config = write_config(tmp_path, cache=True, cache_plugin="jsonfile",
                          cache_connection=str(tmp_path / "cache"), cache_timeout=600)
    assert sorted(parse(config).hosts) == ["trn2-a", "trn2-b", "trn3-a"]
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[fleet["trn2-b"]])
    assert sorted(parse(config).hosts) == ["trn2-a", "trn2-b", "trn3-a"]  # from the cache
    assert sorted(parse(config, cache=False).hosts) == ["trn2-a", "trn3-a"]  # --flush-cache
    assert sorted(parse(config).hosts) == ["trn2-a", "trn3-a"]  # the refreshed cache


def test_missing_credentials(tmp_path: Path) -> None:
    from ansible.errors import AnsibleParserError  # noqa: PLC0415

    # No mock: nothing may leave the machine, so the endpoint is a closed local port.
    config = write_config(tmp_path, endpoint_url="http://127.0.0.1:9")
    with pytest.raises(AnsibleParserError, match="prefixbench_ec2: no AWS credentials found"):
        parse(config)


def test_missing_region(tmp_path: Path) -> None:
    from ansible.errors import AnsibleParserError  # noqa: PLC0415

    config = tmp_path / "fleet.prefixbench_ec2.yml"
    config.write_text("plugin: prefixbench_ec2\n")
    with pytest.raises(AnsibleParserError, match="prefixbench_ec2: no AWS region: set"):
        parse(config)


@set_initial_no_auth_action_count(2)
@mock_aws
def test_access_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.errors import AnsibleParserError  # noqa: PLC0415

    iam = boto3.client("iam", region_name=REGION)
    iam.create_user(UserName="nobody")
    key = iam.create_access_key(UserName="nobody")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    with pytest.raises(AnsibleParserError,
                       match="access denied in us-east-1: the credentials may not call "
                             "DescribeInstances"):
        parse(write_config(tmp_path))


# ---------------------------------------------------------------------------------------
# The most real path: ansible-inventory with the repository's ansible.cfg, the example
# inventory file, and moto in server mode.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "moto.log").open("w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-p",
                             str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()  # noqa: S310
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_example_inventory_through_ansible_inventory(
        moto_server: str, tmp_path: Path, ansible_env: dict[str, str]) -> None:
    example = yaml.safe_load((ROOT / "inventories/aws/fleet.prefixbench_ec2.yml").read_text())
    example["cache_connection"] = str(tmp_path / "cache")
    config = tmp_path / "fleet.prefixbench_ec2.yml"
    config.write_text(yaml.safe_dump(example))
    region = example["regions"][0]
    env = {**ansible_env, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "PREFIXBENCH_EC2_ENDPOINT_URL": moto_server}
    client = boto3.client("ec2", region_name=region, endpoint_url=moto_server,
                          aws_access_key_id="testing",
                          aws_secret_access_key="testing")  # noqa: S106 - moto's fake key
    for name, itype in (("a", "trn2.48xlarge"), ("b", "trn3.48xlarge"), ("c", "m5.large")):
        launch(client, itype, name, az=f"{region}a", Project="prefixbench")
    launch(client, "trn2.48xlarge", "d", az=f"{region}a", Project="other")
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                          str(config), "--list"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    listing = json.loads(out.stdout)
    assert listing["neuron_fleet"]["children"] == ["trn2", "trn3"]
    assert listing["trn2"]["hosts"] == ["a"]
    assert listing["trn3"]["hosts"] == ["b"]
    assert sorted(listing["team_none"]["hosts"]) == ["a", "b"]
    assert listing["_meta"]["hostvars"]["a"]["prefixbench_instance_type"] in (
        "trn2.48xlarge", {"__ansible_unsafe": "trn2.48xlarge"})  # --list marks EC2 data unsafe

    env.pop("AWS_ACCESS_KEY_ID")
    env.pop("AWS_SECRET_ACCESS_KEY")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION"):
        env.pop(name, None)
    env.update(AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true",
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i",
                          str(config), "--list", "--flush-cache"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0
    assert "prefixbench_ec2: no AWS credentials found" in out.stderr
