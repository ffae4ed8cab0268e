"""Everything that differs between Neuron releases is manifest data
(src/prefixbench/data/neuron_releases/): no role file and no string in the package's code
names one release's versions, DLAMI venv or environment variable."""

from __future__ import annotations

import ast
from pathlib import Path

from prefixbench.hosts import releases

ROOT = Path(__file__).resolve().parents[2]


def release_literals() -> set[str]:
    """What only a release's manifest may say: its versions (apt, pip, vLLM, the DLAMI's
    plugin), its DLAMI venv, and the environment variables not every release sets."""
    rels = releases.load_all()
    out: set[str] = set()
    for rel in rels:
        out |= set(rel.known_apt().values())
        out |= {v for v in rel.pip_packages.values() if v}
        out |= {v for k, v in rel.dlami.items() if k in ("venv", "plugin", "ssm_parameter")}
    # Over the releases that state them (a manifest may leave them unknown).
    common = set.intersection(*(set(r.server_environment) for r in rels
                                if "server.environment" not in r.unknown_facts))
    out |= {n for r in rels for n in r.server_environment} - common
    # The unit's library directories some release's image sets and another's does not.
    common = set.intersection(*(set(r.library_path) for r in rels if r.library_path))
    out |= {d for r in rels for d in r.library_path} - common
    return out


def role_files() -> list[Path]:
    return sorted(p for p in (ROOT / "roles").rglob("*")
                  if p.is_file() and p.suffix in (".yml", ".yaml", ".j2"))


def code_strings(path: Path) -> list[str]:
    """The string constants of a module, docstrings left out (examples in prose)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
                      ) and node.body and isinstance(node.body[0], ast.Expr):
            docs.add(id(node.body[0].value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_literals_checked_are_the_ones_that_differ() -> None:
    found = release_literals()
    assert "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0" in found
    assert {"VLLM_NEURON_COMPILATION_TIMEOUT", "NEURON_LIBTORCH_COMPILATION_TIMEOUT",
            "2.31.15.0", "0.24.0.1.1.0", "/opt/amazon/efa/lib64"} <= found
    assert "/opt/aws/neuron/lib" not in found  # libnrt's, on every release
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in found  # every release sets it


def test_no_role_file_names_a_release_specific_value() -> None:
    literals = release_literals()
    hits = [f"{p.relative_to(ROOT)}: {lit}" for p in role_files()
            for lit in literals if lit in p.read_text()]
    assert hits == []


def test_no_string_in_the_package_names_a_release_specific_value() -> None:
    literals = release_literals()
    hits = [f"{p.relative_to(ROOT)}: {lit}"
            for p in sorted((ROOT / "src" / "prefixbench").rglob("*.py"))
            for s in code_strings(p) for lit in literals if lit in s]
    assert hits == []
