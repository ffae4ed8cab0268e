"""The mutation score of the modules that decide, from mutmut's own result files.

``make mutate`` (``scripts/mutate``) runs mutmut 3 over :data:`MODULES`, in that order,
within a time budget; mutmut keeps one ``mutants/<path>.meta`` per module (JSON: the exit
code of the fast-tier tests run against each mutant, ``null`` until it was run). This
module reads them:

    python -m prefixbench_perf.mutation modules            # the modules, in order
    python -m prefixbench_perf.mutation pending MODULE     # its mutants not yet run
    python -m prefixbench_perf.mutation pending --recheck MODULE  # and its survivors
    python -m prefixbench_perf.mutation scores [--markdown]
    python -m prefixbench_perf.mutation survivors [MODULE] # the ones to kill or to name

A mutant is *killed* when a test failed on it (mutmut's exit codes 1 and 3) or it ran past
its time limit; it *survived* when every test passed, or when no fast-tier test reaches
the function it changes (``no tests``). An *equivalent* mutant (:data:`EQUIVALENT`,
each with the reason no test can tell it from the original) is left out of the score:
``killed / (run - equivalent)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: The modules ``make mutate`` mutates, in the order it runs them (pyproject.toml's
#: ``[tool.mutmut] only_mutate`` lists the same files; a static test holds the two equal).
MODULES: Final = (
    "prefixbench.hosts.release_match",
    "prefixbench.hosts.releases",
    "prefixbench.servers.served_engine",
    "prefixbench.servers.sandbox",
    "prefixbench.engines.schedneuron",
    "prefixbench.predict.segments",
    "prefixbench.report.compare",
    "prefixbench.report.tolerances",
    "prefixbench.hosts.doctor",
    "prefixbench.hosts.doctor_probe",
)

KILLED: Final = frozenset({1, 3})
TIMEOUT: Final = frozenset({36, 24, -24, 152, 255})
SURVIVED: Final = 0
NO_TESTS: Final = frozenset({5, 33})

_SE = "prefixbench.servers.served_engine."
_SEG = "prefixbench.predict.segments."
_TOL = "prefixbench.report.tolerances."
_RM = "prefixbench.hosts.release_match."
_SN = "prefixbench.engines.schedneuron."
_DP = "prefixbench.hosts.doctor_probe."
_SB = "prefixbench.servers.sandbox."
_DR = "prefixbench.hosts.doctor."
_RL = "prefixbench.hosts.releases."
_CUT = ("the loop stops at the first part that is not all digits, keeping its leading "
        'digits, and "+" is not a digit: cutting at the "+" first changes nothing')
#: mutmut's separator between a class and its method in a mutant's name ("ǁ").
_M = "\u01c1"

#: Mutants no test can tell from the original, each with why (mutmut's names; they hold
#: while the function they belong to is unchanged).
EQUIVALENT: Final[dict[str, str]] = {
    _SE + "x_parse_cmdline__mutmut_9":
        'decode("UTF-8") is decode("utf-8"): codec names are case-insensitive',
    _SE + "x__value__mutmut_1":
        '"" for None when the flag is absent: every caller tests the value for truth',
    _SE + "x__async_flag__mutmut_1":
        '"" for None when neither flag is given: the one caller compares with `is False`',
    _SE + "x_scheduler_of__mutmut_12":
        'rsplit(".") without maxsplit: the last component is the same',
    _SE + "x_scheduler_of__mutmut_13":
        'rsplit(".", 2): the last component is the same',
    f"{_TOL}x{_M}Tolerances{_M}for_metric__mutmut_8":
        'rsplit("/") without maxsplit: the last component is the same',
    f"{_TOL}x{_M}Tolerances{_M}for_metric__mutmut_11":
        'rsplit("/", 2): the last component is the same',
    _RM + "x__public__mutmut_4":
        'split("+") without maxsplit: the part before the first "+" is the same',
    _RM + "x__public__mutmut_9":
        'split("+", 2): the part before the first "+" is the same',
    _RM + "x__public__mutmut_7":
        '_public(None) as "XXXX", not "": a missing plugin is refused before it is compared '
        "(adoptable_venv), and in differences neither equals a release's pinned plugin",
    _RM + "x_candidates__mutmut_8":
        "rank 3 for a release whose own DLAMI venv is there, not 2: the order of the ranks "
        "(3 > 1 > 0) is the same",
    _RM + "x_venvs_from_probe__mutmut_11":
        'stdout missing read as str(None) = "None": a line naming no distribution, as ""',
    _RM + "x_venvs_from_probe__mutmut_13":
        "stdout missing read as str(None), as mutant 11",
    _RM + "x_venvs_from_probe__mutmut_16":
        'stdout missing read as "XXXX": a line naming no distribution, as ""',
    _RM + "x_venvs_from_probe__mutmut_19":
        "rpartition for partition: the probe (roles/neuron_sdk/tasks/release.yml) prints "
        "`name version` with one space, and neither a distribution name nor a PEP 440 "
        "version holds one",
    "prefixbench.report.compare.x__judge__mutmut_62":
        'direction != "XXbothXX": for "both", worse is abs(...) >= 0 and allowed >= 0, so '
        "-worse > allowed is false either way",
    _TOL + "x_load_tolerances__mutmut_6":
        "read_text(encoding=None): the locale's encoding, UTF-8 on this machine (and under "
        "any UTF-8 locale), so no test run here can tell it apart",
    _TOL + "x_load_tolerances__mutmut_8":
        'read_text(encoding="UTF-8") is "utf-8": codec names are case-insensitive',
    _TOL + "x_load_tolerances__mutmut_60":
        "per.get(name, None): per starts as DEFAULT_TOLERANCES, whose keys are DIRECTIONS', "
        "and a name outside DIRECTIONS was refused above: the default is never taken",
    _TOL + "x_load_tolerances__mutmut_62":
        "per.get(name): the same default never taken as mutant 60",
    f"{_SN}x{_M}NeuronSchedulerSim{_M}_schedule__mutmut_2":
        "hidden starts as None, not []: it is read only by `if hidden:` when neither "
        "branch set it, and None is as false as []",
    f"{_SN}x{_M}NeuronSchedulerSim{_M}_schedule__mutmut_3":
        "admit starts as None, not False: it is read only by `if admit and not "
        "preempted`, and None is as false as False",
    _DP + "x__check_compiler__mutmut_10":
        'shutil.which("") for no compiler named, not None: which() never returns a '
        "directory, and a PATH entry joined with \"\" is one, so it returns None too",
    _DP + "x__check_nofile__mutmut_7":
        "`or 1` for no limit asked, not `or 0`: a hard RLIMIT_NOFILE below 1 cannot be "
        "(the probe itself holds open files), so `hard < want` is false either way",
    _DP + "x__check_cache__mutmut_13":
        "NamedTemporaryFile(prefix=None) (tempfile's own prefix): the name of a file "
        "deleted before the check returns, which nothing reads",
    _DP + "x__check_cache__mutmut_15":
        "NamedTemporaryFile without prefix: the same as mutant 13",
    _DP + "x__check_cache__mutmut_16":
        'prefix "XX.doctor-XX": the same as mutant 13',
    _DP + "x__check_cache__mutmut_17":
        'prefix ".DOCTOR-": the same as mutant 13',
    _DP + "x__neuron_ls__mutmut_7":
        'no neuron_ls path read as "XXXX", not "": no such file exists in the probe\'s '
        "working directory, so both return \"\" before running anything",
    _DP + "x__neuron_ls__mutmut_18":
        "subprocess.run(check=None), not False: both falsy, no exception on a failure",
    _DP + "x__neuron_ls__mutmut_23":
        "subprocess.run without check: its default is False",
    _DP + "x_main__mutmut_3":
        "read_text(encoding=None): the locale's encoding, UTF-8 here and under any UTF-8 "
        "locale, so no test run here can tell it apart (the JSON is ASCII anyway)",
    _DP + "x_main__mutmut_7":
        'read_text(encoding="UTF-8") is "utf-8": codec names are case-insensitive',
    _SB + "x_levels_without__mutmut_6":
        'platforms ("neuron", "XXcpuXX"): sandbox() gives every platform but "neuron" the '
        "CPU confinement, so any other name is the cpu platform",
    _SB + "x_levels_without__mutmut_7":
        'platforms ("neuron", "CPU"): the same as mutant 6',
    _SB + "x_proof_problem__mutmut_6":
        "json.loads of a blank proof too: it raises ValueError, which the except turns "
        "into None, as the original's None for blank text",
    _SB + "x_proof_problem__mutmut_8":
        'proof = "" for unreadable JSON, not None: neither is a Mapping, the next test',
    _DR + "x_host_lines__mutmut_86":
        'cause != "XXhostXX": a cause of "host" is then tested against the directives, '
        'and no directive is "host" (each is a Key=value line): the same fix',
    _DR + "x_host_lines__mutmut_87":
        'cause != "HOST": the same as mutant 86',
    _DR + "x_plan__mutmut_116":
        "model_cache_tiktoken_dir's default None, not \"\": taken only with the vocabulary "
        "on and no directory, and then server.unit_spec, called first, has already "
        "raised KeyError reading settings[\"model_cache_tiktoken_dir\"]",
    _DR + "x_plan__mutmut_118":
        "model_cache_tiktoken_dir without a default: never taken, as mutant 116",
    _DR + "x_plan__mutmut_121":
        'model_cache_tiktoken_dir\'s default "XXXX": never taken, as mutant 116',
    _RL + "x_version_tuple__mutmut_3": 'split(None, 1) for split("+", 1): ' + _CUT,
    _RL + "x_version_tuple__mutmut_6": 'split("+") without maxsplit: ' + _CUT,
    _RL + "x_version_tuple__mutmut_7": 'rsplit("+", 1): ' + _CUT,
    _RL + "x_version_tuple__mutmut_9": 'split("XX+XX", 1), cutting nothing: ' + _CUT,
    _RL + "x_version_tuple__mutmut_10": 'split("+", 2): the part before the first "+" is '
                                        "the same",
    _RL + "x_upstream_version__mutmut_4": 'split("-") without maxsplit: the part before the '
                                          'first "-" is the same',
    _RL + "x_upstream_version__mutmut_16": 'split("-", 2): the part before the first "-" is '
                                           "the same",
    _RL + "x__extras__mutmut_20": "release.split(\"-\") without maxsplit: the part before "
                                  'the first "-" is the same',
    _RL + "x__extras__mutmut_23": 'release.split("-", maxsplit=2): the part before the '
                                  'first "-" is the same',
    _RL + "x_parse_release__mutmut_258": "python not a mapping: never reached, a python "
                                         "that is not a mapping is refused above "
                                         "(python.supported must be a list)",
    _RL + "x_parse_release__mutmut_267": '"XXXX" for a python that is not a mapping: never '
                                         "reached, as mutant 258",
    _RL + "x__extras__mutmut_191": 'library_path_source `or "XXXX"`: never reached, a '
                                   "manifest without one is refused (server."
                                   "library_path_source names no public source)",
    _DR + "x_host_lines__mutmut_93":
        'levels_without(...) or ["XXoffXX"]: never taken, level "off" sets no directive, '
        "so levels_without always lists it",
    _DR + "x_host_lines__mutmut_94":
        'levels_without(...) or ["OFF"]: never taken, as mutant 93',
}


def module_of(mutant: str) -> str:
    """``prefixbench.report.compare.x__judge__mutmut_3`` -> ``prefixbench.report.compare``."""
    return mutant.rsplit(".", 1)[0]


def meta_path(root: Path, module: str) -> Path:
    return root / "mutants" / "src" / (module.replace(".", "/") + ".py.meta")


def exit_codes(root: Path, module: str) -> dict[str, int | None] | None:
    """Each mutant's exit code (None: not run yet), or None before mutmut generated any."""
    path = meta_path(root, module)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    codes: dict[str, int | None] = data["exit_code_by_key"]
    return codes


