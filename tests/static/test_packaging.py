"""Installing the package prints no packaging deprecation: setuptools reads
``pyproject.toml`` without a warning (a ``project.license`` table made ``make venv`` and
``pip install .`` print a screen of them, three times)."""

from __future__ import annotations

import warnings
from pathlib import Path

from setuptools.config import pyprojecttoml
from setuptools.dist import Distribution

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_setuptools_reads_pyproject_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = pyprojecttoml.apply_configuration(Distribution(), PYPROJECT)
    assert dist.get_name() == "prefixbench"
    assert set(dist.extras_require) >= {"controller", "whatif"}
