"""Test double of vLLM's console-script entry point for tests/unit/test_warm_client.py:
prints what it was run with, and sleeps or fails when asked to."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> int:
    args = sys.argv[1:]
    own_group = os.getpgid(0) == os.getpid()
    print(f"args={args} cwd={Path.cwd()} X={os.environ.get('X')} "
          f"IMPORTED={os.environ.get('DOUBLE_IMPORTED')} pgid_is_own={own_group}")
    print("to stderr", file=sys.stderr)
    if "sleep" in args:
        Path(args[-1]).write_text(str(os.getpid()))
        time.sleep(60)
    return int(args[0]) if args and args[0].isdigit() else 0


# What an import may do to the environment (torch sets variables when imported).
os.environ["DOUBLE_IMPORTED"] = "yes"

# What torch and vLLM leave for the interpreter's shutdown (slow finalizers): a client
# stopped by SIGTERM must not wait for them.
if os.environ.get("DOUBLE_ATEXIT_MARK"):
    import atexit

    atexit.register(Path(os.environ["DOUBLE_ATEXIT_MARK"]).write_text, "ran")
