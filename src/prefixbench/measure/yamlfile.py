"""YAML files a user writes, read with one line per mistake: ``file:line:column: what``.

Every YAML file the bundle reads on a user's behalf (a ``--workloads`` file, a tolerances
file, an inventory and its ``group_vars``/``host_vars``, an ``-e @file``) goes through
:func:`load_yaml_file`, so a parse error names the file and the line instead of a
traceback, and :func:`check_inventory_yaml` pre-parses an inventory before Ansible does
(whose message names neither). Tags Ansible adds (``!vault``, ``!unsafe``) are accepted
as opaque strings: only the syntax is checked here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["YamlFileError", "check_inventory_yaml", "load_yaml_file", "yaml_error_line"]

#: The suffixes Ansible reads as YAML in an inventory directory, group_vars and host_vars.
YAML_SUFFIXES = (".yml", ".yaml", ".json")


class YamlFileError(ValueError):
    """A YAML file that cannot be parsed; the message is ``file:line:column: problem``."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's own tags as plain strings."""


def _opaque(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    del suffix
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _opaque)


def yaml_error_line(path: str | Path, exc: yaml.YAMLError) -> str:
    """``path:line:column: problem`` of a parse error (lines and columns from 1)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    said = f"{problem} ({context})" if context else str(problem)
    return f"{where}: YAML syntax error: {said}"


def load_yaml_file(path: str | Path) -> Any:
    """The parsed document of ``path``; :class:`YamlFileError` (one line, with the file and
    the line) when it cannot be read or parsed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlFileError(f"{p}: cannot read ({exc.__class__.__name__}: {exc})") from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader plus opaque tags
    except yaml.YAMLError as exc:
        raise YamlFileError(yaml_error_line(p, exc)) from None


def _inventory_files(inventory: Path) -> list[Path]:
    """The files Ansible would read as YAML: the inventory file (or a directory's YAML
    files), and ``group_vars``/``host_vars`` beside it, nested folders included."""
    if inventory.is_file():
        files = [inventory] if inventory.suffix in YAML_SUFFIXES else []
        base = inventory.parent
    else:
        files = sorted(p for p in inventory.iterdir()
                       if p.is_file() and p.suffix in YAML_SUFFIXES)
        base = inventory
    for sub in ("group_vars", "host_vars"):
        folder = base / sub
        if folder.is_dir():
            files += sorted(p for p in folder.rglob("*")
                            if p.is_file() and (p.suffix in YAML_SUFFIXES or p.suffix == "")
                            and not p.name.startswith("."))
    return files


def check_inventory_yaml(inventory: str | Path) -> None:
    """Parse every YAML file of an inventory (the file or directory given, its
    ``group_vars`` and ``host_vars``); :class:`YamlFileError` names the first broken one
    with its line."""
    for path in _inventory_files(Path(inventory)):
        load_yaml_file(path)
