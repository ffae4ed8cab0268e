"""Neuron package versions are ordered as dpkg orders them (numbers compared as numbers,
Debian Policy 5.6.12 "Version"), so a move down is seen however the digits are written:
2.31.100.0 is above 2.31.15.0. The pins are the release data's own."""

from __future__ import annotations

from prefixbench.hosts import release_match, releases

RELS = releases.load_all()
R2320 = releases.load_release("2.32.0")
TOOLS = "aws-neuronx-tools"


def _above_as_a_number_below_as_text(version: str) -> str:
    """``a.b.c.d`` with ``c`` written with more digits and a smaller first digit:
    a larger number that sorts first as a string (2.32.28.0 -> 2.32.100.0)."""
    parts = version.split(".")
    parts[2] = "1" + "0" * len(parts[2])
    return ".".join(parts)


def test_version_tuple_reads_the_numbers_of_a_debian_version() -> None:
    assert releases.version_tuple("2.31.15.0-5c7949a6a") == (2, 31, 15, 0)
    assert releases.version_tuple("1:2.31.100.0-0abc") == (2, 31, 100, 0)
    assert releases.version_tuple("0.21.0.1.0.0+794754d") == (0, 21, 0, 1, 0, 0)
    assert releases.version_tuple("2.31.0rc1.5") == (2, 31, 0)
    assert releases.version_tuple("2.x.1") == (2,)
    assert releases.version_tuple("2.31.100.0") > releases.version_tuple("2.31.15.0")


def test_a_move_down_is_seen_when_the_text_sorts_the_other_way() -> None:
    wanted = R2320.known_apt()[TOOLS]
    installed = _above_as_a_number_below_as_text(wanted)
    assert installed < wanted  # as text, the installed one sorts first
    assert release_match.downgrades(R2320, {TOOLS: installed}) == [
        f"{TOOLS} {installed} -> {wanted}"]
    assert release_match.downgrades(R2320, {TOOLS: wanted}) == []


def test_a_named_release_that_would_move_a_package_down_is_refused() -> None:
    wanted = R2320.known_apt()[TOOLS]
    installed = {n: f"{v}-0abc1234" for n, v in R2320.known_apt().items()}
    installed[TOOLS] = _above_as_a_number_below_as_text(wanted) + "-0abc1234"
    found = release_match.resolve("h1", R2320.release, installed, [], allow_upgrade=True,
                                  rels=RELS)
    assert found.release is None and found.how == "named"
    assert found.refusal.startswith(
        f"h1: prefixbench_neuron_release {R2320.release} would move Neuron packages down "
        f"({TOOLS} {_above_as_a_number_below_as_text(wanted)} -> {wanted}); ")
    assert found.refusal.endswith("nothing was changed")
