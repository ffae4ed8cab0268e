"""Everything the bundle runs on a host works on the newest Python, toward 3.14.

AWS's Neuron 2.33 DLAMI and vLLM image "ship Python 3.14 on Ubuntu 26.04" (vllm-neuron
setup guide at aws-neuron-sdk v2.33.0). What the bundle runs there with the host's
interpreters: its modules (``library/``, ``module_utils/``, sent by Ansible; ansible-core
2.21 looks for python3.14 first, ``INTERPRETER_PYTHON_FALLBACK`` in its
``config/base.yml``), the doctor's probe (``hosts/doctor_probe.py``), the preloaded bench
client (``bench/warm_client.py``) and the ``python -c`` probes of the task files.

No 3.14 interpreter can be installed on these machines (CPython is not on PyPI, and
python.org and GitHub are out of reach), so the code runs here on the newest one found
(:func:`newest_python`: the venv's, pyenv's, /usr/bin's) and is checked, on any
interpreter, for what Python 3.14 removed or turned into a warning ("What's New In Python
3.14", docs.python.org/3.14/whatsnew/3.14.html, sections "Removed" and PEP 765).
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent

HOST_FILES = sorted([*ROOT.glob("library/*.py"), *ROOT.glob("module_utils/*.py"),
                     ROOT / "src/prefixbench/hosts/doctor_probe.py",
                     ROOT / "src/prefixbench/bench/warm_client.py"])


def _version(python: Path) -> tuple[int, ...]:
    try:
        out = subprocess.run([str(python), "-c", "import sys; print(*sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(int(p) for p in out.split())


def newest_python() -> tuple[Path, tuple[int, ...]] | None:
    """The newest CPython 3 this machine has (the hosts' floor, 3.11, or newer)."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found = [Path(sys.executable), *pyenv.glob("versions/3.*/bin/python3"),
             *Path("/usr/bin").glob("python3.[0-9]*"),
             *Path("/usr/local/bin").glob("python3.[0-9]*")]
    versions = [(p, _version(p)) for p in found
                if re.fullmatch(r"python3(\.\d+)?", p.name) and p.exists()]
    usable = [(p, v) for p, v in versions if v >= (3, 11)]
    return max(usable, key=lambda pv: pv[1]) if usable else None


NEWEST = newest_python()
needs_newest = pytest.mark.skipif(NEWEST is None, reason="no Python 3.11 or newer found")


def task_snippets() -> list[tuple[str, str]]:
    """The ``python -c`` programs of the task files: (where, code)."""
    out = []
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        def walk(node: object, where: str = str(path.relative_to(ROOT))) -> None:
            if isinstance(node, dict):
                for value in node.values():
                    walk(value, where)
            elif isinstance(node, list):
                for i, item in enumerate(node[:-1]):
                    if item == "-c" and i > 0 and "python" in str(node[i - 1]):
                        out.append((where, str(node[i + 1])))
                for item in node:
                    walk(item, where)
        walk(yaml.safe_load(path.read_text()))
    return out


def test_the_host_code_is_found() -> None:
    names = {p.name for p in HOST_FILES}
    assert {"doctor_probe.py", "warm_client.py", "prefixbench_host_efa.py",
            "prefixbench_compile_cache.py"} <= names
    assert len(task_snippets()) >= 4


@needs_newest
def test_every_host_file_and_task_probe_compiles_without_warnings(tmp_path: Path) -> None:
    assert NEWEST is not None
    python, version = NEWEST
    snippets = []
    for i, (_where, code) in enumerate(task_snippets()):
        # Jinja in a snippet is rendered before it runs; a placeholder stands for it.
        snippet = tmp_path / f"snippet{i}.py"
        snippet.write_text(re.sub(r"\{\{.*?\}\}", "X", code))
        snippets.append(str(snippet))
    check = ("import sys\nfor p in sys.argv[1:]:\n"
             "    compile(open(p, encoding='utf-8').read(), p, 'exec')\n")
    proc = subprocess.run([str(python), "-W", "error", "-c", check,
                           *map(str, HOST_FILES), *snippets],
                          capture_output=True, text=True, timeout=120, check=False)
    print(f"host code compiled with {python} (Python {'.'.join(map(str, version))})")
    assert proc.returncode == 0, proc.stderr


@needs_newest
def test_the_doctor_probe_runs_on_the_newest_interpreter(tmp_path: Path) -> None:
    assert NEWEST is not None
    python, _ = NEWEST
    cache = tmp_path / "cache"
    cache.mkdir()
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({
        "platform": "cpu", "imports": ["json"], "distributions": [], "compiler": "sh",
        "devices": "", "neuron_ls": "", "cache_dir": str(cache), "nofile": 64,
        "model_dir": str(tmp_path / "model"), "vocab_dir": "", "efa_dir": str(tmp_path),
        "only": ["imports", "compiler", "devices", "cache", "open_files", "vocabulary",
                 "efa"]}))
    proc = subprocess.run(
        [str(python), "-W", "error", str(ROOT / "src/prefixbench/hosts/doctor_probe.py"),
         str(cfg)], capture_output=True, text=True, timeout=60, check=True,
        env={"PATH": os.environ["PATH"], "NEURON_SKIP_EFA_AFFINITY": "1"})
    checks = json.loads(proc.stdout.split("PREFIXBENCH-DOCTOR ", 1)[1])
    assert {n: c["ok"] for n, c in checks.items() if n != "neuron_ls"} == dict.fromkeys(
        ("imports", "compiler", "devices", "cache", "open_files", "vocabulary", "efa"),
        True), checks


