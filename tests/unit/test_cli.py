"""The prefixbench command: arguments, dispatch, the live view's state machine, exit codes.

The live view is driven by event streams recorded from ansible-runner
(tests/fixtures/runner_events/) and by synthetic events; ``run`` itself is exercised with
a stand-in ansible_runner module that replays a recording (no playbook runs here).
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from prefixbench.frontend import cli, cli_run, runview
from prefixbench.frontend.runview import LiveView, exit_code

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "tests" / "fixtures" / "runner_events"


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return data


def replay(name: str) -> tuple[LiveView, list[str]]:
    view = LiveView()
    lines: list[str] = []
    for event in recording(name)["events"]:
        lines += view.feed(event)
    return view, lines


# -- arguments --------------------------------------------------------------------------


EXTRA_VARS = [
    "prefixbench_repetitions=3 other='two words'",
    '{"prefixbench_sweep_segment_sizes": [512, 1024], "q": "it\'s \\"quoted\\" $HOME"}',
    "{sizes: [512, 1024], flag: yes}",
    "@vars.yml",
]


def test_extra_vars_reach_ansible_playbook_exactly_as_its_own_e(tmp_path: Path) -> None:
    """The same -e inputs given to ansible-playbook directly, and through the command
    line prefixbench run hands ansible-runner (split as ansible-runner splits it), give
    the playbook identical variables."""
    import json as _json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import shlex  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    (tmp_path / "vars.yml").write_text("from_file: {a: [1, 2]}\nprefixbench_repetitions: 5\n")
    play = tmp_path / "show.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.copy:\n        dest: \"{{ out }}\"\n        mode: '0644'\n"
        "        content: \"{{ {'r': prefixbench_repetitions | default(none),"
        " 'o': other | default(none), 's': prefixbench_sweep_segment_sizes | default(none),"
        " 'q': q | default(none), 'z': sizes | default(none), 'f': flag | default(none),"
        " 'file': from_file | default(none)} | to_json }}\"\n")
    bindir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
           "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def seen(extra: list[str], name: str) -> dict[str, object]:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([str(bindir / "ansible-playbook"), "-i", "localhost,",
                               str(play), "-e", f"out={out}", *extra], cwd=tmp_path,
                              env=env, capture_output=True, text=True, check=False,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data: dict[str, object] = _json.loads(out.read_text())
        return data

    direct = seen([a for item in EXTRA_VARS for a in ("-e", item)], "direct")
    through = seen(shlex.split(cli_run.extra_vars_cmdline(EXTRA_VARS)), "through")
    assert through == direct
    assert direct["s"] == [512, 1024] and direct["o"] == "two words"
    assert direct["r"] == 5 and direct["file"] == {"a": [1, 2]}


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "inventories" / "sim").mkdir(parents=True)
    (project / "benchmark.yml").write_text("---\n")
    return project


def test_run_request(tmp_path: Path) -> None:
    project = _project(tmp_path)
    elsewhere = tmp_path / "cwd"
    (elsewhere / "mine").mkdir(parents=True)
    args = cli.build_parser().parse_args([
        "run", "-i", "inventories/sim", "-i", "mine", "--run-id", "nightly-1",
        "-e", "prefixbench_repetitions=3", "-l", "trn2", "--tags", "bench,report",
        "--project-dir", str(project)])
    req = cli_run.run_request(args, cwd=elsewhere)
    assert req.inventories == (str(project / "inventories/sim"), str(elsewhere / "mine"))
    assert req.extravars == {"prefixbench_run_id": "nightly-1"}
    assert req.extra_args == ("prefixbench_repetitions=3",)
    assert req.run_id == "nightly-1"
    kwargs = req.runner_kwargs("/tmp/pd")
    assert kwargs == {
        "private_data_dir": "/tmp/pd", "project_dir": str(project),
        "playbook": "benchmark.yml", "inventory": list(req.inventories),
        "extravars": req.extravars,
        "envvars": {"ANSIBLE_CONFIG": str(project / "ansible.cfg")},
        "quiet": True, "suppress_env_files": True, "limit": "trn2",
        "cmdline": "-e prefixbench_repetitions=3 --tags bench,report"}


@pytest.mark.parametrize(("argv", "message"), [
    (["-i", "nope"], "inventory 'nope' not found"),
    (["-i", "inventories/sim", "--playbook", "other.yml"], "no playbook other.yml"),
    (["-i", "inventories/sim", "--reference", "/nonexistent"], "not a directory"),
])
def test_run_usage_errors_exit_2(tmp_path: Path, argv: list[str], message: str) -> None:
    project = _project(tmp_path)
    err = io.StringIO()
    code = cli.main(["run", "--project-dir", str(project), *argv], err=err)
    assert code == 2
    assert message in err.getvalue()
    assert err.getvalue().count("\n") == 1


def test_argparse_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bogus"]) == 2
    assert cli.main(["run"]) == 2  # -i is required
    assert cli.main(["sim", "up", "3"]) == 2  # the simulated fleet is scripts/simfleet
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for code in ("0  success", "2  usage", "3  a confirmation verdict failed",
                 "4  regression", "5  run: the ansible run failed"):
        assert code in text


# -- dispatch ---------------------------------------------------------------------------


def test_report_and_compare_dispatch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[str, list[str]]] = []
    fake = types.ModuleType("prefixbench.report.cli")
    fake.report_main = lambda argv: calls.append(("report", argv)) or 3  # type: ignore[attr-defined]
    fake.compare_main = lambda argv: calls.append(("compare", argv)) or 4  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prefixbench.report.cli", fake)
    r1, r0 = str(tmp_path), str(tmp_path)
    assert cli.main(["report", r1, "--format", "json"]) == 3
    assert cli.main(["compare", r1, r0]) == 4
    assert calls == [("report", [r1, "--format", "json"]), ("compare", [r1, r0])]


def test_a_bad_run_directory_fails_before_the_report_is_imported(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "prefixbench.report.cli", None)  # import would fail
    for argv, bad in ((["compare", str(tmp_path), "results/nope"], "results/nope"),
                      (["compare", "--tolerances", "t.yml", "nope", str(tmp_path)], "nope"),
                      (["report", "--format", "json", "gone"], "gone")):
        err = io.StringIO()
        assert cli.main(argv, err=err) == 2
        assert err.getvalue() == (f"prefixbench {argv[0]}: error: {bad}: not a directory "
                                  f"(expected results/<run_id>)\n")


def test_the_options_that_take_a_value_are_the_parsers() -> None:
    from prefixbench.frontend.cli_shared import VALUE_OPTIONS  # noqa: PLC0415
    from prefixbench.report.cli import compare_parser, report_parser  # noqa: PLC0415

    taking = {opt for parser in (report_parser(), compare_parser())
              for action in parser._actions if action.nargs != 0
              for opt in action.option_strings}
    assert taking == VALUE_OPTIONS


def test_report_module_missing_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "prefixbench.report.cli", None)  # import fails
    err = io.StringIO()
    assert cli.main(["compare", str(tmp_path), str(tmp_path)], err=err) == 2
    assert err.getvalue().startswith("prefixbench compare: unavailable: prefixbench.report.cli")
    assert err.getvalue().count("\n") == 1


# -- the live view ----------------------------------------------------------------------


@pytest.mark.parametrize(("play", "phase"), [
    ("Bench | run the tutorial's workloads", "Bench"), ("Preflight | check", "Preflight"),
    ("no prefix here", "no prefix here"), ("", "")])
def test_phase_of(play: str, phase: str) -> None:
    assert runview.phase_of(play) == phase


@pytest.mark.parametrize(("text", "expected"), [
    ("Bench cached high_overlap 2/3", (2, 3)), ("workload 1 / 4 (no_overlap)", (1, 4)),
    ("Bench 4/3 nonsense", None), ("date 2026/11/29", None), ("plain", None),
    ("0/3 then 3/3", (3, 3))])
def test_workload_of(text: str, expected: tuple[int, int] | None) -> None:
    assert runview.workload_of(text) == expected


def test_recorded_failed_and_unreachable_run() -> None:
    view, lines = replay("failed_and_unreachable")
    text = "\n".join(lines)
    assert "== Bench | run workloads" in text
    assert "] h1: waiting for vllm-cached.service: 0m01s, activating, no answer" in text
    assert "h1: healthy after 00:01: vllm-cached.service healthy: HTTP 200" in text
    assert "h2: workload 1/3: Bench cached high_overlap 1/3" in text
    assert "h1: workload 3/3 done: sustained 3/3" in text
    assert "h2: FAILED in Bench at 'Fail on h2': boom" in text
    assert "ignored" not in text  # an ignored failure is not a failure
    assert "h3: UNREACHABLE in Report at 'Ping'" in text
    assert view.run_dir.endswith("/results/rec1")
    assert view.run_id == "rec1"
    assert view.finished
    assert view.failed_hosts == ["h2"]
    assert view.unreachable == ["h3"]
    assert view.hosts["h1"].status == "done"
    assert view.hosts["h1"].workload == (3, 3)
    assert view.hosts["h2"].status == "failed"
    assert view.hosts["h3"].phase == "Report"
    assert all(row in text for row in view.host_table())
    assert "Bench, FAILED at 'Fail on h2': boom" in view.host_table()[1]
    rec = recording("failed_and_unreachable")
    assert exit_code(view, runner_status=rec["status"], rc=rec["rc"], outcome=None,
                     regressed=False) == 5


def test_recorded_run_with_a_failed_verdict() -> None:
    view, _ = replay("verdict_failed")
    rec = recording("verdict_failed")
    summary = {"status": "FAIL", "hosts": [{"host": "h2", "status": "FAIL", "verdicts": [
        {"name": "lower_ttft", "status": "FAIL", "detail": "not lower"}]}]}
    lines, failed = runview.summary_lines(summary)
    assert failed
    assert lines[0] == "overall: FAIL"
    assert any(line.startswith("    FAIL lower_ttft:") for line in lines)
    assert exit_code(view, runner_status=rec["status"], rc=rec["rc"], outcome=3 if failed else 0,
                     regressed=False) == 3
    assert exit_code(view, runner_status=rec["status"], rc=rec["rc"], outcome=0,
                     regressed=True) == 4
    assert exit_code(view, runner_status=rec["status"], rc=rec["rc"], outcome=0,
                     regressed=False) == 0
    assert exit_code(view, runner_status="timeout", rc=254, outcome=0,
                     regressed=False) == 5


T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)


def ev(kind: str, t: int = 0, **data: Any) -> dict[str, Any]:
    created = (T0 + timedelta(seconds=t)).isoformat()
    out: dict[str, Any] = {"event": kind, "created": created, "event_data": data}
    if "stdout" in data:
        out["stdout"] = data.pop("stdout")
    return out


def test_synthetic_wait_progress_and_elapsed_clock() -> None:
    view = LiveView()
    assert view.feed(ev("playbook_on_start")) == []
    assert view.feed(ev("playbook_on_play_start", 1, play="Bench | run")) == [
        "[00:01] == Bench | run"]
    assert view.feed(ev("runner_on_start", 2, play="Bench | run", host="a",
                        task="Start the server of configuration cached")) == [
        "[00:02] a: Bench", "[00:02] a: Start the server of configuration cached"]
    line = ("a: waiting for vllm-cached.service: 1m30s, activating, no answer; "
            "last log: Compiling")
    assert view.feed(ev("verbose", 95, play="Bench | run", stdout=f"\x1b[0;32m{line}\x1b[0m")
                     ) == [f"[01:35] {line}"]
    assert view.hosts["a"].wait == line
    assert view.feed(ev("verbose", 96, stdout="some other chatter")) == []
    assert view.feed(ev("verbose", 97, stdout="[WARNING]: something")) == [
        "[01:37] [WARNING]: something"]
    assert view.feed(ev("runner_on_ok", 3700, play="Bench | run", host="a",
                        resolved_action="prefixbench_wait_healthy",
                        res={"elapsed": 3605.2, "msg": "HTTP 200"})) == [
        "[1:01:40] a: healthy after 1:00:05: HTTP 200"]
    assert view.hosts["a"].wait == ""
    # One task runs all of a server's benches: their own lines carry the progress.
    assert view.feed(ev("verbose", 3701, stdout="a: cached 2/3 no_overlap rep1: running "
                                                "vllm bench serve")) == [
        "[1:01:41] a: workload 2/3: cached no_overlap rep1"]
    assert view.hosts["a"].workload == (2, 3)
    done = "a cached no_overlap rep1: median TTFT 40.1 ms, p99 90.0 ms, 400.0 tok/s"
    assert view.feed(ev("verbose", 3730, stdout=done)) == [f"[1:02:10] {done}"]


def test_in_the_hosts_play_each_host_has_its_own_phase_from_its_roles() -> None:
    view = LiveView()
    play = "Hosts | provision, deploy and bench each host at its own pace"
    view.feed(ev("playbook_on_start"))
    view.feed(ev("playbook_on_play_start", 1, play=play))
    assert view.feed(ev("runner_on_start", 2, play=play, host="a", role="neuron_sdk",
                        task="Install the Neuron packages")) == ["[00:02] a: Provision"]
    assert view.feed(ev("runner_on_start", 3, play=play, host="b", role="vllm_service",
                        task="Template the unit")) == ["[00:03] b: Deploy"]
    assert view.feed(ev("runner_on_start", 4, play=play, host="b", role="prefix_bench",
                        task="Start the server of configuration baseline")) == [
        "[00:04] b: Bench", "[00:04] b: Start the server of configuration baseline"]
    # The bench phase's own use of a provision role's tasks is not a step back.
    view.feed(ev("runner_on_start", 5, play=play, host="b", role="vllm_env",
                 task="Choose the virtualenv"))
    assert (view.hosts["a"].phase, view.hosts["b"].phase) == ("Provision", "Bench")


def test_failure_only_in_report_with_failed_verdicts_is_3() -> None:
    view = LiveView()
    view.feed(ev("runner_on_failed", 1, play="Report | write the report", host="localhost",
                 task="Refuse failed verdicts", res={"msg": "2 verdicts failed"}))
    view.feed(ev("playbook_on_stats", 2, failures={"localhost": 1}, dark={}))
    assert view.failures == [("localhost", "Report")]
    assert exit_code(view, runner_status="failed", rc=2, outcome=3,
                     regressed=False) == 3
    # ... but without a summary to explain it, the run failed.
    assert exit_code(view, runner_status="failed", rc=2, outcome=None,
                     regressed=False) == 5


def test_rescued_failure_does_not_count() -> None:
    view = LiveView()
    view.feed(ev("runner_on_failed", 1, play="Provision | install", host="a", task="Try",
                 res={"msg": "x"}))
    assert view.failed_hosts == ["a"]
    view.feed(ev("playbook_on_stats", 2, failures={}, rescued={"a": 1}))
    assert view.failed_hosts == []
    assert view.hosts["a"].status == "done"
    assert exit_code(view, runner_status="successful", rc=0, outcome=0,
                     regressed=False) == 0


def test_unreachable_in_recap_only_is_5() -> None:
    view = LiveView()
    view.feed(ev("playbook_on_stats", 1, dark={"b": 1}, failures={}))
    assert view.unreachable == ["b"]
    assert exit_code(view, runner_status="failed", rc=4, outcome=0,
                     regressed=False) == 5


def test_summary_lines_without_failures() -> None:
    lines, failed = runview.summary_lines({"status": "PASS", "hosts": [
        {"host": "a", "status": "PASS", "verdicts": [{"name": "v1", "status": "PASS"}]}]})
    assert not failed
    assert lines == ["overall: PASS", "  a: PASS (v1=PASS)"]
    assert runview.regression_lines({"regressions": []}) == []
    assert runview.regression_lines({"regressions": ["a/ttft"], "reference_run_id": "r0"}) == [
        "1 regression(s) against r0: a/ttft"]



def test_a_comparison_with_missing_data_still_reports_its_regressions() -> None:
    from prefixbench.frontend.cli_run import compare_regressed  # noqa: PLC0415

    assert compare_regressed(4, None)
    assert compare_regressed(7, {"regressions": ["fleet:cached/x/median_ttft_ms"]})
    assert not compare_regressed(7, {"regressions": []})
    assert not compare_regressed(0, None) and not compare_regressed(2, None)

# -- run, with a stand-in ansible_runner ------------------------------------------------


def fake_runner(name: str, summary: dict[str, Any] | None, seen: dict[str, Any]) -> Any:
    rec = recording(name)

    def run(**kwargs: Any) -> Any:
        seen.update(kwargs)
        run_dir = Path(kwargs["project_dir"]) / "results" / "rec"
        for recorded in rec["events"]:
            data = recorded["event_data"]
            res = data.get("res") or {}
            event = recorded
            if str(data.get("resolved_action", "")).endswith("prefixbench_run") and \
                    res.get("run_dir"):
                # The run directory of the replay, with the summary the report wrote.
                run_dir.mkdir(parents=True, exist_ok=True)
                if summary is not None:
                    (run_dir / "summary.json").write_text(json.dumps(summary))
                event = {**recorded, "event_data": {**data, "res": {**res,
                                                                    "run_dir": str(run_dir)}}}
            kwargs["event_handler"](event)
        return types.SimpleNamespace(status=rec["status"], rc=rec["rc"])

    module = types.ModuleType("ansible_runner")
    module.run = run  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize(("name", "summary", "expected"), [
    ("verdict_failed", {"status": "FAIL", "hosts": [{"host": "h2", "status": "FAIL",
                        "verdicts": [{"name": "v", "status": "FAIL", "detail": "d"}]}]}, 3),
    ("verdict_failed", {"status": "PASS", "hosts": []}, 0),
    ("verdict_failed", None, 0),
    ("failed_and_unreachable", None, 5),
])
def test_run_end_to_end_with_recorded_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        summary: dict[str, Any] | None, expected: int) -> None:
    project = _project(tmp_path)
    seen: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "ansible_runner", fake_runner(name, summary, seen))
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    code = cli.main(["run", "-i", "inventories/sim", "--project-dir", str(project)], out=out)
    text = out.getvalue()
    assert code == expected, text
    assert seen["playbook"] == "benchmark.yml"
    assert seen["inventory"] == [str(project / "inventories/sim")]
    assert "== Bench | run workloads" in text
    assert text.rstrip().splitlines()[-1].split("; ")[-1].startswith(f"exit {expected} (")
    if summary is not None:
        assert "== verdicts (summary.json)" in text
    else:
        assert "no summary.json written" in text
    if expected == 0:
        assert not Path(seen["private_data_dir"]).exists()
    else:
        assert "ansible output kept in" in text


def test_ctrl_c_ends_the_playbook_then_stops_the_servers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT during the run: ansible-runner is told to cancel (its
    cancel_callback), then playbooks/stop.yml runs on the same hosts, exit 130."""
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN under nohup or a background job
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    project = _project(tmp_path)
    calls: list[dict[str, Any]] = []

    def run(**kwargs: Any) -> Any:
        calls.append(kwargs)
        if len(calls) == 1:
            kwargs["event_handler"]({"event": "playbook_on_start", "event_data": {}})
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl+C
            assert kwargs["cancel_callback"]() is True
            return types.SimpleNamespace(status="canceled", rc=254)
        return types.SimpleNamespace(status="successful", rc=0)

    module = types.ModuleType("ansible_runner")
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ansible_runner", module)
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", "-i", "inventories/sim", "--project-dir", str(project),
                     "--run-id", "nightly-1", "--limit", "trn2-sim-1",
                     "-e", "a=1"], out=out, err=err)
    assert code == 130, err.getvalue()
    assert [c["playbook"] for c in calls] == ["benchmark.yml", "playbooks/stop.yml"]
    stop = calls[1]
    assert (stop["inventory"], stop["limit"], stop["cmdline"]) == (
        calls[0]["inventory"], "trn2-sim-1", calls[0]["cmdline"])
    assert "--tags" not in stop["cmdline"]
    lines = err.getvalue().splitlines()
    assert lines[-2] == "prefixbench: servers stopped on every reachable host"
    assert lines[-1].startswith("prefixbench: nothing measured is lost; resume with: "
                                "prefixbench run --run-id nightly-1 (ansible output in ")
    # The handler is gone afterwards: Ctrl+C outside a run is a KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, before)
