"""Integration fixtures: one simulated fleet per test session, always torn down.

``sim_fleet`` brings 4 hosts up once (``Fleet.up(4)``, the same code as
``scripts/simfleet up 4``) and tears the fleet down at the end of the session whatever
happens: failures, errors while bringing it up, Ctrl-C (pytest tears session fixtures
down on KeyboardInterrupt), SIGTERM (turned into KeyboardInterrupt), and as a last resort
at interpreter exit (see :func:`prefixbench_sim.testing.fleet_session`). It needs root;
without root it skips.

The fleet uses the default state directory (``<repo>/.simfleet``, or
``PREFIXBENCH_SIM_STATE``): a fleet already up there is adopted (``up`` is idempotent)
and is taken down at the end of the session like one the fixture started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from helpers.side_by_side import SCENARIOS, SideBySide, started

from prefixbench_sim.fleet import Fleet
from prefixbench_sim.layout import FleetPaths, SimHost
from prefixbench_sim.system import ensure_host_tools
from prefixbench_sim.testing import FLEET_SIZE, SimFleetHandle, fleet_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def controller_bin() -> Path:
    """The controller venv's bin dir (``scripts/bootstrap`` builds it when missing)."""
    bindir = ROOT / ".venv" / "bin"
    if not (bindir / "ansible").exists():
        subprocess.run([str(ROOT / "scripts" / "bootstrap")], check=True, timeout=1800)
    return bindir


@pytest.fixture(scope="session")
def sim_fleet() -> Iterator[SimFleetHandle]:
    if os.geteuid() != 0:
        pytest.skip(
            "the simulated fleet needs root (network namespaces, overlay mounts, "
            "systemd-nspawn); run the integration tests as root"
        )
    if shutil.which("systemd-nspawn") is None and shutil.which("apt-get") is None:
        pytest.skip("no systemd-nspawn, and no apt-get to install it")
    ensure_host_tools()
    with fleet_session(Fleet(FleetPaths.from_env(ROOT)), FLEET_SIZE) as handle:
        yield handle


#: The hosts that the fixtures below set up the way a Neuron DLAMI and AWS's guide leave
#: one (prefixbench_sim.flavours): last quarter's image (the vLLM 0.21 DLAMI of
#: 2026-07-20), and the DLAMI of a release no manifest knows (flavour ``newer``:
#: prefixbench_sim.newer_release, the day AWS ships a release the bundle has no data for);
#: the other two stay bare. Every later test (provision, units, the side-by-side runs,
#: faults) therefore runs on every flavour. The 2.32 DLAMI's dressing is covered offline
#: (tests/unit/test_flavours.py).
DLAMI_HOST: Final = "trn2-sim-2"
NEWER_HOST: Final = "trn2-sim-3"


@pytest.fixture(scope="session")
def dlami_hosts(sim_fleet: SimFleetHandle, sim_artifacts: Path) -> dict[str, SimHost]:
    """Both DLAMI hosts dressed (idempotent: a dressed host is left as is), side by side:
    each DLAMI's venv is built by a pip install of the whole lock the first time (80-95 s
    of one core each; then unpacked from the cache), so the two share the two cores."""
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from prefixbench_sim import flavours  # noqa: PLC0415 - integration only

    dressings = {DLAMI_HOST: ("dlami", "2.31.0-vllm-beta"), NEWER_HOST: ("newer", "")}
    hosts = {name: sim_fleet.host(name) for name in dressings}
    with ThreadPoolExecutor(max_workers=len(dressings)) as pool:
        dressing = [pool.submit(flavours.dress, sim_fleet.fleet, hosts[name], flavour,
                                release or "2.31.0-vllm-beta")
                    for name, (flavour, release) in dressings.items()]
        for done in dressing:
            done.result()
    return hosts


@pytest.fixture(scope="session")
def dlami_host(dlami_hosts: dict[str, SimHost]) -> SimHost:
    """``trn2-sim-2`` dressed as a host from the vLLM 0.21 DLAMI of 2026-07-20 (2.31.0's
    packages)."""
    return dlami_hosts[DLAMI_HOST]


@pytest.fixture(scope="session")
def newer_host(dlami_hosts: dict[str, SimHost]) -> SimHost:
    """``trn2-sim-3`` dressed as a host from the DLAMI of a release no manifest knows
    (packages above every manifest's, its venv at a path none names, a plugin version none
    lists). The KV-capacity sweep runs on it (side_by_side): the whole benchmark playbook
    on a release read from the host."""
    return dlami_hosts[NEWER_HOST]


@pytest.fixture(scope="session")
def side_by_side(request: pytest.FixtureRequest, sim_fleet: SimFleetHandle, *,
                 sim_artifacts: Path, repo_root: Path, ansible_env: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory, dlami_host: SimHost,
                 newer_host: SimHost) -> Iterator[SideBySide]:
    """The single-host scenarios of this session (helpers/side_by_side.py), each on its
    own host, all started at once by the first test that asks (deselected ones are not)."""
    del sim_artifacts, dlami_host, newer_host  # built and dressed before they start
    selected = {item.name.split("[", 1)[0] for item in request.session.items}
    wanted = [name for name, s in SCENARIOS.items() if s.test in selected]
    yield from started(sim_fleet, repo_root, ansible_env,
                       tmp_path_factory.mktemp("side-by-side"), wanted)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the integration tests in the order the bundle's phases build on each other.

    The harness's own tests (test_simfleet.py) come first: their last one (down, nothing
    left, up again) hands every later test freshly booted hosts. Then provision (which
    starts from bare hosts), the server units, and the benchmark (which need provisioned
    hosts). The side-by-side scenarios (sweeps, your own traffic) are next to each
    other; between them they deploy every host, so the doctor (whose probe runs as the
    service user) comes after them. Only the integration items swap places.
    """
    here = Path(__file__).resolve().parent
    slots = [i for i, it in enumerate(items) if here in Path(str(it.path)).resolve().parents]
    order = ["test_simfleet.py", "test_provision.py", "test_units.py", "test_benchmark.py",
             "test_sweep_fleet.py", "test_custom_fleet.py", "test_doctor_fleet.py",
             "test_faults.py"]

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name == "test_teardown.py":  # removes what the others built: always last
            return len(order) + 1
        return order.index(name) if name in order else len(order)

    ordered = sorted((items[i] for i in slots), key=rank)
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item