@pytest.fixture
def newest_client(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The preloaded bench client served by the newest interpreter (test double entry)."""
    if NEWEST is None:
        pytest.skip("no Python 3.11 or newer found")
    python, _ = NEWEST
    sock = tmp_path / "client.sock"
    proc = subprocess.Popen(
        [str(python), "-W", "error", str(ROOT / "src/prefixbench/bench/warm_client.py"),
         "serve", str(sock), "warm_entry_double:main"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(HERE)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not sock.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout
        time.sleep(0.05)
    yield python, sock
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert not sock.exists()


def test_the_bench_client_forks_a_bench_on_the_newest_interpreter(
        newest_client: tuple[Path, Path], tmp_path: Path) -> None:
    python, sock = newest_client
    note = tmp_path / "note.json"
    cold = tmp_path / "vllm"
    cold.write_text(f"#!{python}\nimport sys; sys.path.insert(0, {str(HERE)!r})\n"
                    "import warm_entry_double; sys.exit(warm_entry_double.main())\n")
    cold.chmod(0o755)
    proc = subprocess.run(
        [str(python), "-I", "-S", "-W", "error",
         str(ROOT / "src/prefixbench/bench/warm_client.py"), "run", str(sock), "--",
         str(cold), "3"],
        env={"PATH": os.environ["PATH"], "PREFIXBENCH_CLIENT_FILE": str(note)},
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(note.read_text())["client"] == "warm"
    assert "args=['3']" in proc.stdout


#: What Python 3.14 removed ("What's New In Python 3.14", "Removed"): attribute or
#: imported names, by module. ast's node classes deprecated since 3.8; pkgutil's
#: find_loader/get_loader (deprecated 3.12); importlib.abc's resource ABCs (moved to
#: importlib.resources.abc in 3.11); asyncio's child watchers and their policy methods;
#: collections.abc and typing ByteString; urllib.request's URLopener/FancyURLopener;
#: pty's master_open/slave_open; sqlite3's version/version_info.
REMOVED_IN_314 = {
    "ast": {"Num", "Str", "Bytes", "NameConstant", "Ellipsis"},
    "pkgutil": {"find_loader", "get_loader"},
    "importlib.abc": {"ResourceReader", "Traversable", "TraversableResources"},
    "asyncio": {"AbstractChildWatcher", "SafeChildWatcher", "FastChildWatcher",
                "MultiLoopChildWatcher", "ThreadedChildWatcher", "PidfdChildWatcher",
                "get_child_watcher", "set_child_watcher"},
    "collections.abc": {"ByteString"},
    "typing": {"ByteString"},
    "urllib.request": {"URLopener", "FancyURLopener"},
    "pty": {"master_open", "slave_open"},
    "sqlite3": {"version", "version_info"},
}
#: Changed in 3.14 so that code relying on the old behaviour breaks: asyncio's
#: get_event_loop() raises without a running loop, its policy system is deprecated
#: (removal in 3.16).
CHANGED_IN_314 = {"asyncio": {"get_event_loop", "set_event_loop_policy",
                              "get_event_loop_policy", "DefaultEventLoopPolicy"}}


def removed_uses(tree: ast.AST) -> list[str]:
    """Uses of :data:`REMOVED_IN_314` / :data:`CHANGED_IN_314` names, and PEP 765's
    return/break/continue leaving a ``finally`` block (a SyntaxWarning in 3.14)."""
    banned = {mod: REMOVED_IN_314.get(mod, set()) | CHANGED_IN_314.get(mod, set())
              for mod in {*REMOVED_IN_314, *CHANGED_IN_314}}
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in banned:
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if a.name in banned[node.module]]
        elif isinstance(node, ast.Attribute):
            base = _dotted(node.value)
            module = aliases.get(base.split(".", 1)[0], "")
            full = module + base[len(base.split(".", 1)[0]):] if module else base
            if node.attr in banned.get(full, set()):
                found.append(f"{full}.{node.attr}")
        elif isinstance(node, ast.Try):
            for stmt in node.finalbody:
                found += [f"{type(n).__name__.lower()} in finally (PEP 765)"
                          for n in _leaves_finally(stmt)]
    return found


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _leaves_finally(stmt: ast.stmt) -> list[ast.stmt]:
    """return anywhere, break/continue outside a loop of its own, below ``stmt``."""
    out: list[ast.stmt] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                             ast.ClassDef)):
            return
        if isinstance(node, ast.Return) or (
                isinstance(node, (ast.Break, ast.Continue)) and not in_loop):
            out.append(node)
        loop = isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        for child in ast.iter_child_nodes(node):
            visit(child, in_loop or loop)

    visit(stmt, False)
    return out


def test_the_check_finds_what_3_14_removed() -> None:
    code = ("import ast, pkgutil\nimport asyncio as aio\nfrom typing import ByteString\n"
            "x = ast.Num(1)\npkgutil.find_loader('x')\naio.get_event_loop()\n"
            "def f():\n    try:\n        pass\n    finally:\n        return 1\n"
            "def g():\n    for _ in ():\n        try:\n            pass\n"
            "        finally:\n            for _ in ():\n                break\n")
    assert sorted(removed_uses(ast.parse(code))) == [
        "ast.Num", "asyncio.get_event_loop", "from typing import ByteString",
        "pkgutil.find_loader", "return in finally (PEP 765)"]


@pytest.mark.parametrize("path", HOST_FILES, ids=lambda p: p.name)
def test_no_host_file_uses_what_3_14_removed(path: Path) -> None:
    assert removed_uses(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_no_task_probe_uses_what_3_14_removed() -> None:
    for where, code in task_snippets():
        assert removed_uses(ast.parse(re.sub(r"\{\{.*?\}\}", "X", code))) == [], where
