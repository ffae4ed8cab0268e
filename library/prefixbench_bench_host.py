#!/usr/bin/python
"""The host side of one bench, in one round trip (called by the prefixbench_bench action;
not meant for playbooks)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_bench_host
short_description: The host side of one prefixbench bench, in one round trip
description:
  - Internal to the C(prefixbench_bench) action, which builds every argument on the
    controller and turns the result into the bench's record there.
  - Reads the unit's C(systemctl show) and the server's C(/metrics), runs the bench's
    argv (an argv, never a shell string) with its result directory in a fresh temp dir,
    reads C(/metrics) and C(systemctl show) again and the bench's result JSON, removes
    the temp dir, and returns all of it. On a failed step it returns what it has, the
    step that failed and the unit's journal tail.
  - One module round trip per bench instead of one per step (about eight).
  - Around the bench it also reads the machine's CPU counters (C(/proc/stat)), the CPU
    of the server's process tree (from the unit's C(MainPID), C(/proc/<pid>/stat)) and
    the bench client's (getrusage of the children it waited for), so the controller
    can tell how much of the machine others used meanwhile
    (prefixbench.measure.hostload).
options:
  unit:
    description: systemd unit of the server under test.
    type: str
    required: true
  metrics_url:
    description: The server's C(/metrics) URL as seen from the host.
    type: str
    required: true
  argv:
    description: >-
      The bench command. Every C(@@RESULT_DIR@@) in it is replaced by the temp dir the
      module creates (the bench's C(--result-dir), a custom dataset's path).
    type: list
    elements: str
    required: true
  result_filename:
    description: Name of the bench's result file in the temp dir.
    type: str
    required: true
  dataset_src:
    description: A file already on the host (the staged prompts) to move into the temp dir.
    type: str
    default: ""
  dataset_name:
    description: Its name in the temp dir.
    type: str
    default: ""
  service_properties:
    description: The C(systemctl show) properties compared before and after.
    type: list
    elements: str
    default: [NRestarts, InvocationID, MainPID, ActiveState]
  journal_lines:
    description: Journal lines returned when a step fails.
    type: int
    default: 200
  health_url:
    description: >-
      The server's C(/health) URL: asked first, and when it does not answer 200 nothing
      runs and the step is C(unhealthy) (the action then waits for the server). Empty:
      not asked.
    type: str
    default: ""
author: prefixbench
"""

EXAMPLES = r"""
# Called by the prefixbench_bench action only.
"""

RETURN = r"""
step:
  description: >-
    The step that failed (service_before, metrics_before, tempdir, dataset, bench,
    metrics_after, service_after, result), unhealthy (nothing ran), or done.
  type: str
  returned: always
error:
  description: Why that step failed (empty when done).
  type: str
  returned: always
service_before:
  description: C(systemctl show) properties before the bench.
  type: dict
  returned: always
service_after:
  description: The same after the bench.
  type: dict
  returned: always
metrics_before:
  description: The C(/metrics) text before the bench.
  type: str
  returned: always
metrics_after:
  description: The C(/metrics) text after the bench.
  type: str
  returned: always
rc:
  description: The bench's exit code (null when it did not run).
  type: int
  returned: always
stdout_tail:
  description: The last 4000 characters of the bench's stdout.
  type: str
  returned: always
stderr_tail:
  description: The last 4000 characters of its stderr.
  type: str
  returned: always
workdir:
  description: The temp dir the bench ran in (removed again).
  type: str
  returned: always
bench_json:
  description: The bench's result file (empty unless done).
  type: str
  returned: always
journal:
  description: The unit's journal tail, when a step failed.
  type: str
  returned: always
client:
  description: >-
    How the bench client ran: C(client) is C(warm) (forked from the preloaded client),
    C(cold) (the launcher found none or was refused; C(why) says) or C(direct) (no
    launcher in the argv); C(cpu_s) the forked bench's CPU seconds.
  type: dict
  returned: always
cpu:
  description: C(stat_before), C(stat_after) (the C(/proc/stat) text), C(clk_tck),
    C(ncpu), C(server_ticks_before), C(server_ticks_after) and C(client_cpu_s); empty
    when the bench did not run.
  type: dict
  returned: always
server_cmdline:
  description: >-
    The server's argv from C(/proc/<MainPID>/cmdline), NUL-separated; empty when
    unreadable. The record's expectation models the scheduler it names.
  type: str
  returned: always
"""

