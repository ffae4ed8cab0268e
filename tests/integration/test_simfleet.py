"""The simulated fleet itself: real systemd hosts, real SSH, isolated networks, clean down.

These run before the other integration tests (see ``conftest.py``); the last one takes
the fleet down, checks that nothing is left, and brings it back, so later tests get
freshly booted hosts whatever these tests did to them.
"""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from prefixbench_sim import layout
from prefixbench_sim.fleet import list_netns
from prefixbench_sim.system import ProcRef, mounts_under
from prefixbench_sim.testing import FLEET_SIZE, SimFleetHandle

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

CONNECT = (
    "import socket, sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()\n"
    "except OSError as exc:\n"
    "    print(exc); sys.exit(1)\n"
)


def can_connect(sim: SimFleetHandle, src: layout.SimHost, addr: str, port: int) -> bool:
    proc = sim.fleet.ssh(src, ["python3", "-c", CONNECT, addr, str(port)])
    assert proc.returncode in {0, 1}, proc.stderr
    return proc.returncode == 0


def ansible(
    controller_bin: Path, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(controller_bin / "ansible"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fleet_has_four_hosts_in_trn2_and_trn3(sim_fleet: SimFleetHandle) -> None:
    assert [h.name for h in sim_fleet.hosts] == ["trn2-sim-1", "trn2-sim-2", "trn2-sim-3",
                                                 "trn3-sim-1"]
    rows = {r.name: r for r in sim_fleet.fleet.status()}
    assert set(rows) == {h.name for h in sim_fleet.hosts}
    assert all(r.running and r.system == "running" for r in rows.values())
    assert rows["trn3-sim-1"].instance_type == layout.TRN3_INSTANCE_TYPE
    # Each host's systemd owns a cgroup tree of its own (shared trees fail units at random).
    for host in sim_fleet.hosts:
        pid1 = sim_fleet.fleet.pid1(host)
        cgroups = Path(f"/proc/{pid1}/cgroup").read_text(encoding="ascii")
        assert f"/{layout.CGROUP_PARENT}/{host.name}/payload/init.scope" in cgroups


def test_inventory_parses_with_groups_and_instance_types(
    sim_fleet: SimFleetHandle, controller_bin: Path, ansible_env: dict[str, str]
) -> None:
    proc = subprocess.run(
        [str(controller_bin / "ansible-inventory"), "-i", str(sim_fleet.inventory), "--list"],
        cwd=ROOT,
        env=ansible_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    inv = json.loads(proc.stdout)
    assert sorted(inv["neuron_fleet"]["children"]) == ["trn2", "trn3"]
    assert inv["trn2"]["hosts"] == ["trn2-sim-1", "trn2-sim-2", "trn2-sim-3"]
    assert inv["trn3"]["hosts"] == ["trn3-sim-1"]
    hv = inv["_meta"]["hostvars"]
    assert hv["trn2-sim-2"]["prefixbench_instance_type"] == "trn2.48xlarge"
    assert hv["trn3-sim-1"]["prefixbench_instance_type"] == "trn3sim.48xlarge"
    assert hv["trn3-sim-1"]["prefixbench_sim_address"] == "10.213.0.201"


def test_ansible_ping_over_ssh(
    sim_fleet: SimFleetHandle,
    controller_bin: Path,
    ansible_env: dict[str, str],
    tmp_path: Path,
) -> None:
    env = {**ansible_env, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")}
    proc = ansible(
        controller_bin, env, "-i", str(sim_fleet.inventory), "all", "-m", "ansible.builtin.ping"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in sim_fleet.hosts:
        assert f"{host.name} | SUCCESS" in proc.stdout


def test_every_host_is_a_running_systemd_with_its_own_identity(
    sim_fleet: SimFleetHandle,
) -> None:
    machine_ids = set()
    for host in sim_fleet.hosts:
        out = sim_fleet.sh(
            host,
            "systemctl is-system-running; hostname; cat /etc/machine-id; "
            f"cat {layout.INSTANCE_FILE}; ps -o comm= -p 1",
        )
        state, hostname, machine_id, instance, pid1 = out.splitlines()
        assert state == "running"
        assert hostname == host.name
        assert pid1 == "systemd"
        machine_ids.add(machine_id)
        assert json.loads(instance) == {"instance_type": host.instance_type,
                                        "family": host.family,
                                        "hardware": dict(layout.SIM_HARDWARE[host.family])}
    assert len(machine_ids) == FLEET_SIZE


def test_host_key_checking_is_on(
    sim_fleet: SimFleetHandle,
    controller_bin: Path,
    ansible_env: dict[str, str],
    tmp_path: Path,
) -> None:
    # A known_hosts that names trn2-sim-1 with some other key must make SSH refuse.
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_hosts"
    keytype, key = other.with_suffix(".pub").read_text(encoding="ascii").split()[:2]
    wrong.write_text(f"trn2-sim-1 {keytype} {key}\n", encoding="ascii")
    inv = yaml.safe_load(sim_fleet.inventory.read_text(encoding="utf-8"))
    hv = inv["all"]["children"]["neuron_fleet"]["children"]["trn2"]["hosts"]["trn2-sim-1"]
    assert "StrictHostKeyChecking=yes" in shlex.split(hv["ansible_ssh_common_args"])
    hv["ansible_ssh_common_args"] = hv["ansible_ssh_common_args"].replace(
        str(sim_fleet.paths.known_hosts), str(wrong)
    )
    bad_inventory = tmp_path / "hosts.yml"
    bad_inventory.write_text(yaml.safe_dump(inv), encoding="utf-8")
    env = {**ansible_env, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")}
    proc = ansible(
        controller_bin, env, "-i", str(bad_inventory), "trn2-sim-1", "-m", "ansible.builtin.ping"
    )
    assert proc.returncode != 0
    assert "UNREACHABLE" in proc.stdout
    assert "Host key verification failed" in proc.stdout + proc.stderr
    # ...and so must an empty one (no trust on first use).
    wrong.write_text("", encoding="ascii")
    proc = ansible(
        controller_bin, env, "-i", str(bad_inventory), "trn2-sim-1", "-m", "ansible.builtin.ping"
    )
    assert proc.returncode != 0
    assert "Host key verification failed" in proc.stdout + proc.stderr


def test_hosts_are_isolated_but_reach_the_artifact_server(sim_fleet: SimFleetHandle) -> None:
    a, b = sim_fleet.host("trn2-sim-1"), sim_fleet.host("trn2-sim-2")
    probe = sim_fleet.paths.www / "pbsim-probe.txt"
    probe.write_text("hello from the fabric\n", encoding="utf-8")
    try:
        got = sim_fleet.ssh(
            a, ["curl", "-fsS", "--max-time", "5", f"{layout.ARTIFACT_URL}pbsim-probe.txt"]
        )
        assert got == "hello from the fabric\n"
    finally:
        probe.unlink()
    # B serves on its loopback and on all addresses; A sees only the latter.
    for unit, bind, port in (("pbsim-lo", "127.0.0.1", 8000), ("pbsim-any", "0.0.0.0", 8001)):
        sim_fleet.ssh(
            b,
            [
                "systemd-run",
                f"--unit={unit}",
                "python3",
                "-m",
                "http.server",
                "--bind",
                bind,
                str(port),
            ],
        )
    try:
        deadline = time.monotonic() + 15
        while not (
            can_connect(sim_fleet, b, "127.0.0.1", 8000)
            and can_connect(sim_fleet, b, b.address, 8001)
        ):
            assert time.monotonic() < deadline, "test servers on trn2-sim-2 did not start"
            time.sleep(0.3)
        assert can_connect(sim_fleet, a, b.address, 8001)  # the fabric works
        assert not can_connect(sim_fleet, a, b.address, 8000)  # B's loopback stays B's
        assert not can_connect(sim_fleet, a, "127.0.0.1", 8000)  # A's loopback is A's own
        assert not can_connect(sim_fleet, a, b.address, 22)  # sshd only on loopback
    finally:
        sim_fleet.ssh(b, ["systemctl", "stop", "pbsim-lo", "pbsim-any"])
    # Nothing routed out; nothing of the fabric in the machine's own namespace.
    routes = sim_fleet.ssh(a, ["ip", "-4", "route"])
    assert routes.split()[:1] == ["10.213.0.0/24"] and "default" not in routes
    assert not can_connect(sim_fleet, a, "1.1.1.1", 80)
    own = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True)
    assert "10.213." not in own.stdout


def test_up_again_is_a_no_op(sim_fleet: SimFleetHandle) -> None:
    before = sim_fleet.fleet.state()
    t0 = time.monotonic()
    sim_fleet.fleet.up(FLEET_SIZE)
    assert time.monotonic() - t0 < 10
    after = sim_fleet.fleet.state()
    assert after.hosts == before.hosts
    assert after.http == before.http


def test_resizing_adds_and_removes_only_the_difference(sim_fleet: SimFleetHandle) -> None:
    fleet = sim_fleet.fleet
    before = fleet.state().hosts
    grown = fleet.up(FLEET_SIZE + 1)
    assert [h.name for h in grown] == ["trn2-sim-1", "trn2-sim-2", "trn2-sim-3", "trn2-sim-4",
                                       "trn3-sim-1"]
    state = fleet.state().hosts
    assert {n: state[n] for n in before} == before  # the first four were left alone
    inv = yaml.safe_load(sim_fleet.inventory.read_text(encoding="utf-8"))
    trn2 = inv["all"]["children"]["neuron_fleet"]["children"]["trn2"]["hosts"]
    assert "trn2-sim-4" in trn2
    assert sim_fleet.ssh(grown[3], ["hostname"]).strip() == "trn2-sim-4"
    fleet.up(FLEET_SIZE)
    assert fleet.state().hosts == before
    assert "pbsim-trn2-sim-4" not in list_netns()
    assert not fleet.paths.host_dir("trn2-sim-4").exists()


def _build_artifacts(www: Path) -> None:
    """The other half of the harness fills ``www/`` (here: apt repository and model)."""
    try:
        artifacts = importlib.import_module("prefixbench_sim.artifacts")
    except ImportError:
        pytest.skip("prefixbench_sim.artifacts (the simulated Neuron repo builder) is absent")
    artifacts.build_all(www, pip=False)


APT_SETUP = f"""
install -d -m 0755 /etc/apt/keyrings
curl -fsS --max-time 10 {layout.ARTIFACT_URL}neuron-apt/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/neuron.gpg
echo "deb [signed-by=/etc/apt/keyrings/neuron.gpg] {layout.ARTIFACT_URL}neuron-apt bookworm main" \\
  > /etc/apt/sources.list.d/neuron.list
apt-get update 2>&1
DEBIAN_FRONTEND=noninteractive apt-get install -y 'aws-neuronx-tools=2.31.15.0*' 2>&1
"""


def test_apt_install_from_the_simulated_neuron_repo_is_signature_checked(
    sim_fleet: SimFleetHandle,
) -> None:
    _build_artifacts(sim_fleet.paths.www)
    for host in (sim_fleet.host("trn2-sim-1"), sim_fleet.host("trn3-sim-1")):
        out = sim_fleet.sh(host, APT_SETUP, timeout=300)
        assert "NO_PUBKEY" not in out and "not signed" not in out, out
        assert "\nW:" not in out and "\nE:" not in out, out
        version = sim_fleet.ssh(host, ["dpkg-query", "-W", "-f", "${Version}", "aws-neuronx-tools"])
        assert version.startswith("2.31.15.0")
        listing = sim_fleet.ssh(host, ["/opt/aws/neuron/bin/neuron-ls", "-j"])
        assert host.instance_type in json.dumps(json.loads(listing))
    # The same repository with a key that did not sign it must be refused by apt.
    host = sim_fleet.host("trn2-sim-2")
    source = (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        f"{layout.ARTIFACT_URL}neuron-apt bookworm main"
    )
    proc = sim_fleet.fleet.ssh(
        host,
        [
            "sh",
            "-c",
            (
                f"echo {shlex.quote(source)} > /etc/apt/sources.list.d/neuron.list"
                " && apt-get update 2>&1"
            ),
        ],
        timeout=120,
    )
    assert "NO_PUBKEY" in proc.stdout or "not signed" in proc.stdout, proc.stdout
    policy = sim_fleet.fleet.ssh(host, ["apt-cache", "policy", "aws-neuronx-tools"]).stdout
    assert "2.31.15.0" not in policy, policy


def test_down_leaves_nothing_then_up_restores(sim_fleet: SimFleetHandle) -> None:
    fleet = sim_fleet.fleet
    refs = fleet.state().refs()
    for host in sim_fleet.hosts:
        pid1 = fleet.pid1(host)
        assert pid1 is not None
        ref = ProcRef.of(pid1)
        assert ref is not None
        refs.append(ref)
    assert all(r.alive() for r in refs)
    t0 = time.monotonic()
    fleet.down()
    took = time.monotonic() - t0
    assert list_netns() == []
    assert mounts_under(fleet.paths.state) == []
    assert [r.pid for r in refs if r.alive()] == []
    assert fleet.leftovers(refs) == []
    assert not sim_fleet.inventory.exists()
    assert took < 60
    # Bring it back so the session fixture's promise holds for later tests.
    assert [h.name for h in fleet.up(FLEET_SIZE)] == [h.name for h in sim_fleet.hosts]
    assert sim_fleet.ssh(sim_fleet.hosts[0], ["systemctl", "is-system-running"]).strip() == (
        "running"
    )
