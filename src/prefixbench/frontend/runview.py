"""The live view of ``prefixbench run``: ansible-runner events in, progress lines out.

Pure: :class:`LiveView` takes the event dicts ansible-runner hands its ``event_handler``
(``playbook_on_play_start``, ``runner_on_start``, ``runner_on_failed``, ``verbose``,
``playbook_on_stats``...) and returns the lines to print. It tracks per host the phase
(the play-name prefix before ``" |"``: Preflight, Run, Provision, Deploy, Bench, Report),
the current task, the workload ``k/n`` when a task name or loop label carries one, the
latest health-wait line (``<host>: waiting for <unit>: 1m30s, ...`` printed by the
prefixbench_wait_healthy action through Display), failures and unreachable hosts. Then
:func:`summary_lines` reads the report's ``summary.json`` and :func:`exit_code` turns it
all into the command's exit code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

__all__ = [
    "EXIT_ANSIBLE",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_INCOMPLETE",
    "EXIT_INCONCLUSIVE",
    "EXIT_INTERRUPTED",
    "EXIT_MEANINGS",
    "EXIT_NOTHING_JUDGED",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "EXIT_USAGE",
    "HostState",
    "LiveView",
    "exit_code",
    "exit_line",
    "phase_of",
    "regression_lines",
    "summary_lines",
    "workload_of",
]

EXIT_OK: Final = 0
#: Another failure of the command itself (the simulated fleet's errors, an internal error).
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_FAILED: Final = 3
EXIT_REGRESSION: Final = 4
EXIT_ANSIBLE: Final = 5
EXIT_INCONCLUSIVE: Final = 6
EXIT_INCOMPLETE: Final = 7
#: Records or not, no criterion could be decided: every verdict NOT_RUN. A gate never
#: passes on nothing judged.
EXIT_NOTHING_JUDGED: Final = 8
EXIT_INTERRUPTED: Final = 130

#: What each exit code says, as the printed overall names it (docs/reading-the-report.md
#: "Exit codes" has the same rows; tests/unit/test_exit_codes.py walks them).
EXIT_MEANINGS: Final[Mapping[int, str]] = {
    EXIT_OK: "every judged verdict passed",
    EXIT_ERROR: "an error of the command itself",
    EXIT_USAGE: "usage or input error",
    EXIT_FAILED: "a verdict failed",
    EXIT_REGRESSION: "a metric regressed past its tolerance",
    EXIT_ANSIBLE: "the Ansible run (or the S3 upload) failed",
    EXIT_INCONCLUSIVE: "a verdict is INCONCLUSIVE",
    EXIT_INCOMPLETE: "the run is incomplete: data missing",
    EXIT_NOTHING_JUDGED: "nothing judged: no criterion could be decided",
    EXIT_INTERRUPTED: "interrupted",
}

#: Phases in the order a run goes through them (play names start with ``<Phase> |``).
PHASES: Final = ("Preflight", "Run", "Provision", "Deploy", "Bench", "Report")
#: The play in which each host provisions, deploys and benches at its own pace
#: (playbooks/phases/hosts.yml): there a host's phase is its task's role's.
HOSTS_PLAY: Final = "Hosts"
ROLE_PHASES: Final = {"neuron_sdk": "Provision", "vllm_env": "Provision",
                      "model_cache": "Provision", "vllm_service": "Deploy",
                      "prefix_bench": "Bench"}
#: The phase whose failures may be the report refusing failed verdicts.
REPORT_PHASE: Final = "Report"

_WAIT = re.compile(r"^(?P<host>\S+): waiting for (?P<unit>\S+): (?P<elapsed>\d+m\d{2}s)\b")
#: The bench action's lines: one as each bench of a server starts, one as its result is in.
_BENCH_START = re.compile(r"^(?P<host>\S+): (?P<configuration>baseline|cached) "
                          r"(?P<k>\d+)/(?P<n>\d+) (?P<bench>.+): running vllm bench serve$")
_BENCH_DONE = re.compile(r"^(?P<host>\S+) (?:baseline|cached) \S+ rep\d+: median TTFT ")
_WORKLOAD = re.compile(r"(?<![\d/])(\d{1,4})\s*/\s*(\d{1,4})(?![\d/])")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MAX_MSG = 240


def phase_of(play: str) -> str:
    """``"Bench | run workloads"`` -> ``"Bench"``; a play without the prefix -> its name."""
    head, sep, _ = play.partition("|")
    return head.strip() if sep else play.strip()


def _hosts_phase(current: str, role: str) -> str:
    """A host's phase in the hosts play: its task's role's, never going back (the bench
    phase picks the vLLM virtualenv with a provision role's tasks)."""
    steps = ("Provision", "Deploy", "Bench")
    now = current if current in steps else steps[0]
    told = ROLE_PHASES.get(role, now)
    return told if steps.index(told) > steps.index(now) else now