@dataclass(frozen=True)
class Score:
    module: str
    mutants: int
    run: int
    killed: int
    survived: int
    no_tests: int
    equivalent: int

    @property
    def score(self) -> float | None:
        judged = self.run - self.equivalent
        return None if judged <= 0 else self.killed / judged

    def cells(self) -> list[str]:
        pct = "-" if self.score is None else f"{100 * self.score:.1f}%"
        return [self.module.removeprefix("prefixbench."), str(self.mutants), str(self.run),
                str(self.killed), str(self.survived), str(self.no_tests),
                str(self.equivalent), pct]


HEADER: Final = ["module", "mutants", "run", "killed", "survived", "no tests",
                 "equivalent", "score"]


def score(module: str, codes: dict[str, int | None]) -> Score:
    ran = {k: v for k, v in codes.items() if v is not None}
    equivalent = [k for k, v in ran.items() if k in EQUIVALENT and v not in KILLED | TIMEOUT]
    killed = [k for k, v in ran.items() if v in KILLED | TIMEOUT]
    survived = [k for k, v in ran.items()
                if v == SURVIVED and k not in EQUIVALENT]
    no_tests = [k for k, v in ran.items() if v in NO_TESTS and k not in EQUIVALENT]
    return Score(module, len(codes), len(ran), len(killed), len(survived), len(no_tests),
                 len(equivalent))


