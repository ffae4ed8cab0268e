"""Action plugin: one workload of the tutorial on one host, its result on the controller.

Thin: the host-side steps are ansible.builtin modules (uri, tempfile, copy, command,
slurp, file); every decision and the record itself come from prefixbench.bench.benchrun. A
custom workload's prompts are prepared on the controller by benchrun.prepare_prompts and
transferred into the bench's temp dir. Documented in library/prefixbench_bench.py
(`ansible-doc prefixbench_bench`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from prefixbench.bench import benchrun, client_launch
from prefixbench.measure import hostload
from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.layout import RunLayout
from prefixbench.servers import health, server

display = Display()

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "configuration": {"type": "str", "required": True, "choices": ["baseline", "cached"]},
    # The workload crosses the boundary as its name: the package resolves it (and its
    # seed, server address, model, timeout) from the host's validated settings.
    "workload": {"type": "str", "default": ""},
    "repetition": {"type": "int", "default": 1},
    "settings": {"type": "dict", "required": True},
    "vllm_executable": {"type": "str", "required": True},
    # Set when the server of this configuration did not start: the bench is not run and
    # a failure marker says why (with the unit's journal tail), so the report shows it.
    "not_started": {"type": "str", "default": ""},
    # The benches of one server, in order, in one task: [{name, repetition, label}] (the
    # role's pending items). Instead of workload/repetition; hosts then run their own
    # benches back to back rather than in step with the slowest host's each bench.
    "benches": {"type": "list", "elements": "dict", "default": []},
    # With benches: the server's /health, checked (and waited for, when it restarted)
    # before each bench; a server that does not come back fails the task, whose rescue
    # records the benches left as not run.
    "health_url": {"type": "str", "default": ""},
    "health_timeout": {"type": "int", "default": 1800},
    "health_log_file": {"type": "path", "required": False},
    # Fork each bench from the preloaded client of this server (started by the role with
    # prefixbench_bench_client); a bench finding none runs the usual way.
    "preloaded_client": {"type": "bool", "default": False},
}


class _HostError(Exception):
    """A host-side step failed; the message says which and why."""


class ActionModule(ActionBase):
    """Run one bench; keep its result (or its failure) on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True
    _supports_async = False

    def _module(self, name: str, args: dict[str, Any], task_vars: dict[str, Any]
                ) -> dict[str, Any]:
        out = self._execute_module(module_name=name, module_args=args, task_vars=task_vars)
        return dict(out)

    def _stage(self, local: Path) -> str:
        """Copy a controller file into Ansible's remote tmp on the host (the host module
        moves it into the bench's temp dir); returns its path there."""
        tmp = self._connection._shell.tmpdir or self._make_tmp_path()
        staged = self._connection._shell.join_path(tmp, local.name)
        self._transfer_file(str(local), staged)
        self._fixup_perms2((tmp, staged))
        return str(staged)

    def _journal(self, unit: str, task_vars: dict[str, Any]) -> str:
        out = self._module("ansible.builtin.command",
                           {"argv": ["journalctl", "--unit", unit, "--lines", "200",
                                     "--no-pager", "--output", "short-iso"]}, task_vars)
        return str(out.get("stdout", ""))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = str(task_vars.get("inventory_hostname", "?"))
        if not args.get("benches"):
            if not args["workload"]:
                raise AnsibleActionFail(f"{host}: give workload (one bench) or benches")
            return self._one(dict(result), args, task_vars, host, args["workload"],
                             repetition=args["repetition"])
        return self._many(result, args, task_vars, host)

    def _many(self, result: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any],
              host: str) -> dict[str, Any]:
        """The benches in order; each result is on the controller before the next starts."""
        done: list[dict[str, Any]] = []
        result.update(changed=False, benches=done)
        for bench in args["benches"]:
            name, repetition = str(bench.get("name", "")), int(bench.get("repetition", 1))
            label = str(bench.get("label") or f"{name} rep{repetition}")
            # The host step checks /health itself before anything else (no round trip of
            # its own); only a server that is not answering gets the full wait here.
            check = bool(args.get("health_url") and not args.get("not_started")
                         and not self._play_context.check_mode)
            one = self._one({}, args, task_vars, host, name, repetition=repetition,
                            label=label, health_url=args["health_url"] if check else "")
            if one.get("status") == "unhealthy":
                outcome = self._healthy(args, task_vars, host)
                if not outcome.healthy:
                    result.update(failed=True, msg=(
                        f"{host}: {args['configuration']}: the server is not healthy before "
                        f"{label}: {outcome.reason}; last log: "
                        f"{outcome.last_log_line or '(none)'}"))
                    return result
                one = self._one({}, args, task_vars, host, name, repetition=repetition,
                                label=label)
            done.append({k: one.get(k) for k in ("status", "path", "msg", "summary", "argv")
                         if k in one} | {"label": label})
            if one.get("results_unwritable"):
                result.update(status="unwritable", results_unwritable=True, msg=one.get("msg"))
                return result
        statuses = [b.get("status") for b in done]
        result["status"] = "failed" if "failed" in statuses else (
            "done" if "done" in statuses else (statuses[0] if statuses else "skipped"))
        result["msg"] = "; ".join(f"{b['label']}: {b.get('status')}" for b in done)
        return result

    def _healthy(self, args: dict[str, Any], task_vars: dict[str, Any],
                 host: str) -> health.WaitOutcome:
        """The full wait for a server that did not answer before a bench (it restarted
        since the last one): progress lines, the journal into ``health_log_file``."""
        unit = server.unit_name(args["configuration"])

        def probe(lines: int, wait: int) -> dict[str, Any]:
            out = self._module("prefixbench_probe", {
                "unit": unit, "url": args["health_url"], "journal_lines": lines,
                "wait": wait}, task_vars)
            if out.get("failed"):
                raise AnsibleActionFail(f"probing {unit} failed: {out.get('msg')}")
            return out

        outcome = health.wait(probe, host=host, unit=unit,
                              timeout=args.get("health_timeout", 1800),
                              progress=display.display)
        if not outcome.healthy and args.get("health_log_file"):
            write_text_atomic(Path(args["health_log_file"]), "\n".join(outcome.journal) + "\n")
        return outcome

    def _one(self, result: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any],
             host: str, workload: str, *, repetition: int, label: str = "",
             health_url: str = "") -> dict[str, Any]:
        try:
            req = benchrun.BenchRequest.from_settings(
                host, args["settings"], configuration=args["configuration"],
                workload=workload, repetition=repetition,
                vllm_executable=args["vllm_executable"])
            if args.get("preloaded_client"):
                req = dataclasses.replace(req, launcher=client_launch.launcher(
                    req.vllm_executable, req.configuration))
            argv = benchrun.planned_argv(req, req.timeout)
        except (ValueError, KeyError, TypeError) as exc:
            raise AnsibleActionFail(f"{host}: invalid bench request: {exc}") from None
        run_dir = Path(args["run_dir"])
        layout = RunLayout.of(run_dir)
        result.update(changed=False, argv=argv)

        early = self._without_running(result, layout, req, argv=argv, args=args,
                                      task_vars=task_vars)
        if early is not None:
            return early

        no_room = benchrun.results_space_problem(run_dir)
        if no_room:
            return self._unwritable(result, no_room)

        started = benchrun.now_iso()
        prepared: benchrun.PreparedBench | None = None
        staged = ""
        try:
            if req.workload.is_custom:
                prepared = benchrun.prepare_prompts(req, run_dir)
                req = prepared.request
                staged = self._stage(prepared.path)
            dataset_path = (f"{benchrun.RESULT_DIR_PLACEHOLDER}/{prepared.remote_name}"
                            if prepared is not None else None)
            argv = req.argv(benchrun.RESULT_DIR_PLACEHOLDER, req.timeout, dataset_path=dataset_path)
            display.display(f"{host}: {req.configuration} "
                            f"{label or f'{req.workload.name} rep{req.repetition}'}: "
                            "running vllm bench serve")
            # One round trip: the host module snapshots, runs and reads back everything.
            ran = self._module("prefixbench_bench_host", {
                "unit": req.unit, "metrics_url": f"{req.base_url}/metrics",
                "argv": server.bench_argv_with_key(argv) if req.api_key else argv,
                "result_filename": req.result_filename, "dataset_src": staged,
                "dataset_name": prepared.remote_name if prepared is not None else "",
                "service_properties": list(benchrun.SERVICE_PROPERTIES),
                "health_url": health_url}, task_vars)
            if ran.get("failed"):
                raise _HostError(f"the bench's host step failed: {ran.get('msg')}")
            if ran.get("step") == "unhealthy":  # nothing ran; the caller waits, then retries
                return {**result, "status": "unhealthy", "msg": str(ran.get("error", ""))}
            argv = [a.replace(benchrun.RESULT_DIR_PLACEHOLDER, str(ran.get("workdir", "")))
                    for a in argv]
            result["argv"] = argv
            if ran.get("step") != "done":
                return self._failed(result, layout, req, started=started,
                                    error=str(ran.get("error") or ran.get("step")),
                                    rc=ran.get("rc"), stderr=str(ran.get("stderr_tail", "")),
                                    args=args, task_vars=task_vars,
                                    journal=str(ran.get("journal", "")))
            restarted = benchrun.service_restart(ran["service_before"], ran["service_after"])
            if restarted:
                raise _HostError(restarted)
            record = benchrun.build_record(
                req, metrics_before=str(ran["metrics_before"]),
                metrics_after=str(ran["metrics_after"]), bench_json=str(ran["bench_json"]),
                started_at=started, ended_at=benchrun.now_iso(),
                extra={"argv": argv, "stdout_tail": str(ran.get("stdout_tail", "")),
                       "host_load": hostload.host_load(ran.get("cpu") or {}),
                       "client": ran.get("client") or {}},
                prepared=prepared, run_dir=run_dir,
                server_cmdline=str(ran.get("server_cmdline") or ""))
        except (_HostError, ValueError) as exc:
            return self._failed(result, layout, req, started=started, error=str(exc),
                                rc=None, stderr="", args=args, task_vars=task_vars)
        finally:
            if staged:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        return self._finish(result, layout, req, record, started=started, args=args,
                            task_vars=task_vars)

    def _without_running(self, result: dict[str, Any], layout: RunLayout,
                         req: benchrun.BenchRequest, *, argv: list[str],
                         args: dict[str, Any], task_vars: dict[str, Any]
                         ) -> dict[str, Any] | None:
        """The outcome of a bench that is not run: done before (resume), check mode, or a
        server that never started. None: run it."""
        if layout.is_completed(req.key):
            record_path = layout.result_path(req.key)
            record = benchrun.BenchmarkRecord.from_dict(
                json.loads(record_path.read_text()), str(record_path))
            result.update(status="skipped", path=str(record_path),
                          summary=benchrun.summary(record),
                          msg=f"already done in {record_path} (resume)")
            return result
        if self._play_context.check_mode:
            result.update(status="planned", msg=f"would run: {' '.join(argv)}")
            return result
        if args.get("not_started"):
            return self._failed(result, layout, req, started=benchrun.now_iso(),
                                error=f"not run: {args['not_started']}", rc=None, stderr="",
                                args=args, task_vars=task_vars)
        return None

    def _finish(self, result: dict[str, Any], layout: RunLayout, req: benchrun.BenchRequest,
                record: benchrun.BenchmarkRecord, *, started: str, args: dict[str, Any],
                task_vars: dict[str, Any]) -> dict[str, Any]:
        """Write a sound record; a record that fails its sanity checks becomes a failure
        marker that keeps it (the rerun measures it again)."""
        problems = benchrun.record_problems(record)
        if problems:
            return self._failed(result, layout, req, started=started,
                                error="invalid record: " + "; ".join(problems), rc=None,
                                stderr="", args=args, task_vars=task_vars,
                                extra={"record": record.to_dict()})
        try:
            path = layout.write_result(record)
        except OSError as exc:
            return self._unwritable(result, benchrun.unwritable_message(
                layout.result_path(req.key), exc, layout.run_dir))
        summary = benchrun.summary(record)
        display.display(benchrun.summary_line(summary))
        result.update(status="done", path=str(path), summary=summary,
                      msg=benchrun.summary_line(summary))
        return result

    def _failed(self, result: dict[str, Any], layout: RunLayout,
                req: benchrun.BenchRequest, *, started: str, error: str, rc: Any,
                stderr: str, args: dict[str, Any], task_vars: dict[str, Any],
                extra: dict[str, Any] | None = None, journal: str = "") -> dict[str, Any]:
        if not journal:
            try:
                journal = self._journal(req.unit, task_vars)
            except Exception as exc:  # noqa: BLE001 - the failure record matters more
                journal = f"(journal unavailable: {exc})"
        record = benchrun.build_failure(req, error=error, started_at=started,
                                        ended_at=benchrun.now_iso(),
                                        returncode=rc if isinstance(rc, int) else None,
                                        stderr=stderr, journal_tail=journal, extra=extra)
        try:
            path = layout.write_failure(record)
        except OSError as exc:
            return self._unwritable(result, benchrun.unwritable_message(
                layout.failed_path(req.key), exc, layout.run_dir))
        display.warning(f"{req.host}: {req.configuration} {req.workload.name} "
                        f"rep{req.repetition} failed: {error} (details in {path})")
        result.update(status="failed", path=str(path), msg=error, stderr_tail=stderr[-2000:])
        return result

    @staticmethod
    def _unwritable(result: dict[str, Any], message: str) -> dict[str, Any]:
        """The controller cannot keep results: not a failure of this bench (the task goes
        on to the play's stop), but the whole run must stop (bench.yml ends it)."""
        display.error(message)
        result.update(status="unwritable", results_unwritable=True, msg=message)
        return result
