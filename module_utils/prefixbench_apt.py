"""Apt sources on a host: the logic of the prefixbench_apt_source module.

apt refuses every source list when one repository is listed twice with different
``Signed-By`` values ("Conflicting values set for option Signed-By"). AWS's Neuron setup
guide writes ``/etc/apt/sources.list.d/neuron.list`` with a plain
``deb https://apt.repos.neuron.amazonaws.com <codename> main`` line (no ``signed-by``;
the key goes in with ``apt-key add``), and hosts set up that way, or from an image built
that way, already list the repository. Adding a second entry for it with
``signed-by=`` would break ``apt-get update`` on them. So: find every entry of a
repository in the one-line (``*.list``) and deb822 (``*.sources``) files, and add the
bundle's own entry only when there is none. Plain Python; no Ansible imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SOURCES_LIST = "/etc/apt/sources.list"
SOURCES_DIR = "/etc/apt/sources.list.d"

_OPTIONS = re.compile(r"^\[([^\]]*)\]\s*")


@dataclass(frozen=True)
class SourceEntry:
    """One repository entry of an apt source file."""

    path: str
    kind: str
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None
    enabled: bool = True

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "type": self.kind, "uri": self.uri,
                "suites": list(self.suites), "components": list(self.components),
                "signed_by": self.signed_by, "enabled": self.enabled}


def normalize_uri(uri: str) -> str:
    """Compare repository URIs as apt does, up to a trailing slash and the scheme's case."""
    uri = uri.strip()
    scheme, sep, rest = uri.partition("://")
    return (scheme.lower() + sep + rest).rstrip("/")


def _option_map(text: str) -> dict[str, str]:
    out = {}
    for item in text.split():
        key, _, value = item.partition("=")
        out[key.strip().lower()] = value.strip()
    return out


def parse_one_line(path: str, text: str) -> list[SourceEntry]:
    """Entries of a one-line-style file (``sources.list``, ``*.list``)."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind not in ("deb", "deb-src"):
            continue
        rest = rest.strip()
        options: dict[str, str] = {}
        match = _OPTIONS.match(rest)
        if match:
            options = _option_map(match.group(1))
            rest = rest[match.end():]
        fields = rest.split()
        if len(fields) < 2:
            continue
        out.append(SourceEntry(path, kind, fields[0], (fields[1],), tuple(fields[2:]),
                               options.get("signed-by") or None))
    return out


def parse_deb822(path: str, text: str) -> list[SourceEntry]:
    """Entries of a deb822-style file (``*.sources``): one per type and URI of a stanza."""
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = ""
        for raw in stanza.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1] in (" ", "\t") and last:
                fields[last] += "\n" + raw.strip()
                continue
            key, sep, value = raw.partition(":")
            if sep:
                last = key.strip().lower()
                fields[last] = value.strip()
        if "uris" not in fields:
            continue
        signed = fields.get("signed-by", "").strip()
        # An inline key block (starts with -----BEGIN) also counts as a Signed-By value.
        enabled = fields.get("enabled", "yes").strip().lower() not in ("no", "false", "0")
        for kind in fields.get("types", "deb").split():
            for uri in fields["uris"].split():
                out.append(SourceEntry(path, kind, uri, tuple(fields.get("suites", "").split()),
                                       tuple(fields.get("components", "").split()),
                                       signed or None, enabled))
    return out


def parse_file(path: str, text: str) -> list[SourceEntry]:
    """Entries of one source file, by its name (``.sources`` is deb822, else one-line)."""
    if path.endswith(".sources"):
        return parse_deb822(path, text)
    return parse_one_line(path, text)


def entries_for(uri: str, files: Mapping[str, str]) -> list[SourceEntry]:
    """Enabled binary-package entries of ``uri`` in ``{path: text}`` source files."""
    want = normalize_uri(uri)
    return [e for path, text in sorted(files.items()) for e in parse_file(path, text)
            if e.enabled and e.kind == "deb" and normalize_uri(e.uri) == want]


def source_line(uri: str, suite: str, components: Iterable[str], keyring: str) -> str:
    """The bundle's own one-line entry, signed by ``keyring`` only."""
    return f"deb [signed-by={keyring}] {uri} {suite} {' '.join(components)}"


def render_own_file(uri: str, suite: str, components: Iterable[str], keyring: str) -> str:
    return ("# Managed by prefixbench (neuron_sdk role): the Neuron apt repository.\n"
            + source_line(uri, suite, components, keyring) + "\n")


def is_source_file(name: str) -> bool:
    """Whether apt reads ``name`` in ``sources.list.d`` (it ignores other suffixes)."""
    return bool(re.match(r"^[A-Za-z0-9_.-]+\.(list|sources)$", name))
