"""``prefixbench doctor``: every host's readiness, checked under the server's sandbox.

Runs ``playbooks/doctor.yml`` (a probe in a transient unit with the server unit's user,
environment, limits, grants and sandbox, which starts the runtime; it writes only its
proof of the sandbox when every check passes; :mod:`prefixbench.hosts.doctor`) and prints
its one screen: a line per check per host, PASS or FAIL, the fix under each failure and,
when the sandbox causes a failure, the directive behind it. Exit 0 when every check
passed, 1 when one failed, 5 when the playbook could not run the checks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final, TextIO

from prefixbench.frontend.cli_shared import PROG, UsageError
from prefixbench.measure.yamlfile import YamlFileError, check_inventory_yaml

PLAYBOOK: Final = "playbooks/doctor.yml"
EXIT_PASS: Final = 0
EXIT_FAIL: Final = 1
EXIT_NOT_RUN: Final = 5


def add_parser(sub: Any, project: Path) -> None:
    doctor = sub.add_parser(
        "doctor", help="check every host can serve, under the server unit's own sandbox",
        description="Before any long compile: on each host, inside a transient unit with "
        "the server unit's user, environment, open-files limit and sandbox (systemd-run), "
        "check that the venv's vLLM and the Neuron plugin import, the graph compiler is on "
        "the unit's PATH, the devices open and neuron-ls agrees with the instance type, "
        "the compile cache is writable, the open-files limit, the model and its "
        "vocabulary, and start the runtime (libnrt's nrt_init on one NeuronCore; torch "
        "and vLLM's platform on cpu). A line per check, PASS or FAIL, with the fix; exit 0 "
        "when all pass, 1 when one fails, 5 when the checks could not run.")
    doctor.add_argument("-i", "--inventory", action="append", required=True,
                        metavar="INVENTORY", help="inventory path (repeatable)")
    doctor.add_argument("-l", "--limit", help="ansible --limit host pattern")
    doctor.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="extra variables (repeatable), handed to ansible-playbook")
    doctor.add_argument("--project-dir", type=Path, default=project,
                        help=f"the bundle's checkout (default {project})")


def playbook_argv(args: argparse.Namespace, out_file: Path, cwd: Path) -> list[str]:
    """The ansible-playbook command line of ``args`` (inventories resolved)."""
    project = Path(args.project_dir).resolve()
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), PLAYBOOK]
    for raw in args.inventory:
        path = next((p for p in (cwd / raw, project / raw) if p.exists()), None)
        if path is None:
            raise UsageError(f"inventory {raw!r} not found (looked in {cwd} and {project})")
        try:
            check_inventory_yaml(path)
        except YamlFileError as exc:
            raise UsageError(f"inventory {raw}: {exc}") from None
        argv += ["-i", str(path.resolve())]
    if args.limit:
        argv += ["--limit", args.limit]
    for extra in args.extra_vars:
        argv += ["-e", extra]
    return [*argv, "-e", json.dumps({"prefixbench_doctor_out": str(out_file)})]


def run_doctor(args: argparse.Namespace, out: TextIO, err: TextIO,
               cwd: Path | None = None) -> int:
    project = Path(args.project_dir).resolve()
    if not (project / PLAYBOOK).is_file():
        raise UsageError(f"{project / PLAYBOOK} not found: give the bundle's checkout with "
                         "--project-dir")
    work = Path(tempfile.mkdtemp(prefix="prefixbench-doctor-"))
    out_file, log = work / "doctor.json", work / "ansible.log"
    argv = playbook_argv(args, out_file, cwd or Path.cwd())
    env = {**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg")}
    print(f"{PROG} doctor: checking {'hosts ' + args.limit if args.limit else 'every host'} "
          f"of {', '.join(args.inventory)} under the server unit's sandbox "
          "(each host imports vLLM: about a minute; ansible's output in "
          f"{log})", file=out, flush=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run(argv, cwd=project, env=env, stdout=fh, stderr=subprocess.STDOUT,
                              check=False)
    try:
        report = json.loads(out_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        print("\n".join(tail), file=err)
        print(f"{PROG} doctor: the checks did not run (ansible-playbook exit "
              f"{proc.returncode}); the lines above are the end of {log}", file=err)
        return EXIT_NOT_RUN
    print(report["text"], file=out)
    print(f"{PROG} doctor: {time.monotonic() - started:.0f} s", file=out)
    if int(report.get("failed") or 0) > 0:
        return EXIT_FAIL
    if proc.returncode != 0:
        print(f"{PROG} doctor: ansible-playbook exited {proc.returncode}; see {log}", file=err)
        return EXIT_NOT_RUN
    return EXIT_PASS
