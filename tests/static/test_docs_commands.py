"""Every command, setting, file and link the docs show works as written.

The docs are README.md, RUNBOOK.md, docs/*.md and each role's README (CHANGELOG.md is
history and is left out). A command is a line of a fenced code block, or an inline code
span, that runs ``prefixbench``, ``ansible-playbook`` or ``make``:

- ``prefixbench ...`` parses with the CLI's own parsers (no abbreviated flags);
- ``ansible-playbook ...`` parses with ansible-playbook's own parser, names a playbook
  that exists, and that playbook passes ``--syntax-check`` (once per playbook);
- ``make X`` names a target of the Makefile;
- a setting named in an ``-e`` extra var is in the settings catalogue (every other
  setting the docs name is checked by test_docs_settings.py);
- a repository path in backquotes, and every relative link, exists; a link's
  ``#anchor`` is a heading of its page.

``[--flag VALUE]`` (an optional part) is checked as if given.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from ansible.cli.playbook import PlaybookCLI
from test_docs_settings import DOCS as SETTINGS_DOCS
from test_docs_settings import NAME, NOT_SETTINGS

from prefixbench.config import settings
from prefixbench.frontend.cli import build_parser
from prefixbench.report.cli import compare_parser, report_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "RUNBOOK.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "roles").glob("*/README.md"))]
TOOLS = ("prefixbench", "ansible-playbook", "make")
#: Top-level entries a repository path in backquotes may start with (results/ is made by
#: runs, dot-folders by tools: neither is part of the checkout).
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".") and p.name != "results"}

_FENCE = re.compile(r"^([ \t]*)```.*?^\1```", re.S | re.M)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_OPTIONAL = re.compile(r"\[(-[^\[\]]*)\]")
_LINK = re.compile(r"\[[^\[\]]*\]\(([^()\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_SEPARATORS = {"&&", "||", ";", "|"}
_SHELL = {"sh", "bash", "shell", "console"}


def rel(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


# -- reading the docs ------------------------------------------------------------------------

def code_lines(text: str) -> Iterator[str]:
    """Each logical line of the shell blocks (continuations joined), then each inline
    span outside any block (whitespace collapsed)."""
    for block in _FENCE.finditer(text):
        lines = block.group(0).splitlines()
        if lines[0].strip().removeprefix("```") not in _SHELL:
            continue  # YAML, a diagram, sample output
        body = lines[1:-1]
        joined = ""
        for line in body:
            joined += line.strip()
            if joined.endswith("\\"):
                joined = joined[:-1] + " "
                continue
            yield joined
            joined = ""
    outside = _FENCE.sub("", text)
    for span in _INLINE.finditer(outside):
        yield " ".join(span.group(2).split())


def commands(text: str) -> Iterator[list[str]]:
    """argv of every command a doc shows, from its tool on (``VAR=x`` prefixes and a
    path before the tool dropped; ``&&``-chained commands split)."""
    for line in code_lines(text):
        if not any(t in line for t in TOOLS):
            continue
        try:
            tokens = shlex.split(_OPTIONAL.sub(r"\1", line), comments=True)
        except ValueError:
            continue  # not shell (e.g. a sentence in backquotes)
        segment: list[str] = []
        for token in [*tokens, "&&"]:
            if token not in _SEPARATORS:
                segment.append(token)
                continue
            while segment and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", segment[0]):
                segment.pop(0)
            if segment and Path(segment[0]).name in TOOLS and (
                    segment[0] in TOOLS or segment[0].startswith(".venv/bin/")):
                yield [Path(segment[0]).name, *segment[1:]]
            segment = []


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a Markdown page's headings (outside code blocks; a repeated
    heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for match in _HEADING.finditer(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def all_commands() -> list[tuple[str, list[str]]]:
    return [(rel(doc), argv) for doc in DOCS
            for argv in commands(doc.read_text(encoding="utf-8"))]


# -- the parsers -----------------------------------------------------------------------------

def _strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser and its subparsers without abbreviated long options."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _strict(sub)
    return parser


def prefixbench_error(args: list[str]) -> str | None:
    """Why ``prefixbench args`` does not parse, or None. A bare subcommand (prose naming
    it, e.g. "`prefixbench run`") must only exist; "`prefixbench`" alone is the
    package's name."""
    if not args:
        return None  # the package's name, not a command
    main = _strict(build_parser())
    subcommands = next(a.choices for a in main._actions
                       if isinstance(a, argparse._SubParsersAction))
    if args[0] not in subcommands:
        return f"no subcommand {args[:1]} (known: {', '.join(subcommands)})"
    if len(args) == 1:
        return None
    own = {"report": report_parser, "compare": compare_parser}.get(args[0])
    parser = _strict(own()) if own else main
    try:
        parser.parse_args(args[1:] if own else args)
    except SystemExit:
        return "argparse refused it (see stderr)"
    except Exception as exc:  # noqa: BLE001 - report's parser raises its own usage error
        return str(exc)
    return None


