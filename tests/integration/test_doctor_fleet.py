"""prefixbench doctor on the simulated fleet: every host ready under the server unit's own
sandbox, and a failure the sandbox causes tied to its directive.

Runs after the units are deployed (test_units): the service user, the venvs and the
model are in place. The cpu platform's equivalents stand in for Neuron's checks (the
C++ compiler torch inductor runs for neuronx-cc; the simulated neuron-ls, printing the
harness's own device figures (prefixbench_sim.layout.SIM_HARDWARE), for the real one;
torch and vLLM's cpu platform for libnrt's nrt_init).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from prefixbench_sim.testing import SimFleetHandle

pytestmark = pytest.mark.integration

CHECKS = {"imports", "compiler", "devices", "neuron_ls", "cache", "open_files", "model",
          "vocabulary", "runtime"}


def doctor(repo_root: Path, env: dict[str, str], *args: str
           ) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(["prefixbench", "doctor", "-i", "inventories/sim", *args],
                          cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    return proc, time.monotonic() - start


def test_doctor(sim_fleet: SimFleetHandle, repo_root: Path,
                ansible_env: dict[str, str]) -> None:
    fleet = sim_fleet
    proc, took = doctor(repo_root, ansible_env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    for host in fleet.hosts:
        mine = {line.split()[2] for line in lines if line.split()[1] == host.name}
        assert mine == CHECKS, (host.name, proc.stdout)
    assert not [line for line in lines if line.startswith("FAIL")], proc.stdout
    print(f"\ndoctor on {len(fleet.hosts)} simulated hosts: {took:.0f} s")

    # A vocabulary the sandbox hides: readable by the service user on the host, but under
    # /home, which ProtectHome=yes makes inaccessible to the unit. The doctor fails that
    # check alone and names the directive (the search runs only the failing check).
    host = fleet.hosts[0]
    fleet.sh(host, "install -d -m 0755 /home/pb-doctor-vocab && "
                   "echo x > /home/pb-doctor-vocab/o200k_base.tiktoken")
    try:
        proc, took = doctor(repo_root, ansible_env, "--limit", host.name, "-e",
                            json.dumps({"model_cache_tiktoken": True,
                                        "model_cache_tiktoken_dir": "/home/pb-doctor-vocab"}))
    finally:
        fleet.sh(host, "rm -rf /home/pb-doctor-vocab")
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].split()[2] == "vocabulary", proc.stdout
    assert "the sandbox directive ProtectHome=yes breaks it" in proc.stdout, proc.stdout
    print(f"doctor naming the directive on one host: {took:.0f} s")
