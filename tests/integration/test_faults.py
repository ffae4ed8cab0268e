"""The fault matrix: faults injected into real runs on the simulated fleet, each ending
with a complete run directory after a rerun, nothing measured lost or silently altered.

One run id, one small workload (2 benches per host), two hosts (``--limit``): the host
the faults hit, and a bystander that runs undisturbed and is left to write the report
when the other drops out (a run whose every host drops writes none: the report play
runs on the fleet's hosts). Four runs:

A. ``ansible-playbook benchmark.yml -vvv`` with an API key on the servers, while one
   host stops answering the controller during its baseline bench (its sshd frozen: from
   the controller, a network cut; the simulated hosts have no packet filter). The
   bystander's benches authenticate with the key. The key appears nowhere: -vvv output,
   results, unit files, ``systemctl show``, journal.
B. ``prefixbench run`` interrupted (SIGINT, as Ctrl+C) once a bench runs: exit 130 and
   no vLLM server left running on any host.
C. ``ansible-playbook`` with the controller's results disk (a tmpfs) full: the run stops
   with one clear line when it opens the run directory, before any server starts;
   nothing partial written, earlier records intact. (The bench action's own check, for
   a disk that fills during a run, is in tests/unit/test_benchrun_custom.py.)
D. The rerun completes: every bench has a result, each sent with the key.

The other faults run where their run already is: the vLLM engine killed mid-bench and
a finished record edited on disk (with its checksum, then without it) are in
test_benchmark.py, whose resume measures both again; an API server killed with
``kill -9`` and brought back by systemd is in test_units.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import content_checksum
from prefixbench_sim.layout import SimHost
from prefixbench_sim.testing import SimFleetHandle
from prefixbench_sim.testing import run_playbook as playbook

pytestmark = pytest.mark.integration

RUN_ID = "integration-faults"
API_KEY = "pbsim-api-key-4d9e1b7c0a5f3e21"  # a test key for the simulated servers
ENV_FILE = "/etc/vllm-prefixbench/vllm.env"


@pytest.fixture
def results_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs for the run's results: a controller disk that can fill up."""
    mount = tmp_path / "results"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def bench_running(fleet: SimFleetHandle, host: SimHost) -> bool:
    # The pattern's [b] keeps pgrep from matching the shell that runs it.
    return bool(fleet.sh(host, "pgrep -f 'vllm [b]ench serve' || true").strip())


def active_units(fleet: SimFleetHandle, host: SimHost) -> list[str]:
    out = fleet.sh(host, "systemctl is-active vllm-baseline.service vllm-cached.service "
                         "|| true")
    return [unit for unit, state in zip(("baseline", "cached"), out.split(), strict=True)
            if state not in {"inactive", "failed"}]


