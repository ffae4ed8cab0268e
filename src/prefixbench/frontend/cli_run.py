"""``prefixbench run``: ``benchmark.yml`` through ansible-runner with a live view, then the
verdicts, the comparison with a reference run, and the exit code.

:func:`run_request` checks the arguments into a :class:`RunRequest` (what ansible-runner
is handed); :func:`run_benchmark` runs it, feeding ansible-runner's events to
:class:`prefixbench.frontend.runview.LiveView`. Ctrl+C or SIGTERM cancels the playbook,
then ``playbooks/stop.yml`` stops the servers the run left behind (:func:`stop_request`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from prefixbench.frontend.cli_shared import PROG, UsageError, report_module
from prefixbench.frontend.runview import (
    EXIT_ANSIBLE,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
    LiveView,
    exit_code,
    exit_line,
    regression_lines,
    summary_lines,
    summary_outcome,
)
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.yamlfile import YamlFileError, check_inventory_yaml, load_yaml_file

__all__ = [
    "EXIT_INTERRUPTED",
    "STOP_PLAYBOOK",
    "RunRequest",
    "compare_regressed",
    "extra_vars_cmdline",
    "run_benchmark",
    "run_request",
    "stop_request",
]

#: What an interrupted run runs to stop the servers it left behind.
STOP_PLAYBOOK = "playbooks/stop.yml"


def extra_vars_cmdline(items: Sequence[str]) -> str:
    """``-e`` arguments for ansible-runner's command line, passed through unparsed.

    ansible-playbook reads each one itself (JSON, YAML, ``key=value`` pairs, ``@file``),
    exactly as if it had been given on its own command line: ansible-runner splits this
    string with :func:`shlex.split`, which :func:`shlex.quote` undoes.
    """
    import shlex  # noqa: PLC0415

    return " ".join(f"-e {shlex.quote(item)}" for item in items)


@dataclass(frozen=True)
class RunRequest:
    """Everything ``run`` hands ansible-runner, decided from the arguments alone."""

    project_dir: Path
    playbook: str
    inventories: tuple[str, ...]
    extravars: dict[str, Any] = field(default_factory=dict)
    #: ``-e`` arguments as given, handed to ansible-playbook unparsed.
    extra_args: tuple[str, ...] = ()
    limit: str | None = None
    tags: str | None = None
    verbosity: int = 0
    raw: bool = False
    reference: Path | None = None

    @property
    def run_id(self) -> str:
        return str(self.extravars.get("prefixbench_run_id") or "")

    def runner_kwargs(self, private_data_dir: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "private_data_dir": private_data_dir,
            "project_dir": str(self.project_dir),
            "playbook": self.playbook,
            "inventory": list(self.inventories),
            "extravars": dict(self.extravars),
            "envvars": {"ANSIBLE_CONFIG": str(self.project_dir / "ansible.cfg")},
            "quiet": not self.raw,
            "suppress_env_files": True,
        }
        if self.limit:
            kwargs["limit"] = self.limit
        cmdline = [extra_vars_cmdline(self.extra_args)] if self.extra_args else []
        if self.tags:
            cmdline.append(f"--tags {self.tags}")
        if cmdline:
            kwargs["cmdline"] = " ".join(cmdline)
        if self.verbosity:
            kwargs["verbosity"] = self.verbosity
        return kwargs


def _resolve_inventory(raw: str, project: Path, cwd: Path) -> str:
    """The inventory's path, its YAML (and its group_vars/host_vars) parsed first: a
    syntax error is one line with the file and line, before Ansible reads it."""
    for base in (cwd, project):
        candidate = (base / raw).resolve()
        if candidate.exists():
            try:
                check_inventory_yaml(candidate)
            except YamlFileError as exc:
                raise UsageError(f"inventory {raw}: {exc}") from None
            return str(candidate)
    raise UsageError(f"inventory {raw!r} not found (looked in {cwd} and {project})")


def _check_extra_var_files(items: Sequence[str], cwd: Path) -> None:
    """Each ``-e @FILE`` found from here parsed as YAML first (ansible-playbook reads
    them itself, and says so when one is missing)."""
    for item in items:
        path = cwd / item[1:]
        if item.startswith("@") and path.is_file():
            try:
                load_yaml_file(path)
            except YamlFileError as exc:
                raise UsageError(f"-e {item}: {exc}") from None


def run_request(args: argparse.Namespace, cwd: Path | None = None) -> RunRequest:
    """Validate ``run``'s arguments (exit 2 on a problem) into a :class:`RunRequest`."""
    cwd = cwd or Path.cwd()
    project = Path(args.project_dir).resolve()
    if not (project / args.playbook).is_file():
        raise UsageError(f"no playbook {args.playbook} in {project} (use --project-dir)")
    extravars: dict[str, Any] = {}
    if args.run_id:
        extravars["prefixbench_run_id"] = args.run_id
    if args.tags and any(c.isspace() for c in args.tags):
        raise UsageError("--tags: comma-separated, without spaces")
    _check_extra_var_files(args.extra_vars, cwd)
    reference = None
    if args.reference:
        reference = Path(args.reference)
        if not reference.is_dir():
            raise UsageError(f"--reference {args.reference}: not a directory")
    return RunRequest(
        project_dir=project, playbook=args.playbook,
        inventories=tuple(_resolve_inventory(i, project, cwd) for i in args.inventory),
        extravars=extravars, extra_args=tuple(args.extra_vars), limit=args.limit,
        tags=args.tags, verbosity=args.verbose,
        raw=args.raw, reference=reference)