def workload_of(text: str) -> tuple[int, int] | None:
    """The first ``k/n`` in a task name or loop label with ``1 <= k <= n``."""
    for match in _WORKLOAD.finditer(text):
        k, n = int(match.group(1)), int(match.group(2))
        if 1 <= k <= n:
            return (k, n)
    return None


def _clean(text: Any) -> str:
    return _ANSI.sub("", str(text)).replace("\r", "")


def _short(text: Any) -> str:
    line = " ".join(_clean(text).split())
    return line if len(line) <= _MAX_MSG else line[:_MAX_MSG - 3] + "..."


def _clock(seconds: float) -> str:
    minutes, secs = divmod(max(int(seconds), 0), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


@dataclass
class HostState:
    """What one host is doing, as far as the events tell."""

    phase: str = ""
    task: str = ""
    status: str = "running"  # running | failed | unreachable | done
    workload: tuple[int, int] | None = None
    wait: str = ""
    problem: str = ""

    def describe(self) -> str:
        parts = [self.phase or "-"]
        if self.status in ("failed", "unreachable"):
            parts.append(f"{self.status.upper()} at {self.task!r}: {self.problem}")
        else:
            if self.workload:
                parts.append(f"workload {self.workload[0]}/{self.workload[1]}")
            parts.append(self.status)
        return ", ".join(parts)


@dataclass
class LiveView:
    """Feed it runner events; it returns the lines to show and keeps the state."""

    hosts: dict[str, HostState] = field(default_factory=dict)
    play: str = ""
    phase: str = ""
    run_dir: str = ""
    run_id: str = ""
    failures: list[tuple[str, str]] = field(default_factory=list)  # (host, phase)
    unreachable: list[str] = field(default_factory=list)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    finished: bool = False
    _t0: datetime | None = None
    _now: float = 0.0

    def _stamp(self, event: Mapping[str, Any]) -> str:
        created = event.get("created")
        if isinstance(created, str):
            try:
                when = datetime.fromisoformat(created)
            except ValueError:
                when = None
            if when is not None:
                if self._t0 is None:
                    self._t0 = when
                self._now = (when - self._t0).total_seconds()
        return f"[{_clock(self._now)}]"

    def _host(self, name: str) -> HostState:
        return self.hosts.setdefault(name, HostState())

    def feed(self, event: Mapping[str, Any]) -> list[str]:
        """Update the state from one event; the lines (possibly none) to print for it."""
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        stamp = self._stamp(event)
        handler = {
            "playbook_on_play_start": self._on_play,
            "runner_on_start": self._on_task_start,
            "runner_on_ok": self._on_ok,
            "runner_item_on_ok": self._on_item,
            "runner_on_failed": self._on_failed,
            "runner_on_unreachable": self._on_unreachable,
            "verbose": self._on_verbose,
            "playbook_on_stats": self._on_stats,
        }.get(kind)
        if handler is None:
            return []
        return [f"{stamp} {line}" for line in handler(event, data)]

    def _on_play(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        self.play = str(data.get("play") or data.get("name") or "")
        self.phase = phase_of(self.play)
        return [f"== {self.play}"]

    def _enter(self, host: str, data: Mapping[str, Any]) -> tuple[HostState, list[str]]:
        state = self._host(host)
        lines: list[str] = []
        phase = phase_of(str(data.get("play", ""))) or self.phase
        if phase == HOSTS_PLAY:
            phase = _hosts_phase(state.phase, str(data.get("role") or ""))
        if phase != state.phase:
            state.phase = phase
            state.wait = ""
            if state.status == "done":
                state.status = "running"
            lines.append(f"{host}: {phase}")
        return state, lines

    def _on_task_start(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host", ""))
        if not host:
            return []
        state, lines = self._enter(host, data)
        task = str(data.get("task", ""))
        changed = task != state.task
        state.task = task
        workload = workload_of(task)
        if workload and workload != state.workload:
            state.workload = workload
            lines.append(f"{host}: workload {workload[0]}/{workload[1]}: {task}")
        elif changed and state.phase == "Bench":
            lines.append(f"{host}: {task}")
        return lines

    def _on_ok(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host", ""))
        res: Mapping[str, Any] = data.get("res") or {}
        action = str(data.get("resolved_action") or data.get("task_action") or "")
        lines: list[str] = []
        if (action.endswith("prefixbench_run") and res.get("run_dir")
                and str(res["run_dir"]) != self.run_dir):
            self.run_dir = str(res["run_dir"])
            self.run_id = str(res.get("run_id") or self.run_id)
            lines.append(f"run {self.run_id or '?'}: {self.run_dir}")
        if action.endswith("prefixbench_wait_healthy") and host and not res.get("skipped"):
            state = self._host(host)
            state.wait = ""
            elapsed = res.get("elapsed")
            after = f" after {_clock(float(elapsed))}" if isinstance(elapsed, int | float) else ""
            lines.append(f"{host}: healthy{after}: {_short(res.get('msg', ''))}")
        return lines

    def _on_item(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host", ""))
        res: Mapping[str, Any] = data.get("res") or {}
        label = res.get("_ansible_item_label", res.get("item", ""))
        workload = workload_of(str(label)) if isinstance(label, str | int) else None
        if not host or not workload:
            return []
        state = self._host(host)
        if workload == state.workload:
            return []
        state.workload = workload
        return [f"{host}: workload {workload[0]}/{workload[1]} done: {_short(label)}"]

    def _on_failed(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host", ""))
        if data.get("ignore_errors"):
            return []
        state, lines = self._enter(host, data)
        res: Mapping[str, Any] = data.get("res") or {}
        state.status = "failed"
        state.task = str(data.get("task", ""))
        state.problem = _short(res.get("msg") or res.get("stderr") or "failed")
        self.failures.append((host, state.phase))
        lines.append(f"{host}: FAILED in {state.phase or '?'} at {state.task!r}: "
                     f"{state.problem}")
        return lines

    def _on_unreachable(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        host = str(data.get("host", ""))
        state, lines = self._enter(host, data)
        res: Mapping[str, Any] = data.get("res") or {}
        state.status = "unreachable"
        state.task = str(data.get("task", ""))
        state.problem = _short(res.get("msg") or "unreachable")
        if host not in self.unreachable:
            self.unreachable.append(host)
        lines.append(f"{host}: UNREACHABLE in {state.phase or '?'} at {state.task!r}: "
                     f"{state.problem}")
        return lines

    def _on_verbose(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        lines: list[str] = []
        for raw in _clean(event.get("stdout", "")).splitlines():
            line = raw.strip()
            match = _WAIT.match(line)
            started = _BENCH_START.match(line)
            if match:
                self._host(match.group("host")).wait = line
                lines.append(line)
            elif started:
                state = self._host(started.group("host"))
                state.workload = (int(started.group("k")), int(started.group("n")))
                lines.append(f"{started.group('host')}: workload "
                             f"{started.group('k')}/{started.group('n')}: "
                             f"{started.group('configuration')} {started.group('bench')}")
            elif _BENCH_DONE.match(line) or line.startswith(("[ERROR]", "[WARNING]", "ERROR!")):
                lines.append(_short(line))
        return lines

    def _on_stats(self, event: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
        self.finished = True
        for key in ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored"):
            value = data.get(key)
            if isinstance(value, Mapping):
                self.stats[key] = {str(h): int(n) for h, n in value.items()}
        failed = self.stats.get("failures", {})
        dark = self.stats.get("dark", {})
        for host, state in self.hosts.items():
            if state.status == "failed" and not failed.get(host):
                state.status = "done"  # rescued: the block recovered
            elif state.status == "running":
                state.status = "done"
        for host in dark:
            if host not in self.unreachable:
                self.unreachable.append(host)
        return ["== finished", *self.host_table()]

    @property
    def failed_hosts(self) -> list[str]:
        """Hosts with a failed task that no rescue recovered (the recap's, once it is in)."""
        if self.finished:
            return sorted(h for h, n in self.stats.get("failures", {}).items() if n)
        return sorted(h for h, s in self.hosts.items() if s.status == "failed")

    def host_table(self) -> list[str]:
        width = max((len(h) for h in self.hosts), default=0)
        return [f"  {h.ljust(width)}  {s.describe()}" for h, s in sorted(self.hosts.items())]


def summary_lines(summary: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The verdicts of ``summary.json`` (one line per host) and whether any failed."""
    lines: list[str] = []
    failed = False
    # A sweep's points, named by their dial: kv<blocks> or seg<size>.
    prefix, field_name = {"capacity_sweep": ("kv", "kv_blocks"),
                          "sweep": ("seg", "segment_size")}.get(str(summary.get("kind")),
                                                                ("", ""))
    for point in (summary.get("points") or []) if prefix else []:
        if not isinstance(point, Mapping):
            continue
        bad = [str(v) for v in point.get("failed_verdicts") or []]
        failed = failed or bool(bad)
        lines.append(f"  {prefix}{point.get(field_name)}: {point.get('status')}"
                     + (f" (FAIL {', '.join(bad)})" if bad else ""))
    if summary.get("kind") == "sweep":
        best = summary.get("best")
        if isinstance(best, Mapping):
            lines.append(f"  best segment size: {best.get('segment_size')}")
    for host in summary.get("hosts") or []:
        if not isinstance(host, Mapping):
            continue
        verdicts = [v for v in host.get("verdicts") or [] if isinstance(v, Mapping)]
        failed = failed or any(v.get("status") == "FAIL" for v in verdicts)
        listed = " ".join(f"{v.get('name')}={v.get('status')}" for v in verdicts)
        if "benchmarks" in host and not host.get("benchmarks"):
            lines.append(f"  {host.get('host')}: no data")
            continue
        lines.append(f"  {host.get('host')}: {host.get('status')} ({listed})")
        lines += [f"    FAIL {v.get('name')}: {_short(v.get('detail', ''))}"
                  for v in verdicts if v.get("status") == "FAIL"]
    lines += [f"  next: {step}" for step in summary.get("next_steps") or []]
    failed = failed or summary.get("status") == "FAIL"
    lines.insert(0, f"overall: {summary.get('status', 'unknown')}")
    return lines, failed


def regression_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The regressions listed in ``comparison.json`` (empty when there are none)."""
    regressions = [str(r) for r in comparison.get("regressions") or []]
    if not regressions:
        return []
    return [f"{len(regressions)} regression(s) against "
            f"{comparison.get('reference_run_id', '?')}: {', '.join(regressions)}"]


def outcome_code(status: str, failures: int) -> int:
    """The exit code a run's summary calls for: a failed verdict first, then missing
    results (failed benches), then an inconclusive verdict, then nothing judged (every
    verdict NOT_RUN, or no status at all): only PASS exits 0."""
    if status == "FAIL":
        return EXIT_FAILED
    if failures:
        return EXIT_INCOMPLETE
    if status == "INCONCLUSIVE":
        return EXIT_INCONCLUSIVE
    if status == "PASS":
        return EXIT_OK
    return EXIT_NOTHING_JUDGED


def exit_line(code: int) -> str:
    """``exit <code> (<what it means>)``: the printed overall names the code it exits
    with."""
    return f"exit {code} ({EXIT_MEANINGS.get(code, 'unknown')})"


def summary_outcome(summary: Mapping[str, Any]) -> int:
    """The exit code a ``summary.json`` calls for (:func:`outcome_code`): a run's, or a
    sweep's over its points (the same status and failures keys)."""
    return outcome_code(str(summary.get("status", "")), len(summary.get("failures") or []))


def exit_code(view: LiveView, *, runner_status: str, rc: int | None,
              outcome: int | None, regressed: bool) -> int:
    """The exit code of ``prefixbench run``.

    5 when a host was unreachable, a task failed outside the Report phase, or
    ansible-playbook failed without a summary to explain it (or timed out / was
    canceled); else the summary's outcome when it is 3 (a verdict failed) or 7 (benches
    without a result); else 4 on a regression; else 6 when a verdict is inconclusive,
    8 when nothing was judged; else 0. The Report phase's own gate (prefixbench_fail_on)
    failing is explained by the summary, so it does not count as an ansible failure.
    """
    ansible_ok = runner_status == "successful" and rc == 0
    if view.unreachable or runner_status in ("timeout", "canceled"):
        return EXIT_ANSIBLE
    still_failed = set(view.failed_hosts)
    if any(p != REPORT_PHASE for h, p in view.failures if h in still_failed):
        return EXIT_ANSIBLE
    if outcome in (EXIT_FAILED, EXIT_INCOMPLETE):
        return outcome
    if regressed:
        return EXIT_REGRESSION
    if outcome in (EXIT_INCONCLUSIVE, EXIT_NOTHING_JUDGED):
        return outcome
    if outcome is not None:
        return EXIT_OK
    return EXIT_OK if ansible_ok else EXIT_ANSIBLE
