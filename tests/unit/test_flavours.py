"""The DLAMI flavour's script and the key of its cached venv (no fleet)."""

from __future__ import annotations

import pytest

from prefixbench.hosts import releases
from prefixbench_sim.flavours import dlami_script, venv_cache_key

BASE = (b"torch==2.13.0+cpu --hash=sha256:00\n", "0.21.0.1.0.0+794754d",
        "opt/aws_neuronx_venv", "python3.11 1700000000")


@pytest.mark.parametrize("index", range(len(BASE)))
def test_the_venv_key_changes_with_each_input(index: int) -> None:
    changed = list(BASE)
    changed[index] = changed[index] + (b"x" if isinstance(changed[index], bytes) else "x")
    assert venv_cache_key(*changed) != venv_cache_key(*BASE)  # type: ignore[arg-type]
    assert venv_cache_key(*BASE) == venv_cache_key(*BASE)


def test_the_key_does_not_run_inputs_together() -> None:
    # The same bytes split differently between two inputs give another key.
    assert venv_cache_key(b"ab", "c", "d", "e") != venv_cache_key(b"a", "bc", "d", "e")


def test_a_venv_from_the_cache_is_not_built_again() -> None:
    release = releases.load_release("2.31.0-vllm-beta")
    venv = str(release.dlami["venv"])
    built = dlami_script(release)
    assert f"python3 -m venv {venv}" in built and "pip install" in built
    ready = dlami_script(release, venv_ready=True)
    assert "python3 -m venv" not in ready and "pip install" not in ready
    # Everything else is the same script: the apt source, the packages, the group.
    for line in ("apt-get install", "groupadd -r neuron", "signed-by=/etc/apt/keyrings"):
        assert line in ready and line in built, line
