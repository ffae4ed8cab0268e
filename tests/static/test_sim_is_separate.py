"""The product never imports the simulated fleet: ``prefixbench.sim`` is test and demo
tooling, reached only by scripts/simfleet, the tests or a benchmark of prefixbench.perf."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "prefixbench"


def _module_level_imports(path: Path) -> list[str]:
    """Imports executed when the module is imported (not those inside functions)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_no_product_module_imports_the_simulated_fleet() -> None:
    offenders = {}
    product = [p for p in PACKAGE.rglob("*.py") if "sim" not in p.relative_to(PACKAGE).parts]
    product += sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "library").glob("*.py"))
    assert len(product) > 40
    for path in product:
        bad = [n for n in _module_level_imports(path) if n.startswith("prefixbench.sim")]
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}
