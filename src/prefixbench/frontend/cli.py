"""The ``prefixbench`` command: run the benchmark with a live view, report, compare, sim.

``run`` drives ``benchmark.yml`` through ansible-runner and prints a view of the run fed
by its events (:mod:`prefixbench.frontend.runview`); ``report`` and ``compare`` are
:mod:`prefixbench.report.cli`; ``sim`` is the simulated fleet's command
(:mod:`prefixbench.sim.cli`); ``whatif`` predicts a workload's hit ratio without a server
(:mod:`prefixbench.predict.whatif`). Heavy modules are imported when a subcommand needs them.
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

from prefixbench.frontend.runview import (
    EXIT_ANSIBLE,
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INCONCLUSIVE,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    LiveView,
    exit_code,
    regression_lines,
    summary_lines,
    summary_outcome,
)

__all__ = ["RunRequest", "build_parser", "extra_vars_cmdline", "main", "run_request"]

PROG = "prefixbench"
#: Exit code of an interrupted run (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: What an interrupted run runs to stop the servers it left behind.
STOP_PLAYBOOK = "playbooks/stop.yml"

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  success: every judged verdict passed (criteria with no workload are NOT_RUN),
     no regression
  {EXIT_ERROR}  the simulated fleet (sim) failed
  {EXIT_USAGE}  usage or input error (bad arguments, missing inventory or run directory)
  {EXIT_FAILED}  a confirmation verdict failed (run, report)
  {EXIT_REGRESSION}  regression against the reference run (run --reference, compare)
  {EXIT_ANSIBLE}  run: the ansible run failed (a task failed outside the report, a host was
     unreachable, ansible-runner could not start); report --upload: the upload failed
  {EXIT_INCONCLUSIVE}  a verdict is INCONCLUSIVE: its interval straddles the threshold (the
     verdict says about how many repetitions would decide it) or a result it needs is missing
  {EXIT_INCOMPLETE}  the run is incomplete: a bench failed and has no result; rerun with the
     same --run-id to run only what is missing
  {EXIT_INTERRUPTED}  run: interrupted (Ctrl+C or SIGTERM): the playbook was ended and the vLLM
     servers stopped ({STOP_PLAYBOOK}); rerun with the same --run-id to resume
"""

#: Repository holding benchmark.yml and ansible.cfg (the editable install lives in it).
_DEFAULT_PROJECT = Path(__file__).resolve().parents[3]