def playbook_args(args: list[str]) -> tuple[list[str], str | None]:
    """The playbooks ``ansible-playbook args`` names, and why it does not parse."""
    cli = PlaybookCLI(["ansible-playbook", *args])
    cli.init_parser()
    _strict(cli.parser)
    try:
        ns = cli.parser.parse_args(args)
    except SystemExit:
        return [], "ansible-playbook's parser refused it (see stderr)"
    return list(ns.args), None


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))


def extra_var_names(args: list[str]) -> Iterator[str]:
    """Variable names an argv sets with ``-e``/``--extra-vars`` (key=value, JSON, YAML)."""
    for flag, value in itertools.pairwise(args):
        if flag not in ("-e", "--extra-vars") or value.startswith("@"):
            continue
        if value.lstrip().startswith("{"):
            yield from json.loads(value)
        else:
            for pair in value.split():
                yield pair.partition("=")[0]


# -- the tests -------------------------------------------------------------------------------

def test_the_docs_show_commands_of_each_tool() -> None:
    """The extraction finds what the docs show (a broken reader would pass every test)."""
    tools = {argv[0] for _, argv in all_commands()}
    assert tools == set(TOOLS)
    assert len(all_commands()) > 40


def test_every_prefixbench_command_parses() -> None:
    bad = {}
    for doc, argv in all_commands():
        if argv[0] == "prefixbench" and (why := prefixbench_error(argv[1:])):
            bad[f"{doc}: {shlex.join(argv)}"] = why
    assert bad == {}


def test_every_make_target_exists() -> None:
    targets = make_targets()
    bad = [f"{doc}: {shlex.join(argv)}" for doc, argv in all_commands()
           if argv[0] == "make" and not all(
               t in targets for t in argv[1:] if "=" not in t and not t.startswith("-"))]
    assert bad == []


def test_every_extra_var_is_a_setting() -> None:
    bad = [f"{doc}: {name}" for doc, argv in all_commands()
           for name in extra_var_names(argv)
           if name not in settings.BY_NAME and name not in settings.RESERVED
           and name not in NOT_SETTINGS]
    assert bad == []
    assert {rel(d) for d in DOCS} <= {rel(d) for d in SETTINGS_DOCS}, \
        "test_docs_settings.py must read every doc this test reads"
    assert NAME.fullmatch("prefixbench_run_id")


def _playbooks() -> dict[str, list[str]]:
    """Playbook -> the docs' commands naming it; a command that does not parse, under its
    own key with the reason."""
    out: dict[str, list[str]] = {}
    for doc, argv in all_commands():
        if argv[0] != "ansible-playbook" or len(argv) == 1:
            continue  # "`ansible-playbook`" alone names the tool
        books, why = playbook_args(argv[1:])
        if why:
            out.setdefault(f"UNPARSED {why}", []).append(f"{doc}: {shlex.join(argv)}")
        for book in books:
            out.setdefault(book, []).append(doc)
    return out