def _fresh_json(path: Path, since: float) -> Mapping[str, Any] | None:
    """The JSON document at ``path`` if it was written during this run."""
    try:
        if path.stat().st_mtime < since:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, Mapping) else None


def compare_regressed(rc: int, comparison: Mapping[str, Any] | None) -> bool:
    """Whether ``prefixbench compare`` (exit ``rc``, its ``comparison.json``) found a
    regression: exit 4, or exit 7 (data missing in one of the runs: what both have is
    still judged) with regressions listed."""
    return rc == EXIT_REGRESSION or (
        rc == EXIT_INCOMPLETE and bool((comparison or {}).get("regressions")))


def run_benchmark(req: RunRequest, out: TextIO, err: TextIO) -> int:
    """Run ``req`` through ansible-runner with the live view; the exit code."""
    try:
        runner: Any = importlib.import_module("ansible_runner")
    except ImportError:
        print(f"{PROG}: error: ansible-runner is not installed in {sys.executable}'s "
              "environment (run scripts/bootstrap)", file=err)
        return EXIT_ANSIBLE
    # ansible-runner starts ansible-playbook from PATH: the one next to this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    view = LiveView()

    def on_event(event: dict[str, Any]) -> bool:
        if not req.raw:
            for line in view.feed(event):
                print(line, file=out, flush=True)
        else:
            view.feed(event)
        return True

    private = tempfile.mkdtemp(prefix="prefixbench-run-")
    started = time.time()
    print(f"{PROG}: running {req.playbook} on {', '.join(req.inventories)}"
          + (f" (run id {req.run_id})" if req.run_id else ""), file=out, flush=True)
    # ansible-playbook runs in its own session (ansible-runner's pty), so Ctrl+C reaches
    # only this process: turn it into ansible-runner's cancel (which ends the playbook),
    # then stop the servers the run left behind.
    interrupt = _Interrupt()
    try:
        with interrupt.installed():
            result = runner.run(event_handler=on_event, cancel_callback=interrupt.is_set,
                                **req.runner_kwargs(private))
    except KeyboardInterrupt:
        interrupt.flag = True
        result = None
    except Exception as exc:  # noqa: BLE001 - any runner failure is one line and exit 5
        print(f"{PROG}: error: ansible-runner failed to start: {exc}", file=err)
        return EXIT_ANSIBLE
    if interrupt.flag or result is None:
        return _after_interrupt(runner, req, view, private, out=out, err=err)
    status, rc = str(result.status), result.rc

    run_dir = Path(view.run_dir) if view.run_dir else (
        req.project_dir / "results" / req.run_id if req.run_id else None)
    outcome: int | None = None
    regressed = False
    if run_dir is not None:
        summary = _fresh_json(RunLayout.of(run_dir).summary_path, started)
        if summary is not None:
            lines, _ = summary_lines(summary)
            outcome = summary_outcome(summary)
            print("== verdicts (summary.json)", file=out)
            for line in lines:
                print(line, file=out)
        else:
            print(f"no summary.json written in {run_dir}; "
                  f"`{PROG} report {run_dir}` writes one", file=out)
        if req.reference is not None and run_dir.is_dir():
            rc_compare = report_module("compare", [str(run_dir), str(req.reference)], err)
            regressed = compare_regressed(
                rc_compare, _fresh_json(run_dir / "comparison.json", started))
            if rc_compare == EXIT_INCOMPLETE:
                print(f"{PROG}: the comparison with {req.reference} is incomplete: data "
                      f"missing in one of the runs (listed above)", file=err)
            elif rc_compare not in (EXIT_OK, EXIT_REGRESSION):
                print(f"{PROG}: the comparison with {req.reference} failed", file=err)
        else:
            comparison = _fresh_json(run_dir / "comparison.json", started)
            for line in regression_lines(comparison or {}):
                regressed = True
                print(line, file=out)
    code = exit_code(view, runner_status=status, rc=rc, outcome=outcome,
                     regressed=regressed)
    artifacts = Path(private) / "artifacts"
    if code == EXIT_OK:
        shutil.rmtree(private, ignore_errors=True)
    else:
        print(f"ansible output kept in {artifacts}/*/stdout", file=out)
    print(f"{PROG}: ansible-runner {status} (rc {rc}); {exit_line(code)}", file=out,
          flush=True)
    return code


