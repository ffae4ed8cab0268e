"""Shared test helpers: paths of the checkout and its controller venv."""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
