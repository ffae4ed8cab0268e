"""The simulated fleet's pure layout: names, groups, addresses, inventory, argv."""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from prefixbench_sim import cmdlines, hostfiles, layout
from prefixbench_sim.layout import FleetPaths, SimHost

PATHS = FleetPaths(repo=Path("/r"), state=Path("/r/.simfleet"), cache=Path("/c"))


def names(count: int) -> list[str]:
    return [h.name for h in layout.plan_hosts(count)]


def test_one_host_is_a_single_trn2() -> None:
    assert names(1) == ["trn2-sim-1"]


def test_last_host_is_the_trn3_from_two_hosts_on() -> None:
    assert names(2) == ["trn2-sim-1", "trn3-sim-1"]
    assert names(3) == ["trn2-sim-1", "trn2-sim-2", "trn3-sim-1"]
    assert names(5)[-1] == "trn3-sim-1"
    assert [h.family for h in layout.plan_hosts(5)].count("trn3") == 1


@pytest.mark.parametrize("count", [0, -1, layout.MAX_HOSTS + 1])
def test_host_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(layout.LayoutError, match="between 1 and"):
        layout.plan_hosts(count)


def test_growing_the_fleet_keeps_every_name_and_address() -> None:
    small = {h.name: h.address for h in layout.plan_hosts(3)}
    big = {h.name: h.address for h in layout.plan_hosts(7)}
    assert small.items() <= big.items()


def test_addresses_are_unique_in_the_subnet_and_never_the_fabric() -> None:
    hosts = layout.plan_hosts(layout.MAX_HOSTS)
    addrs = [ipaddress.ip_address(h.address) for h in hosts]
    net = ipaddress.ip_network(f"{layout.FABRIC_ADDRESS}/{layout.PREFIX_LEN}", strict=False)
    assert len(set(addrs)) == len(addrs)
    assert all(a in net for a in addrs)
    assert ipaddress.ip_address(layout.FABRIC_ADDRESS) not in addrs
    assert net.broadcast_address not in addrs
    assert layout.host_address("trn2", 1) == "10.213.0.11"
    assert layout.host_address("trn3", 1) == "10.213.0.201"


def test_instance_types_follow_the_family() -> None:
    trn2, trn3 = SimHost("trn2", 1), SimHost("trn3", 1)
    assert trn2.instance_type == layout.TRN2_INSTANCE_TYPE == "trn2.48xlarge"
    assert trn3.instance_type == layout.TRN3_INSTANCE_TYPE == "trn3sim.48xlarge"
    assert json.loads(hostfiles.instance_json(trn3)) == {
        "instance_type": "trn3sim.48xlarge",
        "family": "trn3",
        "hardware": {"devices": 16, "physical_cores_per_device": 8, "default_lnc": 2,
                     "device_memory_gib": 144, "vcpus": 192},
    }
    assert layout.INSTANCE_FILE == "/etc/prefixbench-sim/instance.json"


def test_namespace_and_interface_names() -> None:
    host = SimHost("trn2", 2)
    assert host.netns == "pbsim-trn2-sim-2"
    assert host.veth == "pb-trn2-sim-2"
    assert all(len(h.veth) <= 15 for h in layout.plan_hosts(layout.MAX_HOSTS))


def test_host_names_parse_back() -> None:
    for host in layout.plan_hosts(12):
        assert layout.parse_host_name(host.name) == host


@pytest.mark.parametrize("name", ["fabric", "trn4-sim-1", "trn2-sim-x", "trn2-sim-0", "x-sim-1"])
def test_strangers_are_not_hosts(name: str) -> None:
    with pytest.raises(layout.LayoutError):
        layout.parse_host_name(name)


