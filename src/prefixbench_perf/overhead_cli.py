"""``make bench-overhead ARGS="..."``: the bundle's own cost, as figures.

``run RUN_DIR``
    a finished run's wall time against the slowest host's bench durations plus server
    start-ups.
``fleet [-i INVENTORY] [--slow HOST=CORES] [--strategy free|linear] [--workloads K] [--limit H]``
    on the simulated fleet (up and provisioned): the whole of ``benchmark.yml`` with K
    tiny workloads, a fresh run id and a fresh compile store, optionally with one host
    held to CORES of CPU for the whole run (``prefixbench_sim.throttle``), then the run's
    figures as ``run`` prints them: each host's own wall (run start to its last bench,
    less any wait for a compile leader), its longest gap between a server's health and
    its first bench, and the fleet's wall over the slowest host's own wall. With
    ``--strategy linear`` the hosts' play runs in Ansible's lockstep instead, the
    comparison.
``plugin HOST [-n N]``
    on the simulated fleet (up, provisioned, deployed): one workload through the action
    plugin (``ansible-playbook`` of ``bench_one.yml`` beside this module) against the same
    ``vllm bench serve`` run directly on the host over SSH, alternated N times, each run
    with a fresh seed; prints the medians and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from prefixbench.bench.benchrun import BenchRequest
from prefixbench.engines.workloads import Workload
from prefixbench_perf.overhead import run_overhead

ROOT = Path(__file__).resolve().parents[2]
#: One bench through the action plugin, against a running server.
PLAYBOOK = Path(__file__).resolve().parent / "bench_one.yml"
WORKLOAD = {"name": "overhead", "prefix_repetition_prefix_len": 3072,
            "prefix_repetition_suffix_len": 1024, "prefix_repetition_num_prefixes": 5,
            "prefix_repetition_output_len": 16, "num_prompts": 20, "max_concurrency": 1}


def _plugin(host_name: str, runs: int) -> int:
    from prefixbench_sim.fleet import Fleet  # noqa: PLC0415 - needs root and the fleet
    from prefixbench_sim.layout import FleetPaths  # noqa: PLC0415

    fleet = Fleet(FleetPaths.from_env(ROOT))
    host = next((h for h in fleet.hosts() if h.name == host_name and fleet.is_up(h)), None)
    if host is None:
        print(f"bench-overhead: {host_name} is not a running simulated host "
              "(scripts/simfleet status)", file=sys.stderr)
        return 2
    fleet.ssh(host, ["systemctl", "start", "vllm-cached.service"], timeout=60)
    for _ in range(120):
        code = fleet.ssh(host, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                "http://127.0.0.1:8000/health"]).stdout.strip()
        if code == "200":
            break
        time.sleep(5)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    plugin_s: list[float] = []
    direct_s: list[float] = []
    spans: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pb-overhead-") as tmp:
        for i in range(runs):
            # The plugin's bench takes its seed from the settings' plan (a base seed of
            # its own per run); the bare command's is another, so no prompt repeats.
            wl_b = Workload.from_dict({**WORKLOAD, "seed": 90000 + i})
            run_dir = Path(tmp) / f"run{i}"
            t0 = time.monotonic()
            proc = subprocess.run(
                ["ansible-playbook", "-i", "inventories/sim", str(PLAYBOOK),
                 "--limit", host_name, "-e", f"overhead_run_dir={run_dir}",
                 "-e", json.dumps({"prefixbench_workloads": [WORKLOAD],
                                   "prefixbench_base_seed": 70000 + 1000 * i})],
                cwd=ROOT, env=env, capture_output=True, text=True, check=False)
            plugin_s.append(time.monotonic() - t0)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], file=sys.stderr)
                return 1
            record = json.loads(next(run_dir.rglob("rep1.json")).read_text())
            spans.append(_span(record["started_at"], record["ended_at"]))
            req = BenchRequest(host=host_name, configuration="cached", workload=wl_b,
                               repetition=1, base_url="http://127.0.0.1:8000",
                               model="tiny-gptoss", tokenizer="/opt/models/tiny-gptoss",
                               vllm_executable="/opt/vllm-prefixbench/venv/bin/vllm")
            t0 = time.monotonic()
            out = fleet.ssh(host, req.argv("/var/lib/vllm-prefixbench", 3600), timeout=3600)
            direct_s.append(time.monotonic() - t0)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            print(f"run {i + 1}/{runs}: plugin {plugin_s[-1]:.1f} s (its own span "
                  f"{spans[-1]:.0f} s), direct {direct_s[-1]:.1f} s", flush=True)
    med_p, med_d = statistics.median(plugin_s), statistics.median(direct_s)
    ratios = [p / d for p, d in zip(plugin_s, direct_s, strict=True)]
    print(f"median: ansible-playbook + plugin {med_p:.1f} s, plugin span "
          f"{statistics.median(spans):.0f} s, direct vllm bench serve over SSH {med_d:.1f} s")
    print(f"ratio plugin/direct (pairwise median): {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


def _fleet(inventory: str, slow: str, strategy: str, workloads: int, limit: str) -> int:
    from prefixbench_perf.scale import tiny  # noqa: PLC0415
    from prefixbench_sim.layout import parse_host_name  # noqa: PLC0415
    from prefixbench_sim.throttle import throttled  # noqa: PLC0415 - needs root and the fleet

    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="pb-fleet-") as tmp:
        extra = Path(tmp) / "workloads.json"
        extra.write_text(json.dumps(tiny(workloads)))
        run_id = f"overhead-{strategy}-{time.strftime('%Y%m%dT%H%M%S')}"
        results = Path(tmp) / "results"
        argv = ["ansible-playbook", "benchmark.yml", "-i", inventory, "-e", f"@{extra}",
                "-e", f"prefixbench_run_id={run_id}", "-e", f"prefixbench_results_dir={results}",
                "-e", f"prefixbench_host_strategy={strategy}",
                *(["--limit", limit] if limit else [])]
        with contextlib.ExitStack() as stack:
            if slow:
                name, _, cores = slow.partition("=")
                moved = stack.enter_context(throttled(parse_host_name(name), float(cores or 0.5)))
                print(f"{name}: held to {cores or 0.5} cores ({moved} processes)", flush=True)
            t0 = time.monotonic()
            proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                                  check=False)
            print(f"ansible-playbook ({strategy}) exited {proc.returncode} after "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:])
            return 1
        print("\n".join(run_overhead(results / run_id).lines()))
    return 0


def _span(start: str, end: str) -> float:
    import datetime as dt  # noqa: PLC0415

    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-overhead", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="a finished run's wall time against its essentials")
    run.add_argument("run_dir", type=Path)
    fleet = sub.add_parser("fleet", help="the whole benchmark on the simulated fleet, one "
                           "host made slower")
    fleet.add_argument("-i", "--inventory", default="inventories/sim")
    fleet.add_argument("--slow", default="", help="HOST=CORES, e.g. trn3-sim-1=0.3")
    fleet.add_argument("--strategy", choices=["free", "linear"], default="free")
    fleet.add_argument("--workloads", type=int, default=1)
    fleet.add_argument("--limit", default="", help="the hosts, as ansible-playbook --limit")
    plug = sub.add_parser("plugin", help="the action plugin against the bare command")
    plug.add_argument("host")
    plug.add_argument("-n", "--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if args.mode == "run":
        try:
            print("\n".join(run_overhead(args.run_dir).lines()))
        except (OSError, ValueError, KeyError) as exc:
            print(f"bench-overhead: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.mode == "fleet":
        return _fleet(args.inventory, args.slow, args.strategy, args.workloads, args.limit)
    return _plugin(args.host, args.runs)


if __name__ == "__main__":
    raise SystemExit(main())