def survivors(codes: dict[str, int | None]) -> list[str]:
    """The mutants that ran and were not killed, not named equivalent."""
    return [k for k, v in codes.items()
            if v is not None and v not in KILLED | TIMEOUT and k not in EQUIVALENT]


def pending(module: str, codes: dict[str, int | None] | None, *,
            recheck: bool = False) -> list[str]:
    """What to hand ``mutmut run``: the mutants not run yet (and, with ``recheck``, the
    survivors again: after tests were added), or the module's glob before mutmut
    generated its mutants."""
    if codes is None:
        return [module + ".*"]
    again = set(survivors(codes)) if recheck else set()
    return [k for k, v in codes.items() if v is None or k in again]


def table(rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [HEADER, *rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("command", choices=("modules", "pending", "scores", "survivors"))
    ap.add_argument("module", nargs="?", help="a module of MODULES (pending, survivors)")
    ap.add_argument("--markdown", action="store_true", help="scores as a Markdown table")
    ap.add_argument("--recheck", action="store_true",
                    help="pending: the survivors too (run them again after adding tests)")
    ap.add_argument("--root", type=Path, default=Path.cwd(),
                    help="the checkout holding mutants/ (default: here)")
    args = ap.parse_intermixed_args(argv)
    if args.module is not None and args.module not in MODULES:
        print(f"mutation: unknown module {args.module!r}; known: {', '.join(MODULES)}",
              file=sys.stderr)
        return 2
    if args.command == "modules":
        print("\n".join(MODULES))
    elif args.command == "pending":
        if args.module is None:
            print("mutation: pending needs a module", file=sys.stderr)
            return 2
        for name in pending(args.module, exit_codes(args.root, args.module),
                            recheck=args.recheck):
            print(name)
    elif args.command == "survivors":
        for module in [args.module] if args.module else MODULES:
            for name in survivors(exit_codes(args.root, module) or {}):
                print(name)
    else:
        rows = []
        not_run = []
        for module in MODULES:
            codes = exit_codes(args.root, module)
            if not codes:
                not_run.append(module)
                continue
            rows.append(score(module, codes).cells())
        print(table(rows, args.markdown))
        if not_run:
            print(f"not run yet: {', '.join(not_run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
