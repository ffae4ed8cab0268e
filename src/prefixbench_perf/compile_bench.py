"""``make bench-compile ARGS="..."``: what the shared compile cache saves, measured on a
fleet (a benchmark that prints figures, not a test).

Three tiny runs of ``benchmark.yml`` (one workload, both configurations; hosts already
provisioned and deployed) against one store of their own:

1. **cold**: every host's compile cache emptied, the store empty. Per key one host
   compiles and publishes, the others of its key wait and restore.
2. **fresh**: every host's compile cache emptied again, as on new instances; the store
   has every key. Nothing should compile.
3. **warm**: nothing emptied. Nothing should compile, nothing is copied.

It prints, per run, the compilations across the fleet against the target (one per key
on the cold run, zero after), and the time to healthy of each kind of start: a cold
compile, a follower (restore after the leader's publish, then start), a fresh host (fetch
and restore, then start) and a warm one; the restore's own time is included
(``compile.json`` ``restore_s``).

It empties the hosts' compile caches (``--empty-host-caches`` says you mean it): run it
on a benchmark fleet, not one serving traffic.

    make bench-compile ARGS="-i inventories/sim --empty-host-caches"
    make bench-compile ARGS="... -e prefixbench_compile_cache_cold=compile"
    make bench-compile ARGS="-i inv --empty-host-caches --store s3://bucket/bench-compile"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixbench.measure.layout import COMPILE, STARTUP, RunLayout
from prefixbench_perf.scale import ROOT, fleet_hosts, tiny

RUNS = ("cold", "fresh", "warm")


@dataclass(frozen=True)
class Start:
    """One server start of a run, as its compile.json and startup.json tell it."""

    host: str
    configuration: str
    key: str | None
    role: str
    compiled: bool
    restored_files: int
    healthy_s: float
    restore_s: float

    @property
    def kind(self) -> str:
        if self.compiled:
            return "compiled"
        if self.role == "follower":
            return "follower"
        return "fetched" if self.restored_files else "warm"

    @property
    def total_s(self) -> float:
        return self.healthy_s + self.restore_s


def read_starts(run_dir: Path) -> list[Start]:
    layout = RunLayout.of(str(run_dir))
    out = []
    for host in sorted(p.name for p in run_dir.iterdir() if p.is_dir()):
        startups = layout.server_records(host, STARTUP)
        for conf, path in layout.server_records(host, COMPILE).items():
            record = json.loads(path.read_text())
            startup = json.loads(startups[conf].read_text()) if conf in startups else {}
            out.append(Start(host, conf, record.get("key"), str(record.get("role")),
                             bool(record.get("compiled")),
                             int(record.get("restored_files") or 0),
                             float(startup.get("elapsed_s") or 0.0),
                             float(record.get("restore_s") or 0.0)))
    return out


def empty_caches(inventory: str, hosts: Sequence[str], directory: str,
                 env: Mapping[str, str]) -> None:
    proc = subprocess.run(["ansible", "-i", inventory, ",".join(hosts), "-b", "-m",
                           "ansible.builtin.file", "-a", f"path={directory} state=absent"],
                          cwd=ROOT, env=dict(env), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:])
        raise SystemExit(f"bench-compile: could not empty {directory} on the hosts")


def run(inventory: str, hosts: Sequence[str], results: Path, run_id: str, *,
        extra: Sequence[str], env: Mapping[str, str]) -> list[Start]:
    argv = ["ansible-playbook", "benchmark.yml", "-i", inventory, "--limit", ",".join(hosts),
            "--skip-tags", "provision,deploy", *(a for e in extra for a in ("-e", e)),
            "-e", f"prefixbench_run_id={run_id}", "-e", f"prefixbench_results_dir={results}"]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(env), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:])
        raise SystemExit(f"bench-compile: ansible-playbook exited {proc.returncode} on the "
                         f"{run_id} run (output above)")
    return read_starts(results / run_id)


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):6.1f}" if values else "     -"


def report(runs: Mapping[str, list[Start]]) -> list[str]:
    """The figures: compilations per run against the target, time to healthy by kind."""
    keys = {s.key for s in runs["cold"] if s.key}
    lines = [f"{len(keys)} compile key(s) across {len({s.host for s in runs['cold']})} "
             "host(s)", "", "run     starts  compiled  target  restored  warm"]
    for name, starts in runs.items():
        # at most one per key on the cold run (configurations may share graphs), then none
        target = len(keys) if name == "cold" else 0
        compiled = sum(s.compiled for s in starts)
        lines.append(f"{name:<6}  {len(starts):>6}  {compiled:>8}  {'<=' + str(target):>6}  "
                     f"{sum(s.kind in ('fetched', 'follower') for s in starts):>8}  "
                     f"{sum(s.kind == 'warm' for s in starts):>4}"
                     + ("" if compiled <= target else "   <- off target"))
    every = [s for starts in runs.values() for s in starts]
    lines += ["", "time to healthy (median s; restore included)   n   restore  start  total"]
    for kind, label in (("compiled", "cold compile"), ("follower", "follower, leader's copy"),
                        ("fetched", "fresh host, fetched from the store"),
                        ("warm", "warm host (its own cache)")):
        group = [s for s in every if s.kind == kind]
        lines.append(f"  {label:<44} {len(group):>2}  {_median([s.restore_s for s in group])}"
                     f" {_median([s.healthy_s for s in group])} "
                     f"{_median([s.total_s for s in group])}")
    cold = [s.total_s for s in every if s.kind == "compiled"]
    fetched = [s.total_s for s in every if s.kind == "fetched"]
    if cold and fetched:
        lines.append(f"fresh host with a fetched cache / cold compile: "
                     f"{statistics.median(fetched) / statistics.median(cold):.2f}x")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-compile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", "--inventory", default="inventories/sim")
    parser.add_argument("--hosts", type=int, default=0, help="the first N hosts (0: all)")
    parser.add_argument("--store", default="", help="compile store: a directory or "
                        "s3://bucket/prefix (default: a new temporary directory); it "
                        "must not hold these keys yet")
    parser.add_argument("--empty-host-caches", action="store_true",
                        help="required: the cold and fresh runs empty the hosts' caches")
    parser.add_argument("-e", "--extra-vars", action="append", default=[],
                        help="more ansible-playbook -e values (e.g. S3 credentials)")
    args = parser.parse_args(argv)
    if not args.empty_host_caches:
        print("bench-compile: this empties the hosts' compile caches; pass "
              "--empty-host-caches to go on", file=sys.stderr)
        return 2
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    hosts = fleet_hosts(args.inventory, env)
    hosts = hosts[:args.hosts] if args.hosts else hosts
    if not hosts:
        print(f"bench-compile: {args.inventory} has no neuron_fleet hosts", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%S")
    with tempfile.TemporaryDirectory(prefix="pb-compile-") as tmp:
        results = Path(tmp) / "results"
        settings: dict[str, Any] = {**tiny(1), "prefixbench_compile_cache_store":
                                    args.store or str(Path(tmp) / "store")}
        extra = Path(tmp) / "extra.json"
        extra.write_text(json.dumps(settings))
        extras = [f"@{extra}", *args.extra_vars]
        runs: dict[str, list[Start]] = {}
        directory = ""
        for name in RUNS:
            if name in ("cold", "fresh"):
                directory = directory or _cache_dir(args.inventory, hosts[0], env)
                empty_caches(args.inventory, hosts, directory, env)
            print(f"bench-compile: {name} run on {len(hosts)} host(s) ...", flush=True)
            started = time.monotonic()
            runs[name] = run(args.inventory, hosts, results, f"compile-{name}-{stamp}",
                             extra=extras, env=env)
            print(f"bench-compile: {name} run done in {time.monotonic() - started:.0f} s",
                  flush=True)
    print("\n".join(report(runs)))
    return 0


def _cache_dir(inventory: str, host: str, env: Mapping[str, str]) -> str:
    """The host's compile-cache directory, from its inventory variables and the
    catalogue's defaults (prefixbench.servers.compile_cache.cache_dir)."""
    from prefixbench.config.catalogue import BY_NAME  # noqa: PLC0415
    from prefixbench.servers.compile_cache import cache_dir  # noqa: PLC0415

    out = subprocess.run(["ansible-inventory", "-i", inventory, "--host", host], cwd=ROOT,
                         env=dict(env), capture_output=True, text=True, check=True).stdout
    hostvars = json.loads(out)
    names = ("prefixbench_platform", "vllm_service_cache_root")
    return cache_dir({n: hostvars.get(n, BY_NAME[n].default) for n in names})


if __name__ == "__main__":
    raise SystemExit(main())