def test_every_ansible_playbook_command_parses_and_names_a_playbook() -> None:
    books = _playbooks()
    assert {k: v for k, v in books.items() if k.startswith("UNPARSED")} == {}
    missing = {b: docs for b, docs in books.items() if not (ROOT / b).is_file()}
    assert missing == {}


@pytest.mark.parametrize("playbook", sorted(b for b in _playbooks() if not b.startswith("UN")))
def test_every_documented_playbook_passes_syntax_check(playbook: str,
                                                       ansible_env: dict[str, str]) -> None:
    if not (ROOT / playbook).is_file():
        pytest.fail(f"{playbook} does not exist")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "trn2_fleet",
         "--syntax-check", playbook], cwd=ROOT, env=ansible_env, capture_output=True,
        text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_repository_path_in_backquotes_exists() -> None:
    bad = []
    for doc in DOCS:
        for span in code_lines(doc.read_text(encoding="utf-8")):
            if not re.fullmatch(r"[\w.\-/]+", span) or span.split("/")[0] not in TOP:
                continue
            if not (ROOT / span).exists():
                bad.append(f"{rel(doc)}: {span}")
    assert bad == []


def test_every_relative_link_and_anchor_exists() -> None:
    bad = []
    for doc in DOCS:
        text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            page = (doc.parent / path).resolve() if path else doc
            if not page.exists():
                bad.append(f"{rel(doc)}: {target} (no such file)")
            elif anchor and page.suffix == ".md" and anchor not in anchors(page):
                bad.append(f"{rel(doc)}: {target} (no heading #{anchor})")
    assert bad == []


def test_yaml_examples_parse() -> None:
    """A settings example pasted into group_vars must at least be YAML."""
    bad = []
    for doc in DOCS:
        for block in re.finditer(r"^```ya?ml\n(.*?)^```", doc.read_text(encoding="utf-8"),
                                 re.S | re.M):
            try:
                yaml.safe_load(block.group(1))
            except yaml.YAMLError as exc:
                bad.append(f"{rel(doc)}: {exc}")
    assert bad == []


def test_the_readme_starts_with_the_two_commands() -> None:
    """make demo and make test come first, as a fresh machine runs them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(_FENCE.finditer(text)).group(0)
    assert [argv for argv in commands(first)] == [["make", "demo"], ["make", "test"]]
    assert (ROOT / "README.md").stat().st_size < 4000, "README.md fits about one screen"


#: The pages a new user follows for a real fleet, and the section of each.
FIRST_RUN = ((ROOT / "README.md", "## A real fleet in six steps"),
             (ROOT / "docs" / "first-real-run.md", "## The inventory and the settings"))


def _first_run_text(page: Path, heading: str) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    if page.name == "first-real-run.md":  # through "The first run, in order"
        end = text.find("\n## ", text.index("## The first run, in order"))
    return text[start:] if end < 0 else text[start:end]


@pytest.mark.parametrize(("page", "heading"), FIRST_RUN, ids=lambda x: getattr(x, "name", x))
def test_the_first_run_commands_work_for_your_own_inventory(page: Path, heading: str) -> None:
    """After "copy the sample", every command reads the user's copy from $FLEET (which
    the text sets), never the sample's name; the canary is not chained to the fleet run
    with && (a one-repetition INCONCLUSIVE exits 6), and the text says how to read it."""
    text = _first_run_text(page, heading)
    assert "export FLEET=" in text and "CANARY=" in text
    argvs = list(commands(text))
    inventories = [argv[argv.index("-i") + 1] for argv in argvs if "-i" in argv]
    assert inventories and set(inventories) == {"$FLEET"}, inventories
    limits = {argv[argv.index("--limit") + 1] for argv in argvs if "--limit" in argv}
    assert limits == {"$CANARY"}, limits
    for line in code_lines(text):
        assert not re.search(r"prefixbench run[^&]*&&\s*prefixbench run", line), line
    assert "INCONCLUSIVE" in text and re.search(r"\b6\b", text)
