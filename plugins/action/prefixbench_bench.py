"""Action plugin: one workload of the tutorial on one host, its result on the controller.

Thin: the host-side steps are ansible.builtin modules (uri, tempfile, copy, command,
slurp, file); every decision and the record itself come from prefixbench.bench.benchrun. A
custom workload's prompts are prepared on the controller by benchrun.prepare_prompts and
transferred into the bench's temp dir. Documented in library/prefixbench_bench.py
(`ansible-doc prefixbench_bench`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from prefixbench.bench import benchrun
from prefixbench.measure import hostload
from prefixbench.measure.layout import RunLayout
from prefixbench.servers import server

display = Display()

ARGUMENT_SPEC = {
    "run_dir": {"type": "path", "required": True},
    "configuration": {"type": "str", "required": True, "choices": ["baseline", "cached"]},
    # The workload crosses the boundary as its name: the package resolves it (and its
    # seed, server address, model, timeout) from the host's validated settings.
    "workload": {"type": "str", "required": True},
    "repetition": {"type": "int", "default": 1},
    "settings": {"type": "dict", "required": True},
    "vllm_executable": {"type": "str", "required": True},
    # Set when the server of this configuration did not start: the bench is not run and
    # a failure marker says why (with the unit's journal tail), so the report shows it.
    "not_started": {"type": "str", "default": ""},
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
        try:
            req = benchrun.BenchRequest.from_settings(
                host, args["settings"], configuration=args["configuration"],
                workload=args["workload"], repetition=args["repetition"],
                vllm_executable=args["vllm_executable"])
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
            display.display(f"{host}: {req.configuration} {req.workload.name} "
                            f"rep{req.repetition}: running vllm bench serve")
            # One round trip: the host module snapshots, runs and reads back everything.
            ran = self._module("prefixbench_bench_host", {
                "unit": req.unit, "metrics_url": f"{req.base_url}/metrics",
                "argv": server.bench_argv_with_key(argv) if req.api_key else argv,
                "result_filename": req.result_filename, "dataset_src": staged,
                "dataset_name": prepared.remote_name if prepared is not None else "",
                "service_properties": list(benchrun.SERVICE_PROPERTIES)}, task_vars)
            if ran.get("failed"):
                raise _HostError(f"the bench's host step failed: {ran.get('msg')}")
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
                       "host_load": hostload.host_load(ran.get("cpu") or {})},
                prepared=prepared, run_dir=run_dir)
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
