"""How close one finished run's TTFT predictions came to what it measured, against the
goal (median within 10%, p99 within 25%), with the machine's other load beside each row
(prefixbench.report.ttft_accuracy). A benchmark that prints figures, not a test.

    make bench-ttft-accuracy ARGS="results/<run_id>"          # e.g. a `make demo` run
    make bench-ttft-accuracy ARGS="results/<run_id> --json"
"""

from __future__ import annotations

import argparse
import json
import sys

from prefixbench.report.load import load_run
from prefixbench.report.ttft_accuracy import GOAL_MEDIAN, GOAL_P99, accuracy, render_text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                    help="a finished run's directory (results/<run_id>)")
    ap.add_argument("--goal-median", type=float, default=GOAL_MEDIAN)
    ap.add_argument("--goal-p99", type=float, default=GOAL_P99)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    out = {}
    for run_dir in args.run_dirs:
        try:
            data = load_run(run_dir, accept_unchecksummed=True)
        except (OSError, ValueError) as exc:
            print(f"bench-ttft-accuracy: {run_dir}: {exc}", file=sys.stderr)
            return 2
        acc = accuracy(data, goal_median=args.goal_median, goal_p99=args.goal_p99)
        if not acc.rows:
            print(f"bench-ttft-accuracy: {run_dir}: no TTFT prediction (no host with a "
                  "baseline at concurrency 1 and its server's settings)", file=sys.stderr)
            return 2
        if args.json:
            out[run_dir] = acc.as_dict()
        else:
            print(render_text(acc, title=f"{run_dir} (run {data.run_id})"))
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
