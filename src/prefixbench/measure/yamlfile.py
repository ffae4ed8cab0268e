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

__all__ = ["YamlFileError", "check_inventory_yaml", "inventory_files_state",
           "inventory_yaml_problem", "load_yaml_file", "yaml_error_line", "yaml_file_problem"]

#: The suffixes Ansible reads as YAML in an inventory directory, group_vars and host_vars.
YAML_SUFFIXES = (".yml", ".yaml", ".json")


class YamlFileError(ValueError):
    """A YAML file that cannot be parsed; the message is ``file:line:column: problem``."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's own tags as plain strings, and refuses a key given
    twice in one mapping (YAML 1.2 forbids it; PyYAML and Ansible keep the last, so the
    first value is silently lost)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[str, int] = {}
        for key, _value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            if key.value in first:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key.value!r} (first given on line "
                    f"{first[key.value] + 1}; the later one would silently win)",
                    key.start_mark)
            first[key.value] = key.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _opaque(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    del suffix
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _opaque)


def _open_quote(text: str, line: int) -> tuple[int, int] | None:
    """The last quoted scalar before ``line`` (from 0) that runs over several lines, as
    (first line, last line): a quote left open swallows the lines up to the next one."""
    found = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > line:
                break
            if isinstance(token, yaml.ScalarToken) and token.style in ('"', "'") \
                    and token.end_mark.line > token.start_mark.line:
                found = (token.start_mark.line, token.end_mark.line)
    except yaml.YAMLError:
        pass
    return found


def _hint(text: str, exc: yaml.YAMLError, line: int) -> str:
    """What to look for, where PyYAML's words do not say it: a tab, an unclosed quote."""
    if "'\\t'" in str(getattr(exc, "problem", "")):
        return "; a tab character: YAML indents with spaces only"
    quoted = _open_quote(text, line)
    if quoted is not None and quoted[1] >= line - 1:
        return (f"; the quote opened on line {quoted[0] + 1} closes only on line "
                f"{quoted[1] + 1}: is a closing quote missing on line {quoted[0] + 1}?")
    problem = str(getattr(exc, "problem", ""))
    if problem.startswith("mapping values are not allowed") or "<block end>" in problem:
        lines = text.splitlines()
        above = next((n for n in range(min(line, len(lines)) - 1, -1, -1)
                      if lines[n].strip() and not lines[n].lstrip().startswith("#")), None)
        return ("; check this line's indentation" if above is None else
                f"; check this line's indentation against line {above + 1}'s")
    return ""


def yaml_error_line(path: str | Path, exc: yaml.YAMLError, text: str | None = None) -> str:
    """``path:line:column: problem`` of a parse error (lines and columns from 1); with
    the file's ``text``, a hint where the mistake is a tab or an unclosed quote."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    said = f"{problem} ({context})" if context else str(problem)
    hint = _hint(text, exc, mark.line) if text is not None and mark is not None else ""
    return f"{where}: YAML syntax error: {said}{hint}"


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
        raise YamlFileError(yaml_error_line(p, exc, text)) from None


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


def inventory_files_state(inventory: str | Path) -> tuple[tuple[str, int, int], ...]:
    """The YAML files of an inventory as they are now: (path, mtime in ns, size) each, in
    :func:`check_inventory_yaml`'s order. Equal states parse alike: a caller that found an
    inventory clean can skip parsing it again while its state is unchanged (a file added,
    removed, rewritten or touched changes it)."""
    state = []
    for path in _inventory_files(Path(inventory)):
        try:
            st = path.stat()
        except OSError:
            st = None
        state.append((str(path), st.st_mtime_ns if st else -1, st.st_size if st else -1))
    return tuple(state)


def check_inventory_yaml(inventory: str | Path) -> None:
    """Parse every YAML file of an inventory (the file or directory given, its
    ``group_vars`` and ``host_vars``); :class:`YamlFileError` names the first broken one
    with its line."""
    for path in _inventory_files(Path(inventory)):
        load_yaml_file(path)


def yaml_file_problem(path: str | Path) -> str | None:
    """The one line that says what is wrong with the YAML file ``path``, or ``None``."""
    try:
        load_yaml_file(path)
    except YamlFileError as exc:
        return str(exc)
    return None


def inventory_yaml_problem(inventory: str | Path) -> str | None:
    """:func:`check_inventory_yaml` as a value: the one line naming the first broken file
    of an inventory (``file:line:column: what``), or ``None``. What the bundle's Ansible
    plugins call before Ansible reads the files (plugins/vars/prefixbench_yaml_check.py)."""
    try:
        check_inventory_yaml(inventory)
    except YamlFileError as exc:
        return str(exc)
    return None