class UsageError(Exception):
    """A bad argument: one line on stderr, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark vLLM prefix caching on Trn2/Trn3 fleets (Ansible bundle).",
        epilog=EXIT_CODES + "\nexamples:\n"
        "  prefixbench sim up 3 && prefixbench run -i inventories/sim\n"
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

    _whatif_parser(sub)

    sim = sub.add_parser("sim", help="the simulated fleet: up N | down | status | setup")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True, metavar="ACTION")
    up = sim_sub.add_parser("up", help="bring the simulated fleet to N hosts (idempotent)")
    up.add_argument("count", type=int, nargs="?", default=3, help="number of hosts (default 3)")
    sim_sub.add_parser("down", help="remove every simulated host")
    sim_sub.add_parser("status", help="show each simulated host and its vllm-* units")
    sim_sub.add_parser("setup", help="install the host tools the simulated fleet needs (root)")
    return parser


def _whatif_parser(sub: Any) -> None:
    whatif = sub.add_parser(
        "whatif", help="predict the prefix-cache hit ratio of your prompts or a workload",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description="Replay requests through the model of vLLM's prefix cache, in the order "
        "vllm bench serve sends them, and print the predicted token hit ratio "
        "(prefix_cache_hits / prefix_cache_queries). Either a JSONL prompts file (prompt or "
        "chat-messages lines, counted with --tokenizer) or a prefix_repetition workload "
        "(--workload; no tokenizer needed).")
    whatif.add_argument("prompts", nargs="?", type=Path, metavar="PROMPTS.jsonl",
                        help="your prompts, one JSON object a line")
    whatif.add_argument("--workload", metavar="NAME",
                        help="a workload by name instead (the tutorial's, or --workloads)")
    whatif.add_argument("--workloads", type=Path, metavar="FILE",
                        help="YAML file with a 'workloads:' list (default: the tutorial's)")
    whatif.add_argument("--tokenizer", type=Path, metavar="DIR",
                        help="directory with the server's tokenizer.json (and "
                        "tokenizer_config.json for chat lines)")
    whatif.add_argument("--block-size", type=int, default=128,
                        help="KV block size of the server (vllm:cache_config_info; default 128)")
    whatif.add_argument("--capacity-blocks", type=int, metavar="N",
                        help="usable KV capacity in blocks: the server's num_gpu_blocks - 1 "
                        "(block 0 is vLLM's null block); default unbounded")
    whatif.add_argument("--seed", type=int, help="vllm bench serve --seed (default 0, or "
                        "the workload's)")
    whatif.add_argument("--no-shuffle", action="store_true",
                        help="as --disable-shuffle: send the prompts in file order")
    whatif.add_argument("--num-prompts", type=int, metavar="N",
                        help="prompts sent (default: every line, or the workload's)")
    whatif.add_argument("--custom-output-len", type=int, default=256, metavar="N",
                        help="output tokens per request, -1: each line's output_tokens "
                        "(only matters with --capacity-blocks; default 256)")
    whatif.add_argument("--num-warmups", type=int, default=0, metavar="N",
                        help="warmup requests (copies of the first prompt) sent first")
    whatif.add_argument("--capacity-curve", metavar="N,N,...",
                        help="predict at each of these KV capacities (usable blocks) and "
                        "unbounded: hit ratio against capacity, the working set, and the "
                        "smallest capacity that holds it")
    whatif.add_argument("--workers", type=int, metavar="N",
                        help="threads encoding a prompts file (default: one more than the "
                        "usable cores; the prediction is the same for any number)")


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
    for base in (cwd, project):
        candidate = (base / raw).resolve()
        if candidate.exists():
            return str(candidate)
    raise UsageError(f"inventory {raw!r} not found (looked in {cwd} and {project})")


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


def _run(req: RunRequest, out: TextIO, err: TextIO) -> int:
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
        summary = _fresh_json(run_dir / "summary.json", started)
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
            rc_compare = _report_module("compare", [str(run_dir), str(req.reference)], err)
            regressed = rc_compare == EXIT_REGRESSION
            if rc_compare not in (EXIT_OK, EXIT_REGRESSION):
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
    print(f"{PROG}: ansible-runner {status} (rc {rc}); exit {code}", file=out, flush=True)
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


def _report_module(command: str, argv: Sequence[str], err: TextIO) -> int:
    try:
        module: Any = importlib.import_module("prefixbench.report.cli")
    except ImportError as exc:
        print(f"{PROG} {command}: unavailable: prefixbench.report.cli cannot be imported "
              f"({exc})", file=err)
        return EXIT_USAGE
    entry = module.report_main if command == "report" else module.compare_main
    return int(entry(list(argv)))


def _sim(args: argparse.Namespace) -> int:
    from prefixbench.sim import cli as sim_cli  # noqa: PLC0415 - root-only tooling

    argv = [args.sim_command] + ([str(args.count)] if args.sim_command == "up" else [])
    return int(sim_cli.main(argv))


def _whatif_workload(args: argparse.Namespace) -> Any:
    from prefixbench.bench import workloads as wl  # noqa: PLC0415 - whatif only

    def overrides(data: dict[str, Any]) -> dict[str, Any]:
        if args.seed is not None:
            data["seed"] = args.seed
        if args.no_shuffle:
            data["disable_shuffle"] = True
        if args.num_prompts is not None:
            data["num_prompts"] = args.num_prompts
        if args.num_warmups:
            data["num_warmups"] = args.num_warmups
        return data

    try:
        if args.workload is not None:
            if args.prompts is not None:
                raise UsageError("give PROMPTS.jsonl or --workload, not both")
            known = (wl.load_workloads(args.workloads) if args.workloads is not None
                     else wl.tutorial_workloads())
            found = {w.name: w for w in known}.get(args.workload)
            if found is None:
                raise UsageError(f"no workload {args.workload!r}; known: "
                                 f"{', '.join(w.name for w in known)}")
            return wl.Workload.from_dict(overrides(found.to_dict()))
        if args.prompts is None:
            raise UsageError("give a PROMPTS.jsonl file or --workload NAME")
        if args.tokenizer is None:
            raise UsageError("a prompts file needs --tokenizer DIR (token counts are the "
                             "server's tokenizer's)")
        if not args.prompts.is_file():
            raise UsageError(f"{args.prompts}: no such file")
        return wl.Workload.from_dict(overrides({
            "name": "whatif", "dataset_name": "custom", "max_concurrency": 1,
            "dataset_path": str(args.prompts.resolve()),
            "custom_output_len": args.custom_output_len}))
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _whatif(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from prefixbench.frontend.progress import ProgressBar  # noqa: PLC0415
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library

    workload = _whatif_workload(args)
    if args.block_size < 1 or (args.capacity_blocks is not None and args.capacity_blocks < 1):
        raise UsageError("--block-size and --capacity-blocks must be >= 1")
    if args.tokenizer is not None and not args.tokenizer.exists():
        raise UsageError(f"--tokenizer {args.tokenizer}: no such file or directory")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.capacity_curve is not None:
        return _whatif_curve(args, workload, out, err)
    with ProgressBar(err) as bar:
        pred = whatif.predict(workload, block_size=args.block_size,
                              capacity_blocks=args.capacity_blocks, prompts_file=None,
                              tokenizer_dir=args.tokenizer, workers=args.workers,
                              progress=bar)
    if pred.ratio is None:
        raise UsageError(pred.note or "no prediction")
    cap = "unbounded" if args.capacity_blocks is None else f"{args.capacity_blocks} blocks"
    print(f"workload:        {workload.name} ({workload.dataset_name}), seed "
          f"{workload.seed if workload.seed is not None else 0}, "
          f"{'file order' if workload.disable_shuffle else 'shuffled'}", file=out)
    print(f"cache:           block {args.block_size}, capacity {cap}", file=out)
    print(f"predicted ratio: {pred.ratio:.4%}", file=out)
    print(f"hit tokens:      {pred.hit_tokens:,} of {pred.query_tokens:,} queried, "
          f"{pred.requests:,} requests", file=out)
    print(f"evicted blocks:  {pred.evicted_blocks:,}", file=out)
    if pred.formula_ratio is not None:
        print(f"formula:         {pred.formula_ratio:.4%} (block-aligned, unbounded cache; "
              f"tutorial's step 9: {workload.tutorial_ratio():.4%})", file=out)
    print(f"method:          {pred.method}", file=out)
    if pred.note:
        print(f"note:            {pred.note}", file=out)
    return EXIT_OK


def _whatif_curve(args: argparse.Namespace, workload: Any, out: TextIO, err: TextIO) -> int:
    from prefixbench.frontend.progress import ProgressBar  # noqa: PLC0415
    from prefixbench.predict import capacity_curve  # noqa: PLC0415 - loads the tokenizer library

    if args.capacity_blocks is not None:
        raise UsageError("give --capacity-blocks or --capacity-curve, not both")
    try:
        caps = capacity_curve.parse_capacities(args.capacity_curve)
        with ProgressBar(err) as bar:
            curve = capacity_curve.predict_curve(
                workload, block_size=args.block_size, capacities=caps,
                tokenizer_dir=args.tokenizer, workers=args.workers, progress=bar)
    except capacity_curve.CurveError as exc:
        raise UsageError(str(exc)) from None
    print(f"workload:        {workload.name} ({workload.dataset_name}), block "
          f"{args.block_size}", file=out)
    print(f"{'capacity':>12}  {'hit ratio':>9}  {'evicted blocks':>14}", file=out)
    for point in (*curve.points, curve.unbounded):
        cap = "unbounded" if point.capacity_blocks is None else f"{point.capacity_blocks:,}"
        ratio = "refused" if point.ratio is None else f"{point.ratio:.2%}"
        print(f"{cap:>12}  {ratio:>9}  {point.evicted_blocks:>14,}", file=out)
    fits = curve.fits_from
    print(f"working set:     {curve.working_set_blocks:,} blocks; "
          + (f"the unbounded hit ratio from {fits:,} blocks (of those tried)" if fits is not None
             else "no capacity tried reaches the unbounded hit ratio"), file=out)
    refused = [p for p in curve.points if p.ratio is None]
    if refused:
        print(f"refused:         {refused[0].note}", file=out)
    if curve.unbounded.note:
        print(f"note:            {curve.unbounded.note}", file=out)
    return EXIT_OK


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    # report/compare own their arguments (and their --help).
    if argv and argv[0] in ("report", "compare"):
        return _report_module(argv[0], argv[1:], err)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: 0 for --help, 2 for a usage error
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "run":
            return _run(run_request(args), out, err)
        if args.command == "sim":
            return _sim(args)
        if args.command == "whatif":
            return _whatif(args, out, err)
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {exc}", file=err)
        return EXIT_USAGE
    return EXIT_USAGE  # unreachable: the subcommand is required


if __name__ == "__main__":
    sys.exit(main())
