"""bench-compile's reading of a run's starts and its figures (prefixbench_perf.compile_bench)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixbench_perf import compile_bench


def write_start(run_dir: Path, host: str, conf: str, *, key: str, role: str,
                compiled: bool, restored: int, healthy: float, restore: float) -> None:
    folder = run_dir / host / conf
    folder.mkdir(parents=True)
    (folder / "compile.json").write_text(json.dumps({
        "key": key, "role": role, "compiled": compiled, "restored_files": restored,
        "restore_s": restore}))
    (folder / "startup.json").write_text(json.dumps({"elapsed_s": healthy}))


def test_the_figures_count_compiles_per_run_and_time_each_kind_of_start(tmp_path: Path
                                                                         ) -> None:
    runs = {}
    for name, plan in {
        "cold": [("h1", "leader", True, 0, 40.0, 0.0), ("h2", "follower", False, 9, 8.0, 1.0)],
        "fresh": [("h1", "restore", False, 9, 7.0, 2.0), ("h2", "restore", False, 9, 9.0, 2.0)],
        "warm": [("h1", "restore", False, 0, 6.0, 0.0), ("h2", "restore", False, 0, 6.0, 0.0)],
    }.items():
        for host, role, compiled, restored, healthy, restore in plan:
            write_start(tmp_path / name, host, "cached", key="ck-a", role=role,
                        compiled=compiled, restored=restored, healthy=healthy,
                        restore=restore)
        runs[name] = compile_bench.read_starts(tmp_path / name)
    assert [s.kind for s in runs["cold"]] == ["compiled", "follower"]
    assert [s.kind for s in runs["fresh"]] == ["fetched", "fetched"]
    assert [s.kind for s in runs["warm"]] == ["warm", "warm"]
    text = "\n".join(compile_bench.report(runs))
    assert "1 compile key(s) across 2 host(s)" in text
    assert "off target" not in text
    # fresh hosts: restore 2 s + start 8 s (median) = 10 s, against 40 s compiling
    assert "fresh host with a fetched cache / cold compile: 0.25x" in text, text
    runs["warm"][0] = compile_bench.Start("h1", "cached", "ck-a", "restore", True, 0, 30, 0)
    assert "off target" in "\n".join(compile_bench.report(runs))


def test_it_refuses_to_empty_caches_unless_told(capsys: pytest.CaptureFixture[str]) -> None:
    assert compile_bench.main(["-i", "inventories/sim"]) == 2
    assert "--empty-host-caches" in capsys.readouterr().err
