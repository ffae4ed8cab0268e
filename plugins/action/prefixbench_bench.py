"""Action plugin: one workload of the tutorial on one host, its result on the controller.

Thin: the host-side steps are ansible.builtin modules (uri, tempfile, copy, command,
slurp, file); every decision and the record itself come from prefixbench.bench.benchrun. A
custom workload's prompts are prepared on the controller by benchrun.prepare_prompts and
transferred into the bench's temp dir. Documented in library/prefixbench_bench.py
(`ansible-doc prefixbench_bench`).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from prefixbench.bench import benchrun
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

    def _metrics(self, base_url: str, task_vars: dict[str, Any]) -> str:
        out = self._module("ansible.builtin.uri",
                           {"url": f"{base_url}/metrics", "return_content": True,
                            "timeout": 30}, task_vars)
        if out.get("failed") or out.get("status") != 200:
            raise _HostError(f"GET {base_url}/metrics failed: "
                             f"{out.get('msg') or out.get('status')}")
        return str(out.get("content", ""))

    def _put(self, local: Path, dest: str, task_vars: dict[str, Any]) -> None:
        """Copy a controller file to ``dest`` on the host (through Ansible's remote tmp,
        then the copy module, so it works with become)."""
        tmp = self._connection._shell.tmpdir or self._make_tmp_path()
        staged = self._connection._shell.join_path(tmp, "prompts.jsonl")
        self._transfer_file(str(local), staged)
        self._fixup_perms2((tmp, staged))
        out = self._module("ansible.builtin.copy",
                           {"src": staged, "dest": dest, "remote_src": True, "mode": "0644"},
                           task_vars)
        if out.get("failed"):
            raise _HostError(f"cannot copy the prompts to {dest}: {out.get('msg')}")

    def _service(self, unit: str, task_vars: dict[str, Any]) -> dict[str, str]:
        out = self._module("ansible.builtin.command",
                           {"argv": benchrun.service_argv(unit)}, task_vars)
        return benchrun.parse_service(str(out.get("stdout", "")))

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
        remote_dir = ""
        prepared: benchrun.PreparedBench | None = None
        try:
            if req.workload.is_custom:
                prepared = benchrun.prepare_prompts(req, run_dir)
                req = prepared.request
            service_before = self._service(req.unit, task_vars)
            before = self._metrics(req.base_url, task_vars)
            tmpdir = self._module("ansible.builtin.tempfile",
                                  {"state": "directory", "prefix": "prefixbench."}, task_vars)
            if tmpdir.get("failed"):
                raise _HostError(f"cannot create a temp dir: {tmpdir.get('msg')}")
            remote_dir = str(tmpdir["path"])
            dataset_path = None
            if prepared is not None:
                dataset_path = f"{remote_dir}/{prepared.remote_name}"
                self._put(prepared.path, dataset_path, task_vars)
            argv = req.argv(remote_dir, req.timeout, dataset_path=dataset_path)
            result["argv"] = argv
            display.display(f"{host}: {req.configuration} {req.workload.name} "
                            f"rep{req.repetition}: running vllm bench serve")
            run_argv = server.bench_argv_with_key(argv) if req.api_key else argv
            ran = self._module("ansible.builtin.command", {"argv": run_argv}, task_vars)
            if ran.get("rc") != 0:
                why = "timed out" if ran.get("rc") in (124, 137) else f"exited {ran.get('rc')}"
                return self._failed(result, layout, req, started=started,
                                    error=f"vllm bench serve {why}", rc=ran.get("rc"),
                                    stderr=str(ran.get("stderr", "")), args=args,
                                    task_vars=task_vars)
            after = self._metrics(req.base_url, task_vars)
            restarted = benchrun.service_restart(service_before,
                                                 self._service(req.unit, task_vars))
            if restarted:
                raise _HostError(restarted)
            slurped = self._module("ansible.builtin.slurp",
                                   {"src": f"{remote_dir}/{req.result_filename}"}, task_vars)
            if slurped.get("failed"):
                raise _HostError(f"no result file: {slurped.get('msg')}")
            bench_json = base64.b64decode(slurped["content"]).decode("utf-8")
            record = benchrun.build_record(
                req, metrics_before=before, metrics_after=after, bench_json=bench_json,
                started_at=started, ended_at=benchrun.now_iso(),
                extra={"argv": argv, "stdout_tail": str(ran.get("stdout", ""))[-4000:]},
                prepared=prepared, run_dir=run_dir)
        except (_HostError, ValueError) as exc:
            return self._failed(result, layout, req, started=started, error=str(exc),
                                rc=None, stderr="", args=args, task_vars=task_vars)
        finally:
            if remote_dir:
                self._module("ansible.builtin.file", {"path": remote_dir, "state": "absent"},
                             task_vars)
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
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
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
