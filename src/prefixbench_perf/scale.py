"""``make bench-scale ARGS="..."``: the controller's cost per host and per bench, at
several fleet sizes (a benchmark that prints figures, not a test).

For each count N of ``--hosts`` and each count K of ``--workloads`` it runs
``ansible-playbook benchmark.yml`` on the first N hosts of the inventory's
``neuron_fleet`` group, hosts already provisioned and deployed (``--skip-tags
provision,deploy``), with K tiny workloads (2K benches per host: one per configuration),
a fresh run id each time, and reads the controller's CPU time (user + system of
ansible-playbook and every process it waited for, as ``/usr/bin/time`` counts it) and
the wall time. A flat CPU per host means the controller scales with the fleet. With two
values of K the marginal CPU of one bench follows (the difference over the extra
benches): what each bench costs the controller, apart from the run's fixed per-host
part (preflight, run directory, compile cache, fingerprint, report).

    make bench-scale ARGS="-i inventories/sim --hosts 1,2,4 --workloads 1,3"
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prefixbench.measure.layout import RunLayout

ROOT = Path(__file__).resolve().parents[2]

def tiny(workloads: int) -> dict[str, object]:
    """``workloads`` workloads small enough that the controller's share of a run shows."""
    return {"prefixbench_workloads": [{
        "name": f"tiny{k}", "prefix_repetition_prefix_len": 1024,
        "prefix_repetition_suffix_len": 256, "prefix_repetition_num_prefixes": 2,
        "prefix_repetition_output_len": 4, "num_prompts": 4, "max_concurrency": 1}
        for k in range(1, workloads + 1)],
        "prefixbench_repetitions": 1, "prefixbench_fail_on": ["failed_bench"]}


@dataclass(frozen=True)
class Point:
    """One run of the series."""

    hosts: int
    benches: int
    wall_s: float
    cpu_s: float

    @property
    def cpu_per_host(self) -> float:
        return self.cpu_s / self.hosts

    @property
    def cpu_per_bench(self) -> float:
        return self.cpu_s / self.benches if self.benches else float("nan")

    def line(self) -> str:
        return (f"{self.hosts:>5}  {self.benches // self.hosts:>8}  {self.benches:>7}  "
                f"{self.wall_s:>7.1f}  {self.cpu_s:>7.1f}  {self.cpu_per_host:>8.1f}  "
                f"{self.cpu_per_bench:>9.2f}")


HEADER = "hosts  per host  benches   wall s   CPU s  CPU/host  CPU/bench"


def fleet_hosts(inventory: str, env: dict[str, str]) -> list[str]:
    """The ``neuron_fleet`` hosts of ``inventory``, in inventory order."""
    out = subprocess.run(["ansible-inventory", "-i", inventory, "--list"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True).stdout
    data = json.loads(out)

    def members(group: str) -> list[str]:
        node = data.get(group) or {}
        found = list(node.get("hosts") or [])
        for child in node.get("children") or []:
            found += [h for h in members(child) if h not in found]
        return found

    return members("neuron_fleet")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_point(inventory: str, hosts: Sequence[str], results: Path, env: dict[str, str],
              extra: Path) -> Point:
    run_id = f"scale-{len(hosts)}-{time.strftime('%Y%m%dT%H%M%S')}"
    argv = ["ansible-playbook", "benchmark.yml", "-i", inventory, "--limit", ",".join(hosts),
            "--skip-tags", "provision,deploy", "-e", f"@{extra}",
            "-e", f"prefixbench_run_id={run_id}", "-e", f"prefixbench_results_dir={results}"]
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"bench-scale: ansible-playbook exited {proc.returncode} on "
                         f"{len(hosts)} hosts (output above)")
    benches = len(RunLayout(results, run_id).load_results())
    return Point(len(hosts), benches, wall, cpu)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventories/sim")
    parser.add_argument("--hosts", default="1,2,4", help="fleet sizes, e.g. 1,2,4")
    parser.add_argument("--workloads", default="1,3",
                        help="tiny workloads per run, e.g. 1,3 (two values: the marginal "
                        "CPU of a bench)")
    parser.add_argument("--results", type=Path,
                        help="results directory (default: a temporary one)")
    args = parser.parse_args(argv)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    counts = [int(n) for n in args.hosts.split(",")]
    hosts = fleet_hosts(args.inventory, env)
    if len(hosts) < max(counts):
        print(f"bench-scale: {args.inventory} has {len(hosts)} hosts in neuron_fleet, "
              f"{max(counts)} needed (scripts/simfleet up {max(counts)}, then provision "
              "and deploy them)", file=sys.stderr)
        return 2
    sizes = [int(k) for k in args.workloads.split(",")]
    with tempfile.TemporaryDirectory(prefix="pb-scale-") as tmp:
        results = args.results or Path(tmp) / "results"
        print(HEADER, flush=True)
        points: dict[tuple[int, int], Point] = {}
        for n in counts:
            for k in sizes:
                extra = Path(tmp) / f"tiny{k}.json"
                extra.write_text(json.dumps(tiny(k)))
                points[n, k] = run_point(args.inventory, hosts[:n], results, env, extra)
                print(points[n, k].line(), flush=True)
    for k in sizes:
        first, last = points[counts[0], k], points[counts[-1], k]
        print(f"{2 * k} benches per host: CPU per host from {counts[0]} to {counts[-1]} "
              f"hosts {first.cpu_per_host:.1f} -> {last.cpu_per_host:.1f} s "
              f"({last.cpu_per_host / first.cpu_per_host:.2f}x; 1.00 = flat)")
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        for n in counts:
            extra_benches = points[n, hi].benches - points[n, lo].benches
            if extra_benches > 0:
                marginal = (points[n, hi].cpu_s - points[n, lo].cpu_s) / extra_benches
                fixed = points[n, lo].cpu_per_host - marginal * 2 * lo
                print(f"{n} host(s): marginal controller CPU per bench {marginal:.2f} s; "
                      f"fixed per host {fixed:.1f} s")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
