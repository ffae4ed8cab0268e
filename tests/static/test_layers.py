"""The package's floors: no module imports from a floor above its own.

``src/prefixbench`` is built in floors, lowest first (one line of :data:`FLOORS` each):

1. ``measure``: records, the run directory, metrics, expected ratios, statistics. Imports
   no other floor.
2. ``engines``: what a vLLM server does with requests, per platform (the KV-cache
   managers, the schedulers, the model's tokenizer) and the workloads it is sent.
   Imports ``measure`` (a workload's expected ratio is ``measure.ratios``').
3. ``predict``: a workload or your prompts replayed through the engine models.
4. ``hosts`` and ``servers``, one floor: what a Neuron host must have, and the two
   ``vllm serve`` units it runs; they share the instance family and the release, each
   way.
5. ``bench``: one ``vllm bench serve`` run and its record; it names the servers' units
   and asks ``predict`` for the record's expectation.
6. ``config``: the settings, validated against every floor below (workloads, instances,
   releases, server flags) and the plan.
7. ``report``: the run directory in, the tables and verdicts out.
8. ``frontend``: the ``prefixbench`` command, which runs all of them (``report`` and
   ``compare`` by module name, :func:`prefixbench.frontend.cli_shared.report_module`).

The package root (``prefixbench``, its ``__version__``) is below every floor. An import
is any ``import`` or ``from ... import`` anywhere in a module (inside functions too) and
any ``importlib.import_module`` of a literal name. The imports that run up a floor and
stay are :data:`EXCEPTIONS`, each with its reason; one no longer made fails the test too,
so the list stays exactly what the code does.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "prefixbench"

FLOORS: Final[tuple[tuple[str, ...], ...]] = (
    ("measure",),
    ("engines",),
    ("predict",),
    ("hosts", "servers"),
    ("bench",),
    ("config",),
    ("report",),
    ("frontend",),
)

#: (importer, imported) -> why it runs up a floor and stays.
EXCEPTIONS: Final[dict[tuple[str, str], str]] = {
    ("prefixbench.hosts.doctor", "prefixbench.config.modelfit"):
        "the doctor asks for the room the model download needs (the profile's checkpoint "
        "size, config.modelfit.checkpoint_gib), which the preflight's model-fit rules own",
    ("prefixbench.report.cli", "prefixbench.frontend.runview"):
        "`prefixbench report` / `compare` exit with the front end's one table of exit "
        "codes (runview.EXIT_*, outcome_code), which `prefixbench run` shares",
}

_FLOOR_OF: Final = {package: n for n, floor in enumerate(FLOORS) for package in floor}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """``node``'s module as an absolute name (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The ``prefixbench`` modules ``path`` (module ``module``) imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, path.name == "__init__.py", node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return {name for name in found if name == "prefixbench" or name.startswith("prefixbench.")}


def floor(module: str) -> int:
    """``module``'s floor; -1 for the package root."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__version__":
        return -1
    return _FLOOR_OF[parts[1]]


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def upward_imports() -> set[tuple[str, str]]:
    """Every (importer, imported) pair that runs up a floor."""
    modules = _modules()
    known = set(modules)
    return {(module, name) for module, path in modules.items()
            for name in imports(path, module, known) if floor(name) > floor(module)}


def test_every_package_has_a_floor() -> None:
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(_FLOOR_OF), "place a new package in FLOORS (and say why)"


def test_no_import_runs_up_a_floor() -> None:
    upward = upward_imports()
    unexplained = sorted(upward - set(EXCEPTIONS))
    assert unexplained == [], (
        "these imports run up a floor (tests/static/test_layers.py FLOORS): move the "
        "imported code down, or the importer up")
    assert sorted(set(EXCEPTIONS) - upward) == [], "an exception no longer needed: drop it"


def test_the_parser_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walker finds function-level, relative and importlib imports, so none slips by."""
    source = tmp_path / "probe.py"
    source.write_text(
        "import importlib\n"
        "from prefixbench.measure import stats\n"
        "def late():\n"
        "    from prefixbench.report.build import x  # noqa: PLC0415\n"
        "    from ..frontend import cli  # noqa: PLC0415\n"
        "    return importlib.import_module('prefixbench.config.plan')\n")
    known = {"prefixbench.measure.stats", "prefixbench.report.build",
             "prefixbench.frontend.cli", "prefixbench.config.plan"}
    assert imports(source, "prefixbench.engines.probe", known) == known
