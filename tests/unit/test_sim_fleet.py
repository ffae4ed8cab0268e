"""The simulated fleet's machine-free helpers: state file, status table, process refs,
mount parsing, the rootfs configuration step and the root/tool checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefixbench_sim import rootfs, system
from prefixbench_sim.state import FleetState
from prefixbench_sim.status import HostStatus, format_status, parse_units
from prefixbench_sim.system import ProcRef, SimFleetError


def test_state_round_trips_and_tolerates_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    state = FleetState(
        hosts={"trn2-sim-1": ProcRef(10, 20), "trn3-sim-1": None}, http=ProcRef(30, 40)
    )
    state.save(path)
    back = FleetState.load(path)
    assert back.hosts == state.hosts
    assert back.http == ProcRef(30, 40)
    assert back.refs() == [ProcRef(10, 20), ProcRef(30, 40)]
    path.write_text("{not json", encoding="utf-8")
    assert FleetState.load(path) == FleetState()
    assert FleetState.load(tmp_path / "absent.json") == FleetState()


def test_proc_ref_matches_pid_and_start_time() -> None:
    me = ProcRef.of(os.getpid())
    assert me is not None
    assert me.alive()
    assert not ProcRef(me.pid, me.start + 1).alive()  # same PID, another process
    assert ProcRef.from_json(me.to_json()) == me
    assert ProcRef.from_json({"pid": "1"}) is None
    assert ProcRef.from_json(None) is None


def test_stat_parsing_survives_odd_command_names() -> None:
    st = system.proc_stat(os.getpid())
    assert st is not None
    assert st[0] in {"R", "S"}
    assert system.proc_stat(2**22 + 12345) is None


def test_mountinfo_unescaping() -> None:
    assert system._unescape(r"/a\040b\134c") == "/a b\\c"
    assert system._unescape("/plain") == "/plain"


def test_mounts_under_an_unmounted_dir_is_empty(tmp_path: Path) -> None:
    assert system.mounts_under(tmp_path) == []


def test_status_table() -> None:
    rows = [
        HostStatus(
            "trn2-sim-1",
            "10.213.0.11",
            "trn2",
            "trn2.48xlarge",
            True,
            "running",
            (("vllm-cached.service", "active/running"),),
            15,
        ),
        HostStatus("trn3-sim-1", "10.213.0.201", "trn3", "trn3.48xlarge", False, "-"),
    ]
    text = format_status(rows, "http://10.213.0.1:8080/ (pid 1)")
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["NAME", "ADDRESS", "GROUP"]
    assert "trn2-sim-1" in lines[1]
    assert "vllm-cached.service=active/running" in lines[1]
    assert " 15M " in lines[1]
    assert lines[2].split()[4:6] == ["no", "-"]
    assert lines[-1] == "artifact server: http://10.213.0.1:8080/ (pid 1)"
    assert "no hosts" in format_status([], "not running")


def test_parse_units() -> None:
    text = (
        "vllm-baseline.service loaded inactive dead vLLM baseline\n"
        "vllm-cached.service   loaded active   running vLLM cached\n"
    )
    assert parse_units(text) == (
        ("vllm-baseline.service", "inactive/dead"),
        ("vllm-cached.service", "active/running"),
    )
    assert parse_units("") == ()


def _fake_debootstrap_tree(root: Path) -> None:
    for d in (
        "etc/ssh/sshd_config.d",
        "etc/systemd/system/timers.target.wants",
        "etc/apt",
        "var/lib/dbus",
        "var/lib/apt/lists",
        "var/cache/apt/archives",
        "root",
    ):
        (root / d).mkdir(parents=True)
    (root / "etc/ssh/ssh_host_rsa_key").write_text("secret", encoding="ascii")
    (root / "etc/ssh/ssh_host_rsa_key.pub").write_text("pub", encoding="ascii")
    (root / "etc/machine-id").write_text("f" * 32 + "\n", encoding="ascii")
    (root / "var/lib/dbus/machine-id").write_text("f" * 32 + "\n", encoding="ascii")
    (root / "etc/systemd/system/timers.target.wants/apt-daily.timer").symlink_to(
        "/lib/systemd/system/apt-daily.timer"
    )
    (root / "var/lib/apt/lists/deb.debian.org_debian_dists_bookworm_InRelease").touch()
    (root / "var/cache/apt/archives/x_1_amd64.deb").touch()
    (root / "etc/hostname").write_text("builder\n", encoding="ascii")


def test_rootfs_configure_strips_identity_and_masks_apt_timers(tmp_path: Path) -> None:
    _fake_debootstrap_tree(tmp_path)
    rootfs.configure(tmp_path)
    assert not list((tmp_path / "etc/ssh").glob("ssh_host_*"))
    assert (tmp_path / "etc/machine-id").read_text(encoding="ascii") == ""
    assert (tmp_path / "var/lib/dbus/machine-id").readlink() == Path("/etc/machine-id")
    sshd = (tmp_path / "etc/ssh/sshd_config.d/prefixbench-sim.conf").read_text(encoding="ascii")
    assert "ListenAddress 127.0.0.1" in sshd
    assert "PermitRootLogin prohibit-password" in sshd
    for unit in rootfs.MASKED_UNITS:
        assert (tmp_path / "etc/systemd/system" / unit).readlink() == Path("/dev/null")
    assert not (tmp_path / "etc/systemd/system/timers.target.wants/apt-daily.timer").exists()
    assert not list((tmp_path / "var/lib/apt/lists").iterdir())
    assert not list((tmp_path / "var/cache/apt/archives").iterdir())
    assert "deb " not in (tmp_path / "etc/apt/sources.list").read_text(encoding="utf-8")
    assert (tmp_path / "root/.ssh").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "etc/prefixbench-sim").is_dir()
    rootfs.configure(tmp_path)  # idempotent


def test_rootfs_is_ready_only_with_a_matching_stamp(tmp_path: Path) -> None:
    assert not rootfs.rootfs_ready(tmp_path)
    (tmp_path / rootfs.STAMP).write_text('{"key": "other"}', encoding="utf-8")
    assert not rootfs.rootfs_ready(tmp_path)
    (tmp_path / rootfs.STAMP).write_text(json.dumps(rootfs.stamp_data()), encoding="utf-8")
    assert rootfs.rootfs_ready(tmp_path)


def test_non_root_gets_one_actionable_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SimFleetError, match=r"must run as root.*sudo scripts/simfleet up"):
        system.require_root("up")


def test_missing_tools_map_to_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        system.shutil,
        "which",
        lambda cmd: (
            None if cmd in {"nc", "socat", "systemd-nspawn", "debootstrap"} else f"/usr/bin/{cmd}"
        ),
    )
    assert system.missing_host_tools() == [
        "debootstrap",
        "netcat-openbsd",
        "socat",
        "systemd-container",
    ]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SimFleetError, match="apt-get install -y"):
        system.ensure_host_tools()


def test_run_reports_the_last_stderr_line() -> None:
    with pytest.raises(SimFleetError, match="boom"):
        system.run(["sh", "-c", "echo one >&2; echo boom >&2; exit 3"])
    assert system.run(["sh", "-c", "exit 3"], check=False).returncode == 3
    with pytest.raises(SimFleetError, match="simfleet setup"):
        system.run(["/nonexistent/tool"])
