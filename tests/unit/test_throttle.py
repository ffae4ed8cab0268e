"""Holding one simulated host to a fraction of a core (prefixbench_sim.throttle), against
a stand-in cgroup tree in a temporary directory (a test double of /sys/fs/cgroup)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixbench_sim import throttle
from prefixbench_sim.layout import SimHost


class FakeCgroupFiles:
    """Records every write to a cgroup.procs file, as the kernel would apply it."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.written: list[tuple[str, int]] = []
        original = throttle._move

        def move(pids: set[int], into: Path) -> int:
            self.written += [(into.name, pid) for pid in sorted(pids)]
            return original(pids, into)

        monkeypatch.setattr(throttle, "_move", move)


def test_every_process_of_the_host_gets_the_quota_and_goes_back_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = SimHost("trn3", 1)
    mount = tmp_path / "unified"
    (mount / "pbsim" / host.name / "payload").mkdir(parents=True)
    (mount / "pbsim" / host.name / "cgroup.procs").write_text("10\n11\n")
    (mount / "pbsim" / host.name / "payload" / "cgroup.procs").write_text("12\n")
    monkeypatch.setattr(throttle, "cgroup_mounts", lambda: [mount])
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    files = FakeCgroupFiles(cpu, monkeypatch)
    assert throttle.host_pids(host) == {10, 11, 12}
    with throttle.throttled(host, 0.3, root=cpu) as moved:
        group = cpu / f"pbsim-slow-{host.name}"
        assert moved == 3
        assert (group / "cpu.cfs_quota_us").read_text() == "30000\n"
        assert (group / "cpu.cfs_period_us").read_text() == "100000\n"
    assert [pid for name, pid in files.written if name == group.name] == [10, 11, 12]
    # Back to the root: what the group held last (a stand-in file keeps one line).
    assert [name for name, _ in files.written][-1] == "cpu"


def test_a_quota_out_of_range_or_no_cpu_hierarchy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not between"), \
            throttle.throttled(SimHost("trn2", 1), 0.0, root=tmp_path):
        pass
    with pytest.raises(RuntimeError, match="no cgroup-v1 cpu hierarchy"), \
            throttle.throttled(SimHost("trn2", 1), 0.5, root=tmp_path):
        pass
