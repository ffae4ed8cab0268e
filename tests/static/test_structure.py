"""The package's shape holds: one owner of the run directory's paths and of the unit
name, no import cycle between modules, no module much over 450 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "prefixbench"
LAYOUT = PACKAGE / "measure" / "layout.py"

#: The run directory's file and folder names that only measure/layout.py may join.
RUN_FILES = frozenset({"run.json", "fingerprint.json", "startup.json", "compile.json",
                       "summary.json", "startup-journal.log", "restart-journal.log",
                       "tokenizer", "prompts", ".compile-cache"})

#: Hand-built run-directory paths and unit names in task files.
_YAML_PATHS = re.compile(r"prefix_bench_run_dir \}\}/|prefix_bench_run_dir ~|vllm-\{\{|"
                         r"'vllm-' ~|\"vllm-\" ~")


def _python_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _path_literals(path: Path) -> list[str]:
    """String constants used as a path operand: ``x / "name"`` or ``x.glob("*/name")``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str):
                    found.append(side.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in {"glob", "rglob"} and node.args
              and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append(node.args[0].value.rsplit("/", 1)[-1])
    return found


def test_only_the_layout_joins_the_run_directorys_file_names() -> None:
    offenders = {str(p.relative_to(ROOT)): hits for p in _python_files() if p != LAYOUT
                 if (hits := sorted(set(_path_literals(p)) & RUN_FILES))}
    assert offenders == {}, "use prefixbench.measure.layout.RunLayout for these paths"


def test_no_task_file_builds_a_run_directory_path_or_a_unit_name() -> None:
    yaml = [ROOT / "benchmark.yml", *sorted((ROOT / "playbooks").rglob("*.yml")),
            *sorted((ROOT / "roles").rglob("*.yml")), *sorted((ROOT / "benchmarks").glob("*.yml"))]
    assert len(yaml) > 30
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in yaml for n, line in enumerate(p.read_text().splitlines(), 1)
                 if _YAML_PATHS.search(line) and not line.lstrip().startswith("#")]
    assert offenders == [], ("paths from the prefixbench_run_files filter, unit names from "
                             "prefixbench_unit_name")


def _imports(path: Path, known: set[str]) -> set[str]:
    """The package modules ``path`` imports, anywhere in it (function-level included)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m in known and m != "prefixbench"}


def test_no_import_cycle_between_modules() -> None:
    files = {(_module_name(p)): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    graph = {m: _imports(p, known) - {m} for m, p in files.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert cycles == []


def test_no_module_much_over_450_lines() -> None:
    shipped = [*PACKAGE.rglob("*.py"), *(ROOT / "plugins").rglob("*.py"),
               *(ROOT / "library").glob("*.py"), *(ROOT / "module_utils").glob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in shipped
            if (n := len(p.read_text().splitlines())) > 470}
    assert long == {}