def freeze_sshd(fleet: SimFleetHandle, host: SimHost, sig: str) -> None:
    """SIGSTOP / SIGCONT every sshd process of ``host`` (through nsenter, not SSH)."""
    proc = fleet.fleet.exec(host, ["pkill", f"-{sig}", "-f", "^sshd"])
    assert proc.returncode == 0, proc.stderr


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` until ``leave`` bytes are free."""
    import shutil  # noqa: PLC0415

    filler = disk / "filler.bin"
    with filler.open("wb") as handle:
        while shutil.disk_usage(disk).free > leave + 2**20:
            handle.write(b"\0" * 2**20)
        handle.flush()
    return filler


def test_fault_matrix(sim_fleet: SimFleetHandle, *, sim_artifacts: Path,
                      dlami_host: SimHost, repo_root: Path, ansible_env: dict[str, str],
                      results_disk: Path, tmp_path: Path) -> None:
    del sim_artifacts  # built: the hosts' package sources
    fleet = sim_fleet
    cut_victim, bystander = dlami_host, fleet.hosts[0]
    assert cut_victim.name != bystander.name
    limit = f"{bystander.name},{cut_victim.name}"
    secrets = tmp_path / "secrets.yml"  # what a vault file holds, decrypted
    secrets.write_text(f"vllm_service_api_key: {API_KEY}\n")
    workload = repo_root / "tests/integration/vars/fault_workload.yml"
    common = ["--limit", limit, "-e", f"@{workload}",
              "-e", f"prefixbench_run_id={RUN_ID}",
              "-e", f"prefixbench_results_dir={results_disk}"]
    layout = RunLayout(results_disk, RUN_ID)

    # -- A: the host cut off, the API key on, at -vvv ----------------------------------
    # Output to a file: -vvv writes megabytes, a pipe read only at the end would block it.
    log_a = tmp_path / "run-a.log"
    with log_a.open("w") as sink:
        proc = subprocess.Popen(
            ["ansible-playbook", "-i", "inventories/sim", "benchmark.yml", "-vvv",
             "--skip-tags", "provision", "-e", f"@{secrets}", *common],
            cwd=repo_root, env=ansible_env, stdout=sink, stderr=subprocess.STDOUT)
    cut = False
    start = time.monotonic()
    try:
        while proc.poll() is None and time.monotonic() - start < 1800:
            if not cut and bench_running(fleet, cut_victim):
                freeze_sshd(fleet, cut_victim, "STOP")
                cut = True
            time.sleep(0.5)
        proc.wait(timeout=900)
    finally:
        if cut:
            freeze_sshd(fleet, cut_victim, "CONT")
        if proc.poll() is None:
            proc.kill()
    out = log_a.read_text(errors="replace")
    assert cut, out[-5000:]
    assert proc.returncode != 0, out[-8000:]
    assert API_KEY not in out, "the API key is in the -vvv output"

    # The host cut off has no result of the bench it was running, and the report lists
    # it among the failures (a dropped host, or its benches not run); nothing is partial.
    # The bystander has both results: its benches authenticated with the key.
    done = layout.completed()
    assert (cut_victim.name, "baseline") not in {(k.host, k.configuration) for k in done}
    assert {(k.host, k.configuration) for k in done if k.host == bystander.name} == {
        (bystander.name, "baseline"), (bystander.name, "cached")}, out[-6000:]
    summary = json.loads((layout.run_dir / "summary.json").read_text())
    assert any(cut_victim.name in json.dumps(f) for f in summary["failures"]), summary
    assert layout.stale_temp_files() == []

    # No trace of the key: results, the units anyone may read, systemd, the journal.
    assert not [p for p in results_disk.rglob("*") if p.is_file()
                and API_KEY.encode() in p.read_bytes()]
    for host in (bystander, cut_victim):
        assert fleet.sh(host, f"stat -c '%a %U' {ENV_FILE}").strip() == "600 root"
        seen = fleet.sh(host, "systemctl cat vllm-baseline.service vllm-cached.service; "
                              "systemctl show vllm-baseline.service vllm-cached.service; "
                              "journalctl --no-pager -o cat -u 'vllm-*'")
        assert API_KEY not in seen, host.name

    # -- B: Ctrl+C of prefixbench run: the playbook ends, the servers stop -------------
    log_b = tmp_path / "run-b.log"
    with log_b.open("w") as sink:
        cli = subprocess.Popen(
            ["prefixbench", "run", "-i", "inventories/sim", "--limit", limit, "--tags",
             "bench", "--run-id", RUN_ID, "-e", f"@{secrets}", "-e", f"@{workload}",
             "-e", f"prefixbench_results_dir={results_disk}"],
            cwd=repo_root, env=ansible_env, stdout=sink, stderr=subprocess.STDOUT)
    start = time.monotonic()
    interrupted = False
    try:
        while cli.poll() is None and time.monotonic() - start < 900:
            if not interrupted and any(bench_running(fleet, h) for h in fleet.hosts):
                cli.send_signal(signal.SIGINT)
                interrupted = True
            time.sleep(0.5)
        cli.wait(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
    cli_out = log_b.read_text(errors="replace")
    assert interrupted, cli_out[-5000:]
    assert cli.returncode == 130, cli_out[-5000:]
    assert "servers stopped on every reachable host" in cli_out, cli_out[-3000:]
    assert f"resume with: prefixbench run --run-id {RUN_ID}" in cli_out, cli_out[-3000:]
    for host in fleet.hosts:
        assert active_units(fleet, host) == [], host.name
        clients = fleet.sh(host, "systemctl list-units --no-legend --state=active "
                                 "'prefixbench-bench-client-*' || true").strip()
        assert clients == "", (host.name, clients)
    assert layout.completed() >= done

    # -- C: the results disk full: one clear line, nothing partial, records intact -----
    before = {p: p.read_bytes() for p in layout.run_dir.rglob("rep*.json")}
    filler = fill(results_disk, leave=4 * 2**20)
    full, _ = playbook(repo_root, ansible_env, "benchmark.yml", "--skip-tags", "provision",
                       "-e", f"@{secrets}", *common, timeout=1500)
    filler.unlink()
    assert full.returncode != 0, full.stdout[-6000:]
    assert "results disk full:" in full.stdout, full.stdout[-6000:]
    assert "running vllm bench serve" not in full.stdout, full.stdout[-6000:]
    for host in (bystander, cut_victim):  # refused before any server started
        assert active_units(fleet, host) == [], host.name
    assert layout.stale_temp_files() == []
    for path, content in before.items():
        if not path.name.endswith(".failed.json"):
            assert path.read_bytes() == content, f"{path} changed while the disk was full"

    # -- D: the rerun completes, every bench sent with the key --------------------------
    rerun, _ = playbook(repo_root, ansible_env, "benchmark.yml", "--skip-tags", "provision",
                        "-e", f"@{secrets}", *common, timeout=1800)
    assert rerun.returncode == 0, rerun.stdout[-8000:]
    assert layout.failures() == {}
    assert len(layout.completed()) == 2 * 2
    for key in layout.completed():
        record = json.loads(layout.result_path(key).read_text())
        assert record["checksum"] == content_checksum(record), key
    for host in fleet.hosts:
        assert active_units(fleet, host) == [], host.name
    # The servers go back to no key for the tests after this one.
    redeploy, _ = playbook(repo_root, ansible_env, "playbooks/deploy.yml", "--limit", limit)
    assert redeploy.returncode == 0, redeploy.stdout[-4000:]

