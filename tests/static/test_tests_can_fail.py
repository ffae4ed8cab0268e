"""Every fast-tier test can fail: a test function under tests/unit or tests/static that
asserts nothing (no ``assert``, no ``pytest.raises``/``warns``/``fail``, no mock
``assert_*`` call, no ``raise AssertionError``, and no call to a function of the tests
that does one of these, followed through the functions it calls) is a test that passes
whatever the code does, unless it is listed below with the reason it still guards
something.

Calls are resolved by the module they are made in: a name defined there, a name
imported from another test module (``from report_runs import make_run``), or an
attribute of an imported test module. Nothing is resolved by name alone across modules,
so a ``run`` that asserts in one file does not vouch for another file's ``run``."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The fast tier: the tests checked.
CHECKED = (ROOT / "tests" / "unit", ROOT / "tests" / "static")
#: Every module a fast-tier test may import a helper from (tests/unit and tests/static
#: are on pytest's path as top-level modules, and so is tests/conftest.py).
MODULES = {p.stem: p for d in CHECKED for p in d.glob("*.py")} | {
    "conftest": ROOT / "tests" / "conftest.py"}

#: ``module::test`` -> why it can still fail without an assertion of its own.
ALLOWED: dict[str, str] = {}

_PYTEST_CHECKS = {"raises", "warns", "fail", "deprecated_call"}

Key = tuple[str, str]  # (module, function name)


def _functions(tree: ast.Module) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    out: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.setdefault(node.name, []).append(node)
    return out


def _imports(tree: ast.Module, known: Iterable[str]
             ) -> tuple[dict[str, Key], dict[str, str]]:
    """Names imported from test modules, and test modules imported whole (by alias)."""
    known = set(known)
    names: dict[str, Key] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in known and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    modules[alias.asname or alias.name] = alias.name
    return names, modules


def _own(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body: a function defined inside it counts only
    where it is called (as any other helper)."""
    for child in ast.iter_child_nodes(fn):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield child
        yield from _own(child)


def _checks_itself(node: ast.AST) -> bool:
    """An assertion made by the node itself, not by a function it calls."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        return isinstance(exc, ast.Name) and exc.id == "AssertionError"
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "pytest":
            return func.attr in _PYTEST_CHECKS
        return func.attr.startswith("assert")  # unittest.mock's assert_called_*...
    return isinstance(func, ast.Name) and func.id in {"raises", "warns"}


class Suite:
    """The test modules parsed (``modules``: name -> file), and which of their functions
    assert."""

    def __init__(self, modules: Mapping[str, Path] = MODULES) -> None:
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8"), str(p))
                      for m, p in modules.items()}
        self.defs = {m: _functions(t) for m, t in self.trees.items()}
        self.imported = {m: _imports(t, modules) for m, t in self.trees.items()}
        self.asserting = self._fixpoint()

    def _callees(self, module: str, fn: ast.AST) -> Iterator[Key]:
        names, modules = self.imported[module]
        for node in _own(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name):
                if f.id in self.defs[module]:
                    yield (module, f.id)
                elif f.id in names:
                    yield names[f.id]
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                    and f.value.id in modules:
                yield (modules[f.value.id], f.attr)

    def _fixpoint(self) -> set[Key]:
        found = {(m, name) for m, defs in self.defs.items() for name, fns in defs.items()
                 if any(_checks_itself(n) for fn in fns for n in _own(fn))}
        while True:
            more = {(m, name) for m, defs in self.defs.items() for name, fns in defs.items()
                    if (m, name) not in found
                    and any(c in found for fn in fns for c in self._callees(m, fn))}
            if not more:
                return found
            found |= more

    def unasserted(self) -> list[str]:
        """``module::test`` of every test function in CHECKED that asserts nothing."""
        out = []
        for m, tree in self.trees.items():
            if m == "conftest" or not m.startswith("test_"):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and node.name.startswith("test") \
                        and (m, node.name) not in self.asserting:
                    out.append(f"{m}::{node.name}")
        return sorted(out)


def test_every_fast_test_asserts_something() -> None:
    found = Suite().unasserted()
    assert sorted(set(found) - set(ALLOWED)) == [], "tests that cannot fail"


def test_the_allow_list_names_only_tests_that_assert_nothing() -> None:
    found = set(Suite().unasserted())
    assert sorted(set(ALLOWED) - found) == [], "stale entries: they assert now, or are gone"
    assert all(len(why.split()) >= 4 for why in ALLOWED.values()), "a reason per entry"


SAMPLES = {
    "helpers": """
def check(x):
    assert x
def run(x):
    return x
""",
    "other": """
def run(x):
    assert x
""",
    "test_sample": """
import pytest
from helpers import check, run
import helpers as h

def test_asserts():
    assert 1 + 1 == 2
def test_through_a_helper():
    check(3)
def test_through_a_module():
    h.check(3)
def test_raises():
    with pytest.raises(ValueError):
        int("x")
def test_mock(m):
    m.assert_called_once_with(1)
def test_nested_helper_called():
    def inner():
        raise AssertionError("no")
    inner()
def test_only_runs():
    run(3)
def test_nested_helper_never_called():
    def inner():
        assert False
def test_calls_nothing_known():
    print(check)
""",
}


def test_the_rule_follows_calls_by_module_not_by_name(tmp_path: Path) -> None:
    """A call counts when it reaches an assertion through the module's own names or
    imports; ``run`` asserts in another module, not in the one imported."""
    modules = {}
    for name, text in SAMPLES.items():
        modules[name] = tmp_path / f"{name}.py"
        modules[name].write_text(text, encoding="utf-8")
    assert Suite(modules).unasserted() == [
        "test_sample::test_calls_nothing_known",
        "test_sample::test_nested_helper_never_called",
        "test_sample::test_only_runs",
    ]
