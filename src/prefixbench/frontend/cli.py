"""The ``prefixbench`` command: its arguments, and which subcommand runs.

``run`` drives ``benchmark.yml`` through ansible-runner and prints a view of the run fed
by its events (:mod:`prefixbench.frontend.cli_run`, the view
:mod:`prefixbench.frontend.runview`); ``report`` and ``compare`` are
:mod:`prefixbench.report.cli`; ``whatif`` predicts a workload's hit ratio without a server
(:mod:`prefixbench.frontend.cli_whatif`, the prediction :mod:`prefixbench.predict.whatif`);
``doctor`` checks every host under the server unit's sandbox
(:mod:`prefixbench.frontend.cli_doctor`); ``chat-traffic`` writes multi-turn chat
traffic as a custom workload's prompts, with its
expected hit ratio (:mod:`prefixbench.frontend.cli_chat`).
What they share is :mod:`prefixbench.frontend.cli_shared`. Heavy modules are imported
when a subcommand needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from prefixbench.frontend import cli_chat, cli_doctor, cli_whatif
from prefixbench.frontend.cli_run import (
    EXIT_INTERRUPTED,
    STOP_PLAYBOOK,
    run_benchmark,
    run_request,
)
from prefixbench.frontend.cli_shared import PROG, UsageError, report_module
from prefixbench.frontend.runview import (
    EXIT_ANSIBLE,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INCONCLUSIVE,
    EXIT_NOTHING_JUDGED,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
)

__all__ = ["build_parser", "main"]

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  success: every judged verdict passed (criteria with no workload are NOT_RUN),
     no regression
  {EXIT_USAGE}  usage or input error (bad arguments, missing inventory or run directory)
  {EXIT_FAILED}  a confirmation verdict failed (run, report)
  {EXIT_REGRESSION}  regression against the reference run (run --reference, compare)
  {EXIT_ANSIBLE}  run: the ansible run failed (a task failed outside the report, a host was
     unreachable, ansible-runner could not start); report --upload: the upload failed
  {EXIT_INCONCLUSIVE}  a verdict is INCONCLUSIVE: its interval straddles the threshold (the
     verdict says about how many repetitions would decide it) or a result it needs is missing
  {EXIT_INCOMPLETE}  the run is incomplete: a bench failed and has no result; rerun with the
     same --run-id to run only what is missing
  {EXIT_NOTHING_JUDGED}  nothing judged: no criterion could be decided (every verdict NOT_RUN)
  {EXIT_INTERRUPTED}  run: interrupted (Ctrl+C or SIGTERM): the playbook was ended and the vLLM
     servers stopped ({STOP_PLAYBOOK}); rerun with the same --run-id to resume
"""

#: The exit codes of the commands that run nothing on a host (whatif, chat-traffic).
TOOL_EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  success: the prediction (or the file and its expectation) is printed
  {EXIT_USAGE}  usage or input error (bad arguments, an unreadable prompts file or tokenizer)
"""

#: Repository holding benchmark.yml and ansible.cfg (the editable install lives in it).
_DEFAULT_PROJECT = Path(__file__).resolve().parents[3]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark vLLM prefix caching on Trn2/Trn3 fleets (Ansible bundle).",
        epilog=EXIT_CODES + "\nexamples:\n"
        "  scripts/simfleet up 3 && prefixbench run -i inventories/sim   # the simulated fleet\n"
        "  # nightly: a new run id each night (a fixed one would resume yesterday's run and\n"
        "  # bench nothing); compare it with a reference run\n"
        "  prefixbench run -i inventories/aws --run-id nightly-$(date +%F) "
        "-e prefixbench_repetitions=3 \\\n"
        "      --reference results/reference\n"
        "  # resume an interrupted run: the same run id runs only what is missing\n"
        "  prefixbench run -i inventories/aws --run-id nightly-2026-11-30\n")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run benchmark.yml against an inventory with a live view",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description="Run the whole experiment (preflight, provision, deploy, bench, report) "
        "through ansible-runner, showing per host its phase, the health wait while the "
        "server compiles, the workload k/n, then the verdicts of summary.json.")
    run.add_argument("-i", "--inventory", action="append", required=True, metavar="INVENTORY",
                     help="inventory path (repeatable); relative paths are tried from the "
                     "current directory, then from the project directory")
    run.add_argument("--run-id", help="run directory name under the results directory; "
                     "reuse one to resume a run (default: a new timestamped id)")
    run.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                     help="extra variables (repeatable), handed to ansible-playbook as "
                     "they are: key=value pairs, JSON or YAML, or @FILE")
    run.add_argument("-l", "--limit", help="ansible --limit host pattern")
    run.add_argument("--tags", help="ansible --tags (comma-separated)")
    run.add_argument("--reference", metavar="REFERENCE_DIR",
                     help="after the run, compare it against this run directory (exit 4 on "
                     "regression)")
    run.add_argument("--playbook", default="benchmark.yml",
                     help="playbook in the project directory (default benchmark.yml)")
    run.add_argument("--project-dir", type=Path, default=_DEFAULT_PROJECT,
                     help=f"the bundle's checkout (default {_DEFAULT_PROJECT})")
    run.add_argument("-v", "--verbose", action="count", default=0,
                     help="ansible verbosity (-v ... -vvvv), in the kept artifacts")
    run.add_argument("--raw", action="store_true",
                     help="print ansible-playbook's own output instead of the live view")

    report = sub.add_parser("report", add_help=False,
                            help="summarise a run directory (RUN_DIR [--format ...] "
                            "[--upload S3_URI] [--fleet-gate]; see report --help)")
    report.add_argument("args", nargs=argparse.REMAINDER)
    compare = sub.add_parser("compare", add_help=False,
                             help="compare RUN_DIR against REFERENCE_DIR [--tolerances FILE]; "
                             "exit 4 on regression")
    compare.add_argument("args", nargs=argparse.REMAINDER)

    cli_whatif.add_parser(sub, TOOL_EXIT_CODES)
    cli_chat.add_parser(sub, TOOL_EXIT_CODES)
    cli_doctor.add_parser(sub, _DEFAULT_PROJECT)

    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    # report/compare own their arguments (and their --help).
    if argv and argv[0] in ("report", "compare"):
        return report_module(argv[0], argv[1:], err)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for a usage error
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "run":
            return run_benchmark(run_request(args), out, err)
        if args.command == "whatif":
            return cli_whatif.run_whatif(args, out, err)
        if args.command == "chat-traffic":
            return cli_chat.run_chat_traffic(args, out, err)
        if args.command == "doctor":
            return cli_doctor.run_doctor(args, out, err)
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=err)
        return EXIT_USAGE
    return EXIT_USAGE  # unreachable: the subcommand is required


if __name__ == "__main__":
    sys.exit(main())