class _Interrupt:
    """Ctrl+C (SIGINT) or SIGTERM while a run is going: remembered, not raised."""

    def __init__(self) -> None:
        self.flag = False

    def is_set(self) -> bool:
        return self.flag

    def _handle(self, signum: int, frame: Any) -> None:
        del signum, frame
        self.flag = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers belong to the main thread
            return
        previous = {sig: signal.signal(sig, self._handle)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def stop_request(req: RunRequest) -> RunRequest:
    """The same hosts (inventories, --limit, -e), playbooks/stop.yml."""
    return dataclasses.replace(req, playbook=STOP_PLAYBOOK, tags=None, reference=None)


def _after_interrupt(runner: Any, req: RunRequest, view: LiveView, private: str, *,
                     out: TextIO, err: TextIO) -> int:
    """Stop the servers an interrupted run left running; say how to resume."""
    run_id = Path(view.run_dir).name if view.run_dir else req.run_id
    print(f"{PROG}: interrupted: stopping the vLLM servers ({STOP_PLAYBOOK}); "
          "Ctrl+C again to leave them running", file=err, flush=True)
    stop_dir = tempfile.mkdtemp(prefix="prefixbench-stop-")
    try:
        stopped = runner.run(**stop_request(req).runner_kwargs(stop_dir))
        ok = str(stopped.status) == "successful"
    except KeyboardInterrupt:
        ok = False
    except Exception:  # noqa: BLE001 - reported below with the command to run
        ok = False
    shutil.rmtree(stop_dir, ignore_errors=True)
    if ok:
        print(f"{PROG}: servers stopped on every reachable host", file=err)
    else:
        print(f"{PROG}: the servers may still run: ansible-playbook {STOP_PLAYBOOK} "
              f"-i {' -i '.join(req.inventories)}", file=err)
    resume = f" --run-id {run_id}" if run_id else ""
    print(f"{PROG}: nothing measured is lost; resume with: {PROG} run{resume} "
          f"(ansible output in {private}/artifacts)", file=err, flush=True)
    return EXIT_INTERRUPTED
