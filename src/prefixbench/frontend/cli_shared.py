"""What the subcommands of the ``prefixbench`` command share: the program's name, the usage
error (one line on stderr, exit 2), and the hand-off to :mod:`prefixbench.report.cli`
(``report``, ``compare``, and ``run --reference``).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, TextIO

from prefixbench.frontend.runview import EXIT_USAGE

__all__ = ["PROG", "UsageError", "report_module"]

PROG = "prefixbench"


class UsageError(Exception):
    """A bad argument: one line on stderr, exit 2."""


def report_module(command: str, argv: Sequence[str], err: TextIO) -> int:
    """Run ``prefixbench.report.cli``'s ``report`` or ``compare`` with ``argv``; its exit
    code (exit 2 when that module cannot be imported)."""
    try:
        module: Any = importlib.import_module("prefixbench.report.cli")
    except ImportError as exc:
        print(f"{PROG} {command}: unavailable: prefixbench.report.cli cannot be imported "
              f"({exc})", file=err)
        return EXIT_USAGE
    entry = module.report_main if command == "report" else module.compare_main
    return int(entry(list(argv)))
