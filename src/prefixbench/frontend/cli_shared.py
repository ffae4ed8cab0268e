"""What the subcommands of the ``prefixbench`` command share: the program's name, the usage
error (one line on stderr, exit 2), and the hand-off to :mod:`prefixbench.report.cli`
(``report``, ``compare``, and ``run --reference``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from prefixbench.frontend.runview import EXIT_USAGE

__all__ = ["PROG", "VALUE_OPTIONS", "UsageError", "missing_run_dir", "report_module"]

PROG = "prefixbench"


class UsageError(Exception):
    """A bad argument: one line on stderr, exit 2."""


#: The options of ``report`` and ``compare`` that take a value (a test holds this to
#: their parsers in prefixbench.report.cli).
VALUE_OPTIONS = frozenset({"--format", "--upload", "--junit", "--tolerances"})


def missing_run_dir(command: str, argv: Sequence[str]) -> str | None:
    """The error of a run directory (``report``: RUN_DIR; ``compare``: RUN_DIR and
    REFERENCE_DIR) that does not exist, found before the report's modules are imported
    (they take most of a second); ``None`` when there is none to find here."""
    if "-h" in argv or "--help" in argv:
        return None
    positional: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            positional.append(arg)
    for path in positional[:2 if command == "compare" else 1]:
        if not Path(path).is_dir():
            return f"{path}: not a directory (expected results/<run_id>)"
    return None


def report_module(command: str, argv: Sequence[str], err: TextIO) -> int:
    """Run ``prefixbench.report.cli``'s ``report`` or ``compare`` with ``argv``; its exit
    code (exit 2 when that module cannot be imported)."""
    missing = missing_run_dir(command, argv)
    if missing is not None:
        print(f"{PROG} {command}: error: {missing}", file=err)
        return EXIT_USAGE
    try:
        module: Any = importlib.import_module("prefixbench.report.cli")
    except ImportError as exc:
        print(f"{PROG} {command}: unavailable: prefixbench.report.cli cannot be imported "
              f"({exc})", file=err)
        return EXIT_USAGE
    entry = module.report_main if command == "report" else module.compare_main
    return int(entry(list(argv)))
