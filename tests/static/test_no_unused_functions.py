"""Every public top-level function and class of the package is used by the product: named
somewhere in the bundle's code (the package, the plugins, modules, roles, playbooks,
scripts, the Makefile) besides its own definition. A function only its tests call says
nothing to a user and drifts from what the code does (``hosts.releases.origin_label``
labelled every release "manifest of ...", a release read from the host too, and was shown
nowhere). Decorated functions are registered by their decorator (the preflight rules) and
count as used.

The names below were already so when this check was added; each says what uses it.
A name leaves the list when it is used or deleted."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "prefixbench"
#: Where a use counts: the bundle's own code, not its tests or docs.
PRODUCT = ("src", "plugins", "library", "module_utils", "roles", "playbooks", "scripts")
PRODUCT_FILES = ("Makefile", "pyproject.toml", "ansible.cfg")

#: ``module:name`` -> what uses it.
KNOWN: dict[str, str] = {
    "prefixbench.hosts.releases:available_releases": "tests only",
    "prefixbench.hosts.release_match:venvs_from_probe": "tests only",
    "prefixbench.hosts.release_match:dlami_venvs": "tests only",
    "prefixbench.servers.server:process_environment": "tests only",
    "prefixbench.measure.bench_json:load_bench_result": "tests only",
}


def _product_text() -> str:
    parts = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                try:
                    parts.append(path.read_text(encoding="utf-8"))
                except UnicodeDecodeError:
                    continue
    parts += [(ROOT / name).read_text(encoding="utf-8") for name in PRODUCT_FILES]
    return "\n".join(parts)


def _public_definitions() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.FunctionDef | ast.ClassDef)
                    and not node.name.startswith("_") and not node.decorator_list):
                out.append((module, node.name))
    return out


def unused() -> list[str]:
    """``module:name`` of every public definition named once only in the product (its
    definition)."""
    words = Counter(re.findall(r"\w+", _product_text()))
    return [f"{module}:{name}" for module, name in _public_definitions()
            if words[name] <= 1]


def test_every_public_function_is_used_by_the_product() -> None:
    found = unused()
    assert sorted(set(found) - set(KNOWN)) == [], (
        "used by nothing but its tests: use it where a user sees it, or delete it")
    assert sorted(set(KNOWN) - set(found)) == [], "used or deleted now: drop it from KNOWN"
