"""Apt source entries (module_utils/prefixbench_apt.py) and the module that uses them.

The module itself runs in-process against a temporary sources tree, as Ansible would run
it on a host: a host set up with AWS's guide (``neuron.list`` without signed-by) keeps its
entry and gets no second one; a bare host gets the bundle's own, signed by its keyring.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "module_utils"))

import module_runner  # noqa: E402
import prefixbench_apt as apt  # noqa: E402

URI = "https://apt.repos.neuron.amazonaws.com"
# What AWS's Neuron setup guide writes (Ubuntu): no signed-by, key added with apt-key.
AWS_GUIDE_LINE = f"deb {URI} noble main\n"


def test_one_line_entries_with_and_without_options() -> None:
    text = ("# comment\n" + AWS_GUIDE_LINE
            + f"deb [arch=amd64 signed-by=/etc/apt/keyrings/neuron.asc] {URI}/ jammy main\n"
            + f"deb-src {URI} noble main\n" + "deb http://deb.debian.org/debian bookworm main\n")
    found = apt.entries_for(URI, {"/etc/apt/sources.list.d/neuron.list": text})
    assert [(e.suites, e.signed_by) for e in found] == [
        (("noble",), None), (("jammy",), "/etc/apt/keyrings/neuron.asc")]


def test_deb822_entries_and_disabled_stanzas() -> None:
    text = (f"Types: deb\nURIs: {URI}\nSuites: noble\nComponents: main\n"
            "Signed-By: /etc/apt/keyrings/neuron.gpg\n\n"
            f"Types: deb\nURIs: {URI}\nSuites: jammy\nComponents: main\nEnabled: no\n")
    found = apt.entries_for(URI, {"/etc/apt/sources.list.d/neuron.sources": text})
    assert len(found) == 1
    assert found[0].signed_by == "/etc/apt/keyrings/neuron.gpg"
    assert found[0].suites == ("noble",)


def test_uris_compare_up_to_a_trailing_slash() -> None:
    assert apt.normalize_uri("HTTPS://apt.repos.neuron.amazonaws.com/") == URI
    assert apt.normalize_uri("https://example.com/neuron") != URI


# --------------------------------------------------------------------------- the module


def run_module(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
               args: dict[str, Any], check: bool = False) -> dict[str, Any]:
    return module_runner.run_module("prefixbench_apt_source", args, monkeypatch, capsys,
                                    check=check, utils=("prefixbench_apt",))


def tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Any]:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    return {"uri": URI, "suite": "noble", "keyring": "/etc/apt/keyrings/neuron.asc",
            "path": str(d / "prefixbench-neuron.list"), "sources_dir": str(d),
            "sources_list": str(tmp_path / "sources.list")}


def test_a_host_set_up_with_the_aws_guide_keeps_its_entry_and_gets_no_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = tree(tmp_path, {"neuron.list": AWS_GUIDE_LINE})
    out = run_module(monkeypatch, capsys, args)
    assert out["changed"] is False and out["written"] is False
    assert out["adopted"] == [str(tmp_path / "sources.list.d" / "neuron.list")]
    assert not Path(args["path"]).exists()
    assert (tmp_path / "sources.list.d" / "neuron.list").read_text() == AWS_GUIDE_LINE


def test_a_bare_host_gets_the_bundles_own_entry_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = tree(tmp_path, {"other.list": "deb http://example.com/x stable main\n"})
    out = run_module(monkeypatch, capsys, args, check=True)
    assert out["changed"] is True and not Path(args["path"]).exists()
    out = run_module(monkeypatch, capsys, args)
    assert out["changed"] is True
    assert (f"deb [signed-by=/etc/apt/keyrings/neuron.asc] {URI} noble main"
            in Path(args["path"]).read_text())
    out = run_module(monkeypatch, capsys, args)
    assert out["changed"] is False and out["adopted"] == []


def test_an_own_entry_is_dropped_when_the_aws_guide_entry_appears_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = tree(tmp_path, {"neuron.list": AWS_GUIDE_LINE})
    Path(args["path"]).write_text(apt.render_own_file(URI, "noble", ["main"], args["keyring"]))
    out = run_module(monkeypatch, capsys, args)
    assert out["changed"] is True and not Path(args["path"]).exists()
