"""What a user installs is the product alone: the simulated fleet (``prefixbench_sim``)
and the benchmarks of the bundle's own speed (``prefixbench_perf``) are development
tools beside it in ``src/``, reached by scripts/simfleet, the Makefile and the tests.
No product module imports them, and the package list the build takes from
pyproject.toml holds neither (the wheel itself: ``test_execution_environment``)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "prefixbench"
TOOLS = ("prefixbench_sim", "prefixbench_perf")


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, function-level imports included."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_product_module_imports_the_development_tools() -> None:
    product = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "plugins").rglob("*.py"))
    product += sorted((ROOT / "library").glob("*.py"))
    product += sorted((ROOT / "module_utils").glob("*.py"))
    assert len(product) > 100
    offenders = {str(p.relative_to(ROOT)): bad for p in product
                 if (bad := [n for n in _imports(p) if n.startswith(TOOLS)])}
    assert offenders == {}


def test_the_build_packages_the_product_alone() -> None:
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["packages"]["find"]
    built = set(find_packages(str(ROOT / find["where"][0]), include=find["include"]))
    for tool in TOOLS:
        assert (ROOT / "src" / tool / "__init__.py").is_file(), tool
    assert "prefixbench" in built and "prefixbench.predict" in built
    assert not any(p.startswith(TOOLS) or p.startswith("prefixbench.sim") for p in built)
    on_disk = {".".join(p.parent.relative_to(ROOT / "src").parts)
               for p in PACKAGE.rglob("__init__.py")}
    assert built == on_disk
