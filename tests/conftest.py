"""Shared test helpers: paths of the checkout and its controller venv."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ansible_env() -> dict[str, str]:
    """Environment for running the venv's ansible commands from the repository root."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    env.pop("ANSIBLE_INVENTORY", None)
    return env


@pytest.fixture(scope="session")
def sim_artifacts(sim_fleet: Any) -> Path:
    """The simulated fleet's repositories and model, built (or reused) under its www/.

    Builds the signed Neuron apt repository, the vLLM-on-CPU wheelhouse (downloaded once
    into the cache) and the tiny model; the fleet's fabric web server serves them.
    """
    from prefixbench_sim.artifacts import build_all  # noqa: PLC0415 - integration only

    www: Path = sim_fleet.paths.www
    build_all(www)
    return www