def test_paths_default_under_the_repo_and_follow_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PREFIXBENCH_SIM_STATE", raising=False)
    monkeypatch.delenv("PREFIXBENCH_CACHE_DIR", raising=False)
    p = FleetPaths.from_env(tmp_path)
    assert p.state == tmp_path / ".simfleet"
    assert p.rootfs == Path.home() / ".cache/prefixbench/rootfs-bookworm"
    assert p.inventory == tmp_path / "inventories/sim/hosts.yml"
    monkeypatch.setenv("PREFIXBENCH_SIM_STATE", str(tmp_path / "st"))
    monkeypatch.setenv("PREFIXBENCH_CACHE_DIR", str(tmp_path / "ca"))
    p = FleetPaths.from_env(tmp_path)
    assert p.state == tmp_path / "st"
    assert p.www == tmp_path / "st/www"
    assert p.rootfs == tmp_path / "ca/rootfs-bookworm"


def test_inventory_groups_and_host_variables() -> None:
    hosts = layout.plan_hosts(3)
    text = hostfiles.inventory_yaml(hosts, PATHS, ip="/usr/sbin/ip", nc="/usr/bin/nc")
    assert text.startswith("# Generated")
    data = yaml.safe_load(text)
    groups = data["all"]["children"]["neuron_fleet"]["children"]
    assert list(groups["trn2"]["hosts"]) == ["trn2-sim-1", "trn2-sim-2"]
    assert list(groups["trn3"]["hosts"]) == ["trn3-sim-1"]
    hv = groups["trn3"]["hosts"]["trn3-sim-1"]
    assert hv["ansible_host"] == "trn3-sim-1"
    assert hv["ansible_user"] == "root"
    assert hv["ansible_ssh_private_key_file"] == "/r/.simfleet/ssh/id_ed25519"
    assert hv["ansible_python_interpreter"] == "/usr/bin/python3"
    assert hv["prefixbench_instance_type"] == "trn3sim.48xlarge"
    assert hv["prefixbench_sim_address"] == "10.213.0.201"
    args = shlex.split(hv["ansible_ssh_common_args"])
    assert args == [
        "-o",
        "ProxyCommand=/usr/sbin/ip netns exec pbsim-trn3-sim-1 /usr/bin/nc 127.0.0.1 22",
        "-o",
        "UserKnownHostsFile=/r/.simfleet/known_hosts",
        "-o",
        "StrictHostKeyChecking=yes",
    ]


def test_inventory_of_one_host_keeps_an_empty_trn3_group() -> None:
    data = yaml.safe_load(hostfiles.inventory_yaml(layout.plan_hosts(1), PATHS))
    groups = data["all"]["children"]["neuron_fleet"]["children"]
    assert groups["trn3"] == {"hosts": {}}
    assert list(groups["trn2"]["hosts"]) == ["trn2-sim-1"]


def test_inventory_quotes_paths_with_spaces() -> None:
    paths = FleetPaths(repo=Path("/r"), state=Path("/my state"), cache=Path("/c"))
    hv = hostfiles.inventory(layout.plan_hosts(1), paths)["all"]["children"]["neuron_fleet"][
        "children"
    ]["trn2"]["hosts"]["trn2-sim-1"]
    assert "UserKnownHostsFile=/my state/known_hosts" in shlex.split(hv["ansible_ssh_common_args"])


def test_ssh_argv_checks_host_keys_and_never_multiplexes() -> None:
    argv = cmdlines.ssh_argv(SimHost("trn2", 1), PATHS, ["systemctl", "is-system-running"])
    joined = " ".join(argv)
    assert argv[0] == "ssh"
    assert "StrictHostKeyChecking=yes" in argv
    assert "BatchMode=yes" in argv
    assert "ControlPath=none" in argv
    assert "UserKnownHostsFile=/r/.simfleet/known_hosts" in argv
    assert "ProxyCommand=ip netns exec pbsim-trn2-sim-1 nc 127.0.0.1 22" in argv
    assert argv[-3:] == ["trn2-sim-1", "--", "systemctl is-system-running"]
    assert "-l root" in joined


