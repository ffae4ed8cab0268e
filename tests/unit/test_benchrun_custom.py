"""A custom workload's bench: prepared prompts, argv, record, and the action plugin."""

from __future__ import annotations

import errno
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.bench import benchrun, client_launch, experiment
from prefixbench.config import settings
from prefixbench.measure.records import BenchmarkRecord, with_checksum
from prefixbench_sim import tinytokenizer

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm-cpu-seed-procedure"


def prompts_file(tmp_path: Path) -> Path:
    shared = " ".join(tinytokenizer.word(i) for i in range(100, 356))
    path = tmp_path / "mine.jsonl"
    lines = [{"prompt": f"{shared} {tinytokenizer.word(600 + i)}"} for i in range(6)]
    lines.append({"messages": [{"role": "user", "content": "t7 t8"}]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def host_settings(path: Path, **values: Any) -> dict[str, Any]:
    """A host's settings as preflight validates them, with one custom workload."""
    result = settings.validate({
        "prefixbench_instance_type": "trn2.48xlarge", "vllm_service_model": "/opt/tok",
        "vllm_service_served_model_name": "m", "prefixbench_bench_timeout": 600,
        "prefixbench_workloads": [{"name": "mine", "dataset_name": "custom",
                                   "dataset_path": str(path), "max_concurrency": 1,
                                   "custom_output_len": 8}], **values}, "h1")
    assert result.ok, result.problems
    return result.settings


def args(path: Path, run_dir: Path) -> dict[str, Any]:
    """The bench action's arguments, as roles/prefix_bench/tasks/bench.yml gives them."""
    return {"run_dir": str(run_dir), "configuration": "cached", "repetition": 1,
            "workload": "mine", "settings": host_settings(path),
            "vllm_executable": "/opt/v/bin/vllm"}


def request(path: Path) -> benchrun.BenchRequest:
    return benchrun.BenchRequest.from_settings(
        "h1", host_settings(path), configuration="cached", workload="mine", repetition=1,
        vllm_executable="/opt/v/bin/vllm")


def test_a_request_is_resolved_from_the_settings_by_the_workload_name(
        tmp_path: Path) -> None:
    path = prompts_file(tmp_path)
    req = request(path)
    assert (req.base_url, req.model, req.tokenizer) == ("http://127.0.0.1:8000", "m", "/opt/tok")
    assert (req.timeout, req.api_key, req.unit) == (600, False, "vllm-cached.service")
    plan = experiment.find_item(host_settings(path), "mine", 1).workload
    assert req.workload == plan and req.workload.seed is not None
    keyed = benchrun.BenchRequest.from_settings(
        "h1", host_settings(path, vllm_service_api_key="<redacted>",
                            prefixbench_repetitions=2),
        configuration="baseline", workload="mine", repetition=2, vllm_executable="v")
    assert keyed.api_key and keyed.unit == "vllm-baseline.service"
    assert keyed.workload.seed != req.workload.seed  # each repetition its own seed
    with pytest.raises(ValueError, match=r"no bench 'other' rep1 in this host's settings "
                                         r"\(workloads mine; repetitions 1-1\)"):
        benchrun.BenchRequest.from_settings("h1", host_settings(path),
                                            configuration="cached", workload="other",
                                            repetition=1, vllm_executable="v")
    with pytest.raises(ValueError, match="unknown configuration 'warm'"):
        benchrun.BenchRequest.from_settings("h1", host_settings(path),
                                            configuration="warm", workload="mine",
                                            repetition=1, vllm_executable="v")


def test_prepare_record_and_expected_of_a_custom_bench(tmp_path: Path) -> None:
    run_dir = tmp_path / "results" / "run1"
    write_tokenizer(run_dir / "tokenizer")
    req = request(prompts_file(tmp_path))
    planned = benchrun.planned_argv(req, 600)
    assert planned[planned.index("--num-prompts") + 1] == "7"
    assert planned[planned.index("--dataset-path") + 1] == "<remote tmp>/mine.jsonl"
    ready = benchrun.prepare_prompts(req, run_dir)
    assert ready.path == run_dir / "prompts" / "mine.jsonl" and ready.path.is_file()
    assert ready.request.workload.num_prompts == 7
    argv = ready.request.argv("/tmp/pb.x", 600, dataset_path="/tmp/pb.x/mine.jsonl")
    assert argv[:4] == ["timeout", "--kill-after=30", "600", "/opt/v/bin/vllm"]
    assert "--skip-chat-template" in argv
    record = benchrun.build_record(
        ready.request,
        metrics_before=(FIXTURES / "metrics_cached_high_overlap_before.txt").read_text(),
        metrics_after=(FIXTURES / "metrics_cached_high_overlap_after.txt").read_text(),
        bench_json=(FIXTURES / "cached_high_overlap.json").read_text(),
        started_at="s", ended_at="e", prepared=ready, run_dir=run_dir)
    assert record.prompts is not None
    assert record.prompts["sha256"] == ready.prepared.sha256
    assert record.prompts["num_prompts"] == 7 and record.prompts["chat_lines"] == 1
    e = record.expected
    assert e["tutorial_ratio"] is None and e["block_size"] == 128
    # 7 requests: six share 256 tokens (two blocks of 128), the first of them is cold.
    assert (e["hit_tokens"], e["requests"]) == (5 * 256, 7)
    assert e["predicted_ratio"] == e["block_aligned_ratio"] == pytest.approx(
        5 * 256 / (6 * 257 + 5))  # the chat line renders to 5 tokens
    assert record.workload["num_prompts"] == 7
    again = BenchmarkRecord.from_dict(json.loads(json.dumps(with_checksum(record.to_dict()))))
    assert again.prompts == record.prompts
    assert benchrun.summary(record)["expected_ratio"] == e["predicted_ratio"]


def test_custom_expected_without_tokenizer_or_block_size(tmp_path: Path) -> None:
    req = request(prompts_file(tmp_path))
    none = benchrun.custom_expected(req, block_size=None, capacity_blocks=None,
                                    prompts_file=None, tokenizer=None)
    assert none["predicted_ratio"] is None and "block size" in none["note"]
    none = benchrun.custom_expected(req, block_size=16, capacity_blocks=None,
                                    prompts_file=None, tokenizer=None)
    assert none["predicted_ratio"] is None and "no tokenizer" in none["note"]
    # The server's limits, for the report's what-if at the workload's concurrency.
    assert (none["max_num_seqs"], none["max_num_batched_tokens"]) == (
        req.max_num_seqs, req.max_num_batched_tokens)


def test_old_records_without_prompts_read_and_write_unchanged() -> None:
    data = {"schema_version": 1, "kind": "result", "host": "h", "configuration": "cached",
            "workload_name": "w", "repetition": 1, "seed": 1, "bundle_version": "0",
            "started_at": "s", "ended_at": "e",
            "bench": json.loads((FIXTURES / "cached_high_overlap.json").read_text())}
    record = BenchmarkRecord.from_dict(data, accept_unchecksummed=True)  # an older version's
    assert record.prompts is None and "prompts" not in record.to_dict()


# -- the action plugin, host side mocked ------------------------------------------------------

def _plugin() -> Any:
    spec = importlib.util.spec_from_file_location(
        "prefixbench_bench_action", ROOT / "plugins" / "action" / "prefixbench_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, completed: int = 7,
                restart: bool = False, extra_args: dict[str, Any] | None = None,
                fail_step: str = "", probe: dict[str, Any] | None = None,
                host_unhealthy: bool = False
                ) -> tuple[dict[str, Any], list[tuple[str, Any]], list[tuple[str, str]], Path]:
    """The bench action against a test double of the host: the recorded fixture's bench
    and metrics, adjusted to the 7 prompts of the file; ``restart`` makes systemd report
    a new invocation of the unit after the bench."""
    module = _plugin()
    run_dir = tmp_path / "results" / "run1"
    write_tokenizer(run_dir / "tokenizer")
    task_args = {**args(prompts_file(tmp_path), run_dir), **(extra_args or {})}
    calls: list[tuple[str, dict[str, Any]]] = []
    bench_data = json.loads((FIXTURES / "cached_high_overlap.json").read_text())
    bench_data["completed"] = completed
    bench = json.dumps(bench_data)
    after = (FIXTURES / "metrics_cached_high_overlap_after.txt").read_text().replace(
        'finished_reason="length",model_name="tiny-model"} 50.0',
        'finished_reason="length",model_name="tiny-model"} 7.0')
    restarted = {"NRestarts": "1", "InvocationID": "bbb", "MainPID": "11"}
    same = {"NRestarts": "0", "InvocationID": "aaa", "MainPID": "10"}

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any
                ) -> dict[str, Any]:
        """A test double of the host: library/prefixbench_bench_host.py's answer."""
        calls.append((module_name, module_args))
        if (module_name == "prefixbench_bench_host" and host_unhealthy
                and module_args.get("health_url")):
            return {"step": "unhealthy", "error": "GET /health: connection refused"}
        if module_name == "prefixbench_bench_host" and fail_step:
            return {"step": fail_step, "error": "vllm bench serve exited 1", "rc": 1,
                    "stderr_tail": "Traceback: boom", "journal": "engine died",
                    "workdir": "/tmp/prefixbench.abc"}
        if module_name == "prefixbench_bench_host":
            return {"step": "done", "error": "", "rc": 0, "stdout_tail": "ok",
                    "stderr_tail": "", "journal": "", "workdir": "/tmp/prefixbench.abc",
                    "service_before": same, "service_after": restarted if restart else same,
                    "metrics_before": (FIXTURES / "metrics_cached_high_overlap_before.txt"
                                       ).read_text(),
                    "metrics_after": after, "bench_json": bench}
        if module_name == "ansible.builtin.command":
            return {"rc": 0, "stdout": "journal"}
        if module_name == "prefixbench_probe":
            return probe or {}
        return {}

    action = module.ActionModule.__new__(module.ActionModule)
    action._task = MagicMock(args=task_args, async_val=0)
    action._play_context = MagicMock(check_mode=False)
    action._connection = MagicMock()
    action._connection._shell.tmpdir = None
    action._connection._shell.join_path = lambda *p: "/".join(p)
    transferred: list[tuple[str, str]] = []
    monkeypatch.setattr(module.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action.validate_argument_spec = lambda argument_spec: (None, dict(task_args))
    action._execute_module = execute
    action._make_tmp_path = lambda: "/home/u/.ansible/tmp/ansible-tmp-1"
    action._transfer_file = lambda local, remote: transferred.append((local, remote))
    action._fixup_perms2 = lambda paths: None
    action._remove_tmp_path = lambda path: None
    return action.run(task_vars={"inventory_hostname": "h1"}), calls, transferred, run_dir


def test_plugin_prepares_transfers_and_runs_a_custom_workload(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, transferred, run_dir = _run_plugin(tmp_path, monkeypatch)
    assert result["status"] == "done", result
    assert transferred == [(str(run_dir / "prompts" / "mine.jsonl"),
                            "/home/u/.ansible/tmp/ansible-tmp-1/mine.jsonl")]
    assert [n for n, _ in calls] == ["prefixbench_bench_host"]  # one round trip
    host = calls[0][1]
    assert host["dataset_src"] == "/home/u/.ansible/tmp/ansible-tmp-1/mine.jsonl"
    assert host["dataset_name"] == "mine.jsonl" and host["unit"] == "vllm-cached.service"
    argv = host["argv"]
    assert argv[argv.index("--dataset-path") + 1] == "@@RESULT_DIR@@/mine.jsonl"
    assert argv[argv.index("--result-dir") + 1] == "@@RESULT_DIR@@"
    assert argv[argv.index("--num-prompts") + 1] == "7"
    # The record keeps the command as it ran, in the host's temp dir.
    assert result["argv"][result["argv"].index("--dataset-path") + 1] == (
        "/tmp/prefixbench.abc/mine.jsonl")
    saved = json.loads(Path(result["path"]).read_text())
    assert saved["prompts"]["num_prompts"] == 7
    assert saved["expected"]["predicted_ratio"] is not None


HEALTHY = {"http_status": 200, "active_state": "active", "n_restarts": 0, "journal": ["up"]}
ONE_BENCH = [{"name": "mine", "repetition": 1, "label": "1/1 mine rep1"}]


def test_one_task_runs_a_servers_benches_each_after_a_health_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, _, _ = _run_plugin(tmp_path, monkeypatch, probe=HEALTHY, extra_args={
        "workload": "", "benches": ONE_BENCH, "health_url": "http://127.0.0.1:8000/health",
        "preloaded_client": True})
    assert result["status"] == "done", result
    # The host step asks /health itself: one round trip per bench.
    assert [n for n, _ in calls] == ["prefixbench_bench_host"]
    assert calls[0][1]["health_url"] == "http://127.0.0.1:8000/health"
    assert [(b["label"], b["status"]) for b in result["benches"]] == [("1/1 mine rep1", "done")]
    # Through the preloaded client's launcher, which goes just before vllm.
    argv = calls[0][1]["argv"]
    vllm = argv.index("bench") - 1
    assert argv[vllm - 7:vllm] == list(client_launch.launcher(argv[vllm], "cached"))


def test_a_server_that_did_not_answer_is_waited_for_and_the_bench_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, _, run_dir = _run_plugin(
        tmp_path, monkeypatch, probe=HEALTHY, host_unhealthy=True, extra_args={
            "workload": "", "benches": ONE_BENCH,
            "health_url": "http://127.0.0.1:8000/health"})
    assert result["status"] == "done", result
    assert [n for n, _ in calls] == ["prefixbench_bench_host", "prefixbench_probe",
                                     "prefixbench_bench_host"]
    assert calls[2][1]["health_url"] == ""  # just seen healthy
    assert len(list((run_dir / "h1").rglob("rep1*.json"))) == 1


def test_a_server_not_healthy_before_a_bench_fails_the_task_before_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    down = {**HEALTHY, "http_status": None, "active_state": "failed", "journal": ["oom"]}
    result, calls, _, run_dir = _run_plugin(
        tmp_path, monkeypatch, probe=down, host_unhealthy=True, extra_args={
            "workload": "", "benches": ONE_BENCH,
            "health_url": "http://127.0.0.1:8000/health"})
    assert result["failed"] and "not healthy before 1/1 mine rep1: unit failed" in result["msg"]
    assert [n for n, _ in calls].count("prefixbench_bench_host") == 1
    assert not list((run_dir / "h1").rglob("rep1*.json"))  # nothing ran, nothing recorded


def test_plugin_fails_a_bench_whose_server_restarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _, _, _ = _run_plugin(tmp_path, monkeypatch, restart=True)
    assert result["status"] == "failed"
    assert result["msg"] == ("the server restarted during the bench (systemd NRestarts "
                             "0 -> 1, InvocationID aaa -> bbb, MainPID 10 -> 11)")


def test_plugin_keeps_an_invalid_record_as_a_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _, _, _ = _run_plugin(tmp_path, monkeypatch, completed=6)
    assert result["status"] == "failed"
    assert result["msg"] == ("invalid record: 6 of 7 requests completed; the server counted "
                             "7 finished requests (vllm:request_success), the bench 6")
    kept = json.loads(Path(result["path"]).read_text())
    assert kept["extra"]["record"]["bench"]["completed"] == 6


def test_plugin_records_a_failure_for_a_bad_prompts_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _plugin()
    run_dir = tmp_path / "results" / "run1"
    path = prompts_file(tmp_path)  # has a chat line but the run dir has no tokenizer
    task_args = args(path, run_dir)
    action = module.ActionModule.__new__(module.ActionModule)
    action._task = MagicMock(args=task_args, async_val=0)
    action._play_context = MagicMock(check_mode=False)
    action._connection = MagicMock()
    action._connection._shell.tmpdir = None
    monkeypatch.setattr(module.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action.validate_argument_spec = lambda argument_spec: (None, dict(task_args))
    action._execute_module = lambda module_name, module_args, task_vars: {"stdout": "j"}
    action._remove_tmp_path = lambda path: None
    result = action.run(task_vars={"inventory_hostname": "h1"})
    assert result["status"] == "failed" and "no tokenizer given" in result["msg"]
    assert Path(result["path"]).name == "rep1.failed.json"


def test_plugin_records_benches_whose_server_never_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _plugin()
    run_dir = tmp_path / "results" / "run1"
    task_args = {**args(prompts_file(tmp_path), run_dir),
                 "not_started": "vllm-cached.service did not become healthy in 7200 s"}
    calls: list[str] = []

    def execute(module_name: str, module_args: dict[str, Any], task_vars: Any
                ) -> dict[str, Any]:
        calls.append(module_name)
        return {"rc": 0, "stdout": "Dec 01 engine: RuntimeError: NEFF compile timed out"}

    action = module.ActionModule.__new__(module.ActionModule)
    action._task = MagicMock(args=task_args, async_val=0)
    action._play_context = MagicMock(check_mode=False)
    action._connection = MagicMock()
    monkeypatch.setattr(module.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action.validate_argument_spec = lambda argument_spec: (None, dict(task_args))
    action._execute_module = execute
    result = action.run(task_vars={"inventory_hostname": "h1"})
    assert result["status"] == "failed"
    assert calls == ["ansible.builtin.command"]  # the journal only: no bench was run
    kept = json.loads(Path(result["path"]).read_text())
    assert kept["error"] == ("not run: vllm-cached.service did not become healthy in "
                             "7200 s")
    assert "NEFF compile timed out" in kept["journal_tail"]


def test_a_caching_record_carries_the_expectation_from_the_served_tokens(
        tmp_path: Path) -> None:
    from tiny_tokenizer import write_tokenizer as write_tok  # noqa: PLC0415

    from prefixbench.bench import benchrun  # noqa: PLC0415
    from prefixbench.engines.workloads import Workload  # noqa: PLC0415
    from prefixbench.measure import metrics  # noqa: PLC0415

    run_dir = tmp_path / "run"
    write_tok(run_dir / "tokenizer", kind="bpe")
    w = Workload(name="hi", prefix_repetition_prefix_len=256,
                 prefix_repetition_suffix_len=128, prefix_repetition_num_prefixes=2,
                 prefix_repetition_output_len=4, num_prompts=8, max_concurrency=1, seed=3)
    config = metrics.extract_signals(
        (FIXTURES / "metrics_cached_high_overlap_after.txt").read_text()).cache_config
    assert config is not None and config.enable_prefix_caching
    got = benchrun.served_expected(w, run_dir, 128, config)
    assert 0 < got["served_ratio"] <= w.expected(128).ratio
    assert got["junction_lost_blocks"] >= 0 and "served_note" not in got
    assert benchrun.served_expected(w, None, 128, config) == {
        "served_note": "no tokenizer copy in the run directory"}


def test_plugin_stops_the_run_when_the_results_disk_is_full(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while the record is written: no partial file, one actionable line, and the
    flag bench.yml turns into a stop of the whole run."""
    from prefixbench.measure.layout import RunLayout  # noqa: PLC0415

    def full(self: RunLayout, record: Any) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunLayout, "write_result", full)
    result, _, _, run_dir = _run_plugin(tmp_path, monkeypatch)
    assert result["status"] == "unwritable" and result["results_unwritable"] is True
    assert not result.get("failed")
    assert result["msg"] == (
        f"results disk: cannot write {run_dir}/h1/cached/mine/rep1.json: No space left on "
        f"device; free space under {run_dir.parent} and rerun with the same run id (run1): "
        "records already written are intact")
    assert not list(run_dir.rglob("rep1*.json")) and not list(run_dir.rglob(".*.tmp"))


def test_plugin_does_not_start_a_bench_whose_record_could_not_be_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(  # type: ignore[attr-defined]
        10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    result, calls, _, run_dir = _run_plugin(tmp_path, monkeypatch)
    assert calls == []  # nothing ran on the host
    assert result["results_unwritable"] is True
    assert result["msg"].startswith(f"results disk full: 1 MiB free under {run_dir}, a bench "
                                    "needs 16 MiB for its record; free space there")


def test_plugin_sends_the_api_key_from_the_host_file_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyed = host_settings(prompts_file(tmp_path), vllm_service_api_key="<redacted>")
    result, calls, _, _ = _run_plugin(tmp_path, monkeypatch, extra_args={"settings": keyed})
    assert result["status"] == "done", result
    bench = [a["argv"] for m, a in calls if m == "prefixbench_bench_host"]
    assert len(bench) == 1 and bench[0][:2] == ["/bin/sh", "-c"]
    assert bench[0][3] == "/etc/vllm-prefixbench/vllm.env"
    # The record keeps the bench's own command, not the wrapper.
    assert result["argv"][0] != "/bin/sh"


def test_plugin_records_a_failed_host_step_with_the_journal_it_brought(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, calls, _, _ = _run_plugin(tmp_path, monkeypatch, fail_step="bench")
    assert result["status"] == "failed" and result["msg"] == "vllm bench serve exited 1"
    assert [n for n, _ in calls] == ["prefixbench_bench_host"]  # no second trip for the journal
    kept = json.loads(Path(result["path"]).read_text())
    assert (kept["returncode"], kept["stderr"], kept["journal_tail"]) == (
        1, "Traceback: boom", "engine died")
