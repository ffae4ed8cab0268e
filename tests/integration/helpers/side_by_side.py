"""Single-host scenarios run side by side, each on its own simulated host.

The segment-size sweep, the KV-capacity sweep and the your-own-traffic run each drive one
host through ``benchmark.yml`` and assert only what their own records say (hit ratios,
what each point's units carried, which point is best by its own figures): none of them
compares a latency with a target, so another host's load cannot change their verdict.
Run one after the other they left the fleet's other hosts idle and the shared cores
half used (SSH round trips, health polls, the controller's own tasks). Here each runs
on a host of its own, all started together the first time one of their tests asks,
and each test waits for its own run only.

Latency-sensitive scenarios (the goodput ladder, the benchmark's TTFT comparisons) are
not run here: they keep the fleet to themselves.

Each run's output goes to a file (a pipe read only at the end could block a chatty run);
a run still going when the session ends is killed by its PID.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from helpers.custom_prompts import write_chat_traffic, write_multi_turn_chat

from prefixbench_sim.testing import SimFleetHandle

__all__ = ["SCENARIOS", "Scenario", "SideBySide", "started"]


@dataclass(frozen=True)
class Scenario:
    """One single-host run: the test that reads it, its host (index in the fleet), its
    run id and the extra ``ansible-playbook`` arguments (made in a scratch directory)."""

    test: str
    host: int
    run_id: str
    args: Callable[[Path], tuple[list[str], dict[str, int]]]


def _vars(name: str) -> Callable[[Path], tuple[list[str], dict[str, int]]]:
    return lambda _scratch: (["-e", f"@tests/integration/vars/{name}"], {})


def _custom(scratch: Path) -> tuple[list[str], dict[str, int]]:
    prompts, turns = scratch / "chat-traffic.jsonl", scratch / "multi-turn.jsonl"
    info = {"lines": write_chat_traffic(prompts), "turn_lines": write_multi_turn_chat(turns)}
    workloads = [{"name": "chat_traffic", "dataset_name": "custom",
                  "dataset_path": str(prompts), "custom_output_len": 8,
                  "max_concurrency": 1},
                 {"name": "chat_turns", "dataset_name": "custom",
                  "dataset_path": str(turns), "custom_output_len": -1,
                  "max_concurrency": 1, "disable_shuffle": True}]
    # (the calibration bench off: test_benchmark checks it; the tier keeps its time)
    return ["-e", json.dumps({"prefixbench_workloads": workloads,
                              "prefixbench_calibration": False})], info


#: Scenario name -> what it runs. Hosts: 0 trn2-sim-1, 1 trn2-sim-2 (the DLAMI-dressed
#: host, its adopted venv), 2 trn3-sim-1.
SCENARIOS: Final[Mapping[str, Scenario]] = {
    "segment_sweep": Scenario("test_sweep_over_two_segment_sizes", 0, "integration-sweep",
                              _vars("sweep.yml")),
    "custom": Scenario("test_custom_prompts_prediction_within_one_point", 1,
                       "integration-custom", _custom),
    # On trn2-sim-3, the DLAMI of a release no manifest knows (flavour newer): the whole
    # benchmark playbook on a release read from the host (the custom scenario's
    # trn2-sim-2 is the 2026-07-20 DLAMI).
    "capacity_sweep": Scenario("test_capacity_sweep_measures_the_predicted_curve", 2,
                               "integration-capacity", _vars("capacity.yml")),
}


@dataclass
class Run:
    """A started run: its process, output file and start time."""

    scenario: Scenario
    host: str
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    info: dict[str, int] = field(default_factory=dict)
    ended: float | None = None

    def result(self, timeout: float = 2400) -> tuple[subprocess.CompletedProcess[str], float]:
        """Wait for the run; (its result with the whole output as stdout, its seconds)."""
        try:
            self.proc.wait(timeout=max(1.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.ended is None:
            self.ended = time.monotonic()
        out = self.log.read_text(errors="replace")
        done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, "")
        return done, self.ended - self.started


@dataclass
class SideBySide:
    """The scenarios of this session, started together; ``runs[name]`` once started."""

    runs: dict[str, Run]

    def __getitem__(self, name: str) -> Run:
        return self.runs[name]


def started(fleet: SimFleetHandle, root: Path, env: Mapping[str, str], scratch: Path,
            wanted: Sequence[str]) -> Iterator[SideBySide]:
    """Start the ``wanted`` scenarios at once; yield them; kill what is left at the end."""
    runs: dict[str, Run] = {}
    try:
        for name in wanted:
            scenario = SCENARIOS[name]
            host = fleet.hosts[scenario.host].name
            work = scratch / name
            work.mkdir(parents=True, exist_ok=True)
            extra, info = scenario.args(work)
            subprocess.run(["rm", "-rf", str(root / "results" / scenario.run_id)], check=True)
            log = work / "ansible.log"
            with log.open("wb") as sink:
                proc = subprocess.Popen(
                    ["ansible-playbook", "-i", "inventories/sim", "benchmark.yml",
                     "--skip-tags", "provision", "--limit", host, *extra,
                     "-e", f"prefixbench_run_id={scenario.run_id}"],
                    cwd=root, env=dict(env), stdout=sink, stderr=subprocess.STDOUT)
            runs[name] = Run(scenario, host, proc, log, time.monotonic(), info)
        yield SideBySide(runs)
    finally:
        for run in runs.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