def test_nspawn_argv_boots_systemd_in_the_hosts_namespace() -> None:
    argv = cmdlines.nspawn_argv(SimHost("trn3", 1), PATHS)
    assert argv[0] == "systemd-nspawn"
    for flag in ("--keep-unit", "--register=no", "--boot", "--console=read-only"):
        assert flag in argv
    assert "--directory=/r/.simfleet/hosts/trn3-sim-1/root" in argv
    assert "--network-namespace-path=/run/netns/pbsim-trn3-sim-1" in argv
    assert "--hostname=trn3-sim-1" in argv


def test_overlay_options_and_bad_paths() -> None:
    opts = cmdlines.overlay_options(Path("/l"), Path("/u"), Path("/w"))
    assert opts == "lowerdir=/l,upperdir=/u,workdir=/w"
    with pytest.raises(layout.LayoutError, match="overlayfs"):
        cmdlines.overlay_options(Path("/l,x"), Path("/u"), Path("/w"))


def test_network_commands_stay_inside_the_harness_namespaces() -> None:
    commands = cmdlines.fabric_commands() + cmdlines.host_net_commands(SimHost("trn2", 3))
    for argv in commands:
        assert argv[0] == "ip"
        if argv[1:3] == ["netns", "add"]:
            assert argv[3].startswith("pbsim-")
            continue
        assert argv[1] == "-n"
        assert argv[2].startswith("pbsim-")
        assert "route" not in argv
    adds = [a for a in commands if "addr" in a]
    assert [a[-3] for a in adds] == ["10.213.0.1/24", "10.213.0.13/24"]


def test_http_server_binds_the_fabric_address_only() -> None:
    argv = cmdlines.http_server_argv("/usr/bin/python3", Path("/s/www"))
    assert argv[:4] == ["ip", "netns", "exec", "pbsim-fabric"]
    assert argv[argv.index("--bind") + 1] == "10.213.0.1"
    assert argv[argv.index("--directory") + 1] == "/s/www"
    assert argv[-1] == "8080"
    assert layout.ARTIFACT_URL == "http://10.213.0.1:8080/"


def test_nsenter_argv_clears_the_environment() -> None:
    argv = cmdlines.nsenter_argv(42, ["true"])
    assert argv[:5] == ["nsenter", "-t", "42", "-a", "env"]
    assert "-i" in argv
    assert argv[-1] == "true"


def test_etc_hosts_and_known_hosts() -> None:
    hosts = layout.plan_hosts(2)
    text = hostfiles.etc_hosts(hosts)
    assert "10.213.0.11\ttrn2-sim-1" in text
    assert "10.213.0.201\ttrn3-sim-1" in text
    assert "127.0.0.1\tlocalhost" in text
    kh = hostfiles.known_hosts(
        {"trn3-sim-1": "ssh-ed25519 BBBB root@trn3-sim-1\n", "trn2-sim-1": "ssh-ed25519 AAAA x"}
    )
    assert kh == "trn2-sim-1 ssh-ed25519 AAAA\ntrn3-sim-1 ssh-ed25519 BBBB\n"


def test_each_nspawn_gets_its_own_cgroup_before_it_starts(tmp_path: Path) -> None:
    host = SimHost("trn2", 1)
    dirs = cmdlines.cgroup_dirs(
        [Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified")], host
    )
    assert dirs == [
        Path("/sys/fs/cgroup/systemd/pbsim/trn2-sim-1"),
        Path("/sys/fs/cgroup/unified/pbsim/trn2-sim-1"),
    ]
    argv = cmdlines.in_cgroups(dirs, ["systemd-nspawn", "--boot"])
    assert argv[:2] == ["sh", "-c"]
    assert argv[-3:] == ["--", "systemd-nspawn", "--boot"]
    # The wrapper writes its own PID into each cgroup.procs, then execs the command.
    fake = [tmp_path / "a", tmp_path / "b"]
    for d in fake:
        d.mkdir()
    out = subprocess.run(
        cmdlines.in_cgroups(fake, ["sh", "-c", "echo $$"]), capture_output=True, text=True,
        check=True,
    ).stdout.strip()
    assert [(d / "cgroup.procs").read_text(encoding="ascii").strip() for d in fake] == [out, out]