import json
import os
import resource
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

#: Replaced by the module's temp dir in the argv.
RESULT_DIR_PLACEHOLDER = "@@RESULT_DIR@@"
#: Where the preloaded client's launcher says how it ran the bench (in the temp dir).
CLIENT_FILE = "prefixbench-client.json"


def _client_note(path: Path) -> dict[str, Any]:
    """The launcher's note (prefixbench.bench.warm_client), or that there was none: the
    argv ran vLLM's client directly."""
    try:
        note = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"client": "direct"}
    return note if isinstance(note, dict) else {"client": "direct"}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - loopback URL from settings
        if answer.status != 200:
            raise OSError(f"HTTP {answer.status}")
        return str(answer.read().decode("utf-8", errors="replace"))


def _read(path: str | Path) -> str:
    return Path(path).read_text(encoding="ascii", errors="replace")


def _cmdline(pid: int) -> str:
    """The server process's argv, NUL-separated as /proc keeps it ("" when unreadable):
    the record's expectation models the scheduler the server was started with."""
    if pid <= 0:
        return ""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def tree_ticks(root: int) -> int | None:
    """CPU clock ticks of process ``root`` and every live descendant (utime, stime and
    the reaped children's cutime, cstime: proc(5)); None when ``root`` is gone."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = _read(entry / "stat")
        except OSError:  # gone meanwhile
            continue
        # after "(name) ": state ppid ... utime stime cutime cstime (fields 14-17, proc(5))
        fields = text[text.rfind(")") + 2:].split()
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(v) for v in fields[11:15])
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


class _Bench:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.out: dict[str, Any] = {
            "changed": False, "step": "", "error": "", "service_before": {},
            "service_after": {}, "metrics_before": "", "metrics_after": "", "rc": None,
            "stdout_tail": "", "stderr_tail": "", "bench_json": "", "journal": "",
            "workdir": "", "cpu": {}, "client": {}, "server_cmdline": ""}

    def _service(self) -> dict[str, str]:
        rc, out, err = self.module.run_command(
            ["systemctl", "show", self.p["unit"],
             *(f"--property={p}" for p in self.p["service_properties"])])
        if rc != 0:
            raise OSError(f"systemctl show {self.p['unit']} failed: {err.strip()}")
        return {k.strip(): v.strip() for k, sep, v in
                (line.partition("=") for line in out.splitlines()) if sep}

    @staticmethod
    def _cpu(when: str, main_pid: int) -> dict[str, Any]:
        """The machine's and the server tree's CPU counters now (empty when unreadable)."""
        try:
            return {f"stat_{when}": _read("/proc/stat").split("\n", 1)[0],
                    f"server_ticks_{when}": tree_ticks(main_pid) if main_pid > 0 else None,
                    "clk_tck": os.sysconf("SC_CLK_TCK"), "ncpu": os.cpu_count() or 0}
        except (OSError, ValueError):
            return {}

    def _metrics(self) -> str:
        try:
            return _get(self.p["metrics_url"])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise OSError(f"GET {self.p['metrics_url']} failed: {exc}") from None

    def _answers(self) -> bool:
        """The server's /health answers 200; else the step is "unhealthy" (the action
        waits for the server, then asks again)."""
        try:
            with urllib.request.urlopen(self.p["health_url"], timeout=10) as answer:  # noqa: S310 - loopback URL from settings
                if answer.status == 200:
                    return True
                raise OSError(f"HTTP {answer.status}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.out.update(step="unhealthy", error=f"GET {self.p['health_url']}: {exc}")
            return False

    def _fail(self, step: str, error: str) -> dict[str, Any]:
        _, journal, _ = self.module.run_command(
            ["journalctl", "--unit", self.p["unit"], "--lines", str(self.p["journal_lines"]),
             "--no-pager", "--output", "short-iso"])
        self.out.update(step=step, error=error, journal=journal)
        return self.out

    def run(self) -> dict[str, Any]:
        step = "service_before"
        try:
            self.out["service_before"] = self._service()
            self.out["server_cmdline"] = _cmdline(
                int(self.out["service_before"].get("MainPID") or 0))
            if self.p["health_url"] and not self._answers():
                return self.out  # step "unhealthy": nothing ran
            step = "metrics_before"
            self.out["metrics_before"] = self._metrics()
            step = "tempdir"
            work = tempfile.mkdtemp(prefix="prefixbench.")
            self.out["workdir"] = work
        except OSError as exc:
            return self._fail(step, str(exc))
        try:
            return self._in(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _in(self, work: str) -> dict[str, Any]:
        if self.p["dataset_src"]:
            try:
                shutil.move(self.p["dataset_src"], Path(work) / self.p["dataset_name"])
            except OSError as exc:
                return self._fail("dataset", f"cannot place the prompts in {work}: {exc}")
        argv = [a.replace(RESULT_DIR_PLACEHOLDER, work) for a in self.p["argv"]]
        main_pid = int(self.out["service_before"].get("MainPID") or 0)
        cpu = self._cpu("before", main_pid)
        client0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_file = Path(work) / CLIENT_FILE
        rc, out, err = self.module.run_command(
            argv, environ_update={"PREFIXBENCH_CLIENT_FILE": str(client_file)})
        client1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.update(self._cpu("after", main_pid))
        cpu["client_cpu_s"] = (client1.ru_utime - client0.ru_utime
                               + client1.ru_stime - client0.ru_stime)
        self.out["client"] = _client_note(client_file)
        # A bench forked by the preloaded client is not this module's child: its CPU
        # comes back through the launcher's note.
        forked = self.out["client"].get("cpu_s")
        if isinstance(forked, (int, float)):  # host Pythons from 3.9
            cpu["client_cpu_s"] += float(forked)
        self.out["cpu"] = cpu
        self.out.update(rc=rc, stdout_tail=out[-4000:], stderr_tail=err[-4000:])
        if rc != 0:
            why = "timed out" if rc in (124, 137) else f"exited {rc}"
            return self._fail("bench", f"vllm bench serve {why}")
        step = "metrics_after"
        try:
            self.out["metrics_after"] = self._metrics()
            step = "service_after"
            self.out["service_after"] = self._service()
            step = "result"
            self.out["bench_json"] = (Path(work) / self.p["result_filename"]).read_text(
                encoding="utf-8")
        except (OSError, ValueError) as exc:  # ValueError: a result that is not UTF-8
            return self._fail(step, str(exc) if step != "result" else f"no result file: {exc}")
        self.out["step"] = "done"
        return self.out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "metrics_url": {"type": "str", "required": True},
            "argv": {"type": "list", "elements": "str", "required": True},
            "result_filename": {"type": "str", "required": True},
            "dataset_src": {"type": "str", "default": ""},
            "dataset_name": {"type": "str", "default": ""},
            "service_properties": {"type": "list", "elements": "str",
                                   "default": ["NRestarts", "InvocationID", "MainPID",
                                               "ActiveState"]},
            "journal_lines": {"type": "int", "default": 200},
            "health_url": {"type": "str", "default": ""},
        },
        supports_check_mode=False,
    )
    module.exit_json(**_Bench(module).run())


if __name__ == "__main__":
    main()
