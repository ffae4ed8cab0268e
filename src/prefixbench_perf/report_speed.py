"""Time ``prefixbench report`` and ``prefixbench compare`` at fleet size.

Builds two synthetic runs (a run and its reference) of ``--hosts`` hosts x
``--repetitions`` repetitions of the tutorial's five benches, each record a real vLLM
CPU output (tests/fixtures/vllm-cpu-seed-procedure: bench JSON and the /metrics scrapes
before and after), its times scaled a little per host and repetition so that no two
are equal, written with its checksum as the bench writes it. Then times, each as the
user runs it (a fresh ``python -m prefixbench.frontend.cli`` process, imports
included): ``report RUN`` (every output format), ``compare RUN REFERENCE``, and
``compare RUN <a path that does not exist>`` (the fixed cost of a typo).

    make bench-report                                  # 16 hosts x 3 repetitions
    make bench-report ARGS="--hosts 4 --repetitions 1 --keep /tmp/runs"
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefixbench.engines.workloads import tutorial_workloads
from prefixbench.measure.layout import RunLayout, write_json_atomic
from prefixbench.measure.metrics import delta, extract_signals
from prefixbench.measure.records import BenchmarkRecord, ResultKey

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / \
    "vllm-cpu-seed-procedure"
BENCHES = (("baseline", "high_overlap"), ("baseline", "no_overlap"),
           ("cached", "high_overlap"), ("cached", "no_overlap"), ("cached", "sustained_c4"))
BLOCK_SIZE = 128
#: The target on this machine, per command (issue 45).
TARGET_S = 10.0


def _scaled(bench: dict[str, Any], factor: float) -> dict[str, Any]:
    out = dict(bench)
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "std_ttft_ms"):
        out[key] = bench[key] * factor
    if "latencies" in bench:
        out["latencies"] = [x * factor for x in bench["latencies"]]
        lat = sorted(out["latencies"])
        med = lat[len(lat) // 2]
        out["ttfts"] = [x * out["median_ttft_ms"] / 1000 / med for x in out["latencies"]]
    out["output_throughput"] = bench["output_throughput"] / factor
    return out


def build_run(root: Path, run_id: str, hosts: int, repetitions: int, drift: float) -> Path:
    """A run directory of ``hosts`` x ``repetitions`` x the five tutorial benches."""
    layout = RunLayout(root, run_id)
    workloads = {w.name: w.with_seed(0) for w in tutorial_workloads()}
    names = [f"host-{i:02d}" for i in range(hosts)]
    write_json_atomic(layout.run_dir / "run.json", {
        "schema_version": 1, "run_id": run_id, "started_at": "2026-11-29T08:00:00+00:00",
        "ended_at": "2026-11-29T09:00:00+00:00", "bundle_version": "0.1.0",
        "inventory": "synthetic", "hosts": names, "configurations": ["baseline", "cached"],
        "workloads": [w.to_dict() for w in workloads.values()],
        "repetitions": repetitions})
    inputs = {}
    for conf, wl in BENCHES:
        src = conf if (FIXTURES / f"{conf}_{wl}.json").exists() else "cached"
        bench = json.loads((FIXTURES / f"{src}_{wl}.json").read_text(encoding="utf-8"))
        before = (FIXTURES / f"metrics_{src}_{wl}_before.txt").read_text()
        after = (FIXTURES / f"metrics_{src}_{wl}_after.txt").read_text()
        inputs[(conf, wl)] = (bench, delta(extract_signals(before), extract_signals(after)))
    for h, host in enumerate(names):
        for (conf, wl), (bench, d) in inputs.items():
            w = workloads[wl]
            for rep in range(1, repetitions + 1):
                factor = drift * (1 + 0.01 * h + 0.003 * rep)
                layout.write_result(BenchmarkRecord(
                    key=ResultKey(host, conf, wl, rep), seed=0, bundle_version="0.1.0",
                    started_at="2026-11-29T08:00:00+00:00",
                    ended_at="2026-11-29T08:01:00+00:00", bench=_scaled(bench, factor),
                    workload=w.to_dict(), metrics_delta=d.to_dict(),
                    expected=w.expected_ratios(BLOCK_SIZE), measured=d.measured()))
    return layout.run_dir


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(*argv: str) -> tuple[float, float, int, str]:
    """Wall and CPU seconds, exit code and last output line of ``prefixbench ARGV`` in a
    new process (CPU: the steadier figure on a machine others share)."""
    cpu0, t0 = _child_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "prefixbench.frontend.cli", *argv],
                          capture_output=True, text=True, check=False)
    seconds, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return seconds, cpu, proc.returncode, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-report", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="build the runs in DIR and leave them (default: a temporary "
                             "directory, removed)")
    args = parser.parse_args(argv)
    if args.hosts < 1 or args.repetitions < 1:
        parser.error("--hosts and --repetitions must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        root = args.keep or Path(tmp)
        t0 = time.perf_counter()
        ref = build_run(root, "reference", args.hosts, args.repetitions, 1.0)
        run = build_run(root, "current", args.hosts, args.repetitions, 1.02)
        records = args.hosts * args.repetitions * len(BENCHES)
        print(f"built 2 runs of {args.hosts} hosts x {args.repetitions} repetitions x "
              f"{len(BENCHES)} benches ({records} records each) in "
              f"{time.perf_counter() - t0:.1f} s")
        results = [("report", *timed("report", str(run))),
                   ("compare", *timed("compare", str(run), str(ref))),
                   ("compare, bad reference path",
                    *timed("compare", str(run), str(root / "no-such-run")))]
    slow = False
    for name, seconds, cpu, code, last in results:
        target = 1.0 if "bad" in name else TARGET_S
        mark = "ok" if seconds < target else "OVER"
        slow |= seconds >= target
        print(f"{name}: {seconds:.2f} s wall, {cpu:.2f} s CPU (target < {target:g} s: "
              f"{mark}); exit {code}: {last}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
