"""Neuron package versions are ordered as dpkg orders them (numbers compared as numbers,
Debian Policy 5.6.12 "Version"), so a move down is seen however the digits are written:
2.31.100.0 is above 2.31.15.0. The pins are the release data's own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from prefixbench.hosts import host_read, release_match, releases

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
    dkms = "aws-neuronx-dkms"
    installed[dkms] = _above_as_a_number_below_as_text(R2320.known_apt()[dkms])
    found = release_match.resolve("h1", R2320.release, installed, [], allow_upgrade=True,
                                  rels=RELS)
    assert found.release is None and found.how == "named"
    assert found.refusal == (
        f"h1: prefixbench_neuron_release {R2320.release} would move Neuron packages down "
        f"({dkms} {installed[dkms]} -> {R2320.known_apt()[dkms]}; "
        f"{TOOLS} {_above_as_a_number_below_as_text(wanted)} -> {wanted}); the host is on "
        "a release this bundle does not know, and the bundle never moves a Neuron package "
        "down: "
        "set prefixbench_neuron_release: auto to use the host as it is, or use a fresh "
        "host; nothing was changed")


# -- resolve, branch by branch: what the host gets and the one line that says so ---------

R2310 = releases.load_release("2.31.0")
#: What a bare host gets: the newest release whose every fact is published
#: (``releases.installable``); releases newer than it leave facts unknown.
BARE = releases.newest(releases.installable(RELS))
#: The releases newer than BARE, each with facts AWS has not published.
LATER = [r for r in RELS if r.order > BARE.order]


def _debs(rel: releases.Release) -> dict[str, str]:
    """dpkg's list on a host of ``rel``: its pins with a build suffix."""
    return {n: f"{v}-0abc1234" for n, v in rel.known_apt().items()}


def _own_venv(rel: releases.Release, plugin: str | None = None) -> release_match.Venv:
    return release_match.Venv(str(rel.dlami["venv"]), rel.vllm,
                              plugin if plugin is not None else str(rel.dlami["plugin"]))


def _resolve(installed: dict[str, str], venvs: list[release_match.Venv],
             requested: str = "auto", *, allow_upgrade: bool = False
             ) -> release_match.HostRelease:
    return release_match.resolve("h1", requested, installed, venvs,
                                 allow_upgrade=allow_upgrade, rels=RELS)


def _moves(rel: releases.Release, installed: dict[str, str]) -> list[str]:
    """``name installed (wants pin)`` for each deb at another version, in the manifest's
    order (the format the refusals and notes print)."""
    return [f"{n} {installed[n].split('-')[0]} (wants {v})"
            for n, v in rel.known_apt().items() if installed[n].split("-")[0] != v]


def test_a_bare_host_gets_the_newest_installable_release_and_its_dlami_venv() -> None:
    # The release data: every release newer than BARE leaves facts unknown, BARE none.
    assert LATER and all(r.unknown() for r in LATER) and not BARE.unknown()
    found = _resolve({"python3": "3.12.3-0ubuntu2"}, [_own_venv(BARE)])
    why = "".join(f"; {r.release} is newer but AWS has not published its "
                  f"{', '.join(r.unknown())}" for r in LATER)
    assert found.as_dict() == {
        "release": BARE.release, "how": "bare", "venv": BARE.dlami["venv"],
        "refusal": "", "read": {}, "unchecked": [],
        "note": f"h1: no Neuron package installed; installing Neuron {BARE.label()}, the "
                f"newest release the bundle can install from published facts{why} (set "
                "prefixbench_neuron_release to pick another)"}
    # The default catalogue is the one the bundle ships.
    assert release_match.resolve("h1", "auto", {}, [], allow_upgrade=False).release == \
        BARE
    # With no release complete, a bare host is refused in one line.
    refused = release_match.resolve("h1", "auto", {}, [], allow_upgrade=False, rels=LATER)
    assert (refused.release, refused.how, refused.refusal) == (None, "bare", (
        "h1: no Neuron package installed and no release this bundle knows has every fact "
        "needed to install it; use a host from an AWS Neuron image (read from the host as "
        "it is); nothing was changed"))


def test_a_bare_host_gets_the_release_named() -> None:
    found = _resolve({}, [], R2310.release)
    assert found.as_dict() == {
        "release": R2310.release, "how": "named", "venv": "", "refusal": "",
        "read": {}, "unchecked": [],
        "note": f"h1: no Neuron package installed; installing Neuron {R2310.label()}"}


def test_a_host_on_a_release_is_used_as_it_is() -> None:
    found = _resolve(_debs(BARE), [_own_venv(BARE)])
    assert found.as_dict() == {
        "release": BARE.release, "how": "matched", "venv": BARE.dlami["venv"],
        "refusal": "", "read": {}, "unchecked": [],
        "note": f"h1: on Neuron {BARE.label()}, read from its packages; used as it is"}
    named = _resolve(_debs(BARE), [_own_venv(BARE)], BARE.release)
    assert named.as_dict() == {
        "release": BARE.release, "how": "named", "venv": BARE.dlami["venv"],
        "refusal": "", "read": {}, "unchecked": [],
        "note": f"h1: on Neuron {BARE.label()}, as named"}


def _newer_debs() -> dict[str, str]:
    """Every Neuron deb BARE pins at 9.9.<n>.0: above every known release's version."""
    return {n: f"9.9.{i}.0-0abc1234" for i, n in enumerate(BARE.known_apt())}


def test_a_host_matching_no_release_is_read_from_the_host_or_refused_without_a_venv(
) -> None:
    # Before H1 this host was refused naming the nearest release ("name a newer release
    # with prefixbench_neuron_release"); a host newer than every known release is now
    # read from the host when it carries a vLLM Neuron venv, refused in one line if not.
    installed = _newer_debs()
    versions = ", ".join(f"{n} {v.split('-')[0]}" for n, v in sorted(installed.items()))
    refused = _resolve(installed, [])
    assert (refused.release, refused.how, refused.venv, refused.note, refused.read) == (
        None, "read", "", "", {})
    assert refused.as_dict()["release"] == "" and refused.as_dict()["unchecked"] == []
    assert refused.refusal == (
        f"h1: newer than any release this bundle knows ({versions}), and no vLLM Neuron "
        f"venv (vllm and vllm-neuron) was found (looked at "
        f"{', '.join(host_read.venv_patterns(RELS))} and vllm_env_adopt_venv): set "
        "vllm_env_adopt_venv to the venv that holds them; nothing was changed")
    # A venv holding only vLLM is not a vLLM Neuron venv.
    assert _resolve(installed, [release_match.Venv("/opt/v", "0.24.0", None)]).refusal == \
        refused.refusal
    venv = release_match.Venv("/opt/newer", "9.0.0", "9.0.0.1.0.0+abc")
    found = _resolve(installed, [venv])
    assert (found.how, found.venv, found.refusal) == ("read", venv.path, "")
    assert found.release is not None and found.release.release == releases.HOST_READ
    assert found.read["release"] == releases.HOST_READ
    assert found.read["apt"]["packages"] == {
        n: v.split("-")[0] for n, v in installed.items()}
    assert found.note.startswith(
        "h1: Neuron read from the host, newer than any release this bundle knows: ")
    assert found.as_dict()["unchecked"][-len(host_read.NEVER_CHECKED):] == \
        list(host_read.NEVER_CHECKED)
    # What is read goes to the host's settings beside the release's id.
    assert release_match.settings_update({}, found) == {
        "prefixbench_neuron_release": releases.HOST_READ,
        releases.HOST_RELEASE_KEY: found.read, "vllm_env_adopt_venv": venv.path}


def test_a_host_on_a_release_with_unknown_facts_is_completed_from_the_host() -> None:
    # Its debs are one release's, but that release's data leaves facts unknown: the host
    # is read (not "matched"), on that release, with what it could not check listed.
    incomplete = next(r for r in LATER if r.known_apt())
    venv = release_match.Venv("/opt/later", "9.0.0", "9.0.0.1.0.0")
    found = _resolve(_debs(incomplete), [venv])
    assert (found.how, found.venv, found.refusal) == ("read", venv.path, "")
    assert found.release is not None and found.release.release == incomplete.release
    assert found.read["title"] == f"{incomplete.title}, completed from the host"
    assert found.note.startswith(
        f"h1: Neuron read from the host, on Neuron {incomplete.release}, whose published "
        "facts are incomplete: ")
    assert found.as_dict()["unchecked"][-len(host_read.NEVER_CHECKED):] == \
        list(host_read.NEVER_CHECKED)
    # Without a vLLM Neuron venv it is refused, naming the release.
    assert _resolve(_debs(incomplete), []).refusal.startswith(
        f"h1: on Neuron {incomplete.release}, whose published facts are incomplete (")


def test_a_host_between_known_releases_is_read_and_not_called_newer() -> None:
    # BARE's debs with the tools above BARE's pin but below a later release's: no
    # release's versions, not mixed, not newer than the bundle's releases. (A release
    # whose deb versions are all unknown, as 2.34.0's are, must not make it "newer".)
    installed = _debs(BARE)
    installed[TOOLS] = _above_as_a_number_below_as_text(BARE.known_apt()[TOOLS])
    stated = [r.known_apt()[TOOLS] for r in LATER if TOOLS in r.known_apt()]
    assert stated and all(releases.version_tuple(installed[TOOLS])
                          < releases.version_tuple(v) for v in stated)
    venv = _own_venv(BARE)
    found = _resolve(installed, [venv])
    assert (found.how, found.venv, found.refusal) == ("read", venv.path, "")
    assert found.read["title"] == (
        "Neuron read from the host, packages no release this bundle knows")
    assert found.note.startswith(
        "h1: Neuron read from the host, on Neuron packages no release this bundle knows: ")


def test_moving_a_host_up_needs_allow_upgrade() -> None:
    installed = _debs(R2310)
    moves = "; ".join(_moves(BARE, installed))
    refused = _resolve(installed, [], BARE.release)
    assert (refused.release, refused.how, refused.venv, refused.note) == (None, "named", "", "")
    assert refused.refusal == (
        f"h1: is on {R2310.release}; prefixbench_neuron_release {BARE.release} would "
        f"change {moves}; set neuron_sdk_allow_upgrade: true to move them up, or "
        "prefixbench_neuron_release: auto to use the host as it is; nothing was changed")
    moved = _resolve(installed, [_own_venv(BARE)], BARE.release, allow_upgrade=True)
    assert moved.as_dict() == {
        "release": BARE.release, "how": "named", "venv": BARE.dlami["venv"],
        "refusal": "", "read": {}, "unchecked": [],
        "note": f"h1: moving up from {R2310.release} to Neuron {BARE.label()}: {moves}"}


def test_a_host_on_no_known_release_moving_up_says_so() -> None:
    installed = _debs(R2310)
    tools = _above_as_a_number_below_as_text(R2310.known_apt()[TOOLS])
    installed[TOOLS] = tools  # above 2.31.0's pin, below BARE's: no release's
    refused = _resolve(installed, [], BARE.release)
    assert refused.refusal.startswith(
        f"h1: is on a release this bundle does not know; prefixbench_neuron_release "
        f"{BARE.release} would change ")


def test_a_host_older_than_every_known_release_is_refused() -> None:
    # Before H1 this host (a deb below every release's pin) was "on no release this
    # bundle knows" and could be moved up; it is now refused before any release is named.
    installed = _debs(R2310)
    installed[TOOLS] = "2.0.0.0"
    oldest = min(RELS, key=lambda r: r.order).version
    floor = min((r.known_apt()[TOOLS] for r in RELS if TOOLS in r.known_apt()),
                key=releases.version_tuple)
    for requested in ("auto", BARE.release):
        refused = _resolve(installed, [], requested, allow_upgrade=True)
        assert (refused.release, refused.how) == (None, "matched")
        assert refused.refusal == (
            f"h1: its Neuron packages are older than {oldest}, the oldest release this "
            f"bundle runs ({TOOLS} 2.0.0.0 (oldest known {floor})): use a host from an "
            f"image of Neuron {oldest} or later, or a bare Ubuntu host (the bundle installs "
            "Neuron there); nothing was changed")


def test_the_probe_lines_become_venvs() -> None:
    results = [
        {"item": "/opt/broken", "rc": 1, "stdout": "vllm 0.1"},
        {"item": "/opt/a", "rc": 0, "stdout": "vllm 0.24.0\nvllm-neuron -\n"},
        {"item": "/opt/c", "rc": 0, "stdout": "vllm\nvllm-neuron 0.1"},  # no version: none
        {"item": "/opt/b", "rc": 0, "stdout": " vllm 0.21.0 \nvllm-neuron 0.21.0.1.0.0+794754d"},
        {"rc": 0},
    ]
    assert release_match.venvs_from_probe(results) == [
        release_match.Venv("/opt/a", "0.24.0", None),
        release_match.Venv("/opt/c", None, "0.1"),
        release_match.Venv("/opt/b", "0.21.0", "0.21.0.1.0.0+794754d"),
        release_match.Venv("", None, None),
    ]


def test_the_releases_own_dlami_venv_is_adopted_first() -> None:
    other = release_match.Venv("/opt/another", BARE.vllm, str(BARE.dlami["plugin"]))
    own = _own_venv(BARE)
    assert release_match.adoptable_venv(BARE, [other, own]) == own.path
    assert release_match.adoptable_venv(BARE, [other]) == other.path
    # The plugin is compared by its public version: the local part is the build's.
    public = BARE.pip_packages["vllm-neuron"]
    local = _own_venv(BARE, plugin=f"{public}+abc+def")
    assert release_match.adoptable_venv(BARE, [local]) == local.path
    assert release_match.adoptable_venv(BARE, [_own_venv(BARE, plugin="0.0.1")]) == ""


def test_a_wrong_plugin_in_the_releases_own_venv_is_a_difference() -> None:
    found = release_match.differences(BARE, {}, [
        release_match.Venv("/opt/other", None, None),
        release_match.Venv(str(BARE.dlami["venv"]), BARE.vllm, None)])
    assert found == [f"{BARE.dlami['venv']} vllm-neuron missing "
                     f"(wants {BARE.pip_packages['vllm-neuron']})"]


BETA = releases.load_release("2.31.0-vllm-beta")


def test_a_series_names_its_newest_release_among_those_given() -> None:
    assert release_match.resolve("h1", "2.31", {}, [], allow_upgrade=False,
                                 rels=[R2310, BETA]).release == BETA
    with pytest.raises(releases.ReleaseError, match=r"9\.9\.9"):
        _resolve({}, [], "9.9.9")


def test_the_best_candidate_has_its_own_dlami_venv_then_no_dlami() -> None:
    # Test doubles: BETA's packages are R2310's; a release without a DLAMI made newer
    # than BETA must still come after BETA when BETA's own venv is on the host.
    newer_plain = replace(R2310, release="9.0.0", version="9.0.0", date="2099-01-01")
    packages = release_match.neuron_packages(_debs(BETA), [BETA, newer_plain])
    venv = _own_venv(BETA)
    assert release_match.candidates(packages, [venv], [newer_plain, BETA]) == \
        [BETA, newer_plain]
    # Without the venv, the release without a DLAMI comes first.
    assert release_match.candidates(packages, [], [BETA, newer_plain]) == [newer_plain, BETA]


def test_the_segment_sizes_a_hosts_settings_compile() -> None:
    sizes = release_match.configured_segment_sizes
    assert sizes({"vllm_service_neuron_config": {"kv_segment_size_buckets": ["1024"]},
                  "prefixbench_sweep_segment_sizes": [512, 2048]}) == {
        "kv_segment_size_buckets": [1024], "prefixbench_sweep_segment_sizes": [512, 2048]}
    assert sizes({"vllm_service_neuron_config": "not a mapping"}) == {}
    assert sizes({}) == {}


def test_the_settings_a_host_runs_with_once_its_release_is_known() -> None:
    found = _resolve(_debs(BARE), [_own_venv(BARE)])
    assert release_match.settings_update({}, found) == {
        "prefixbench_neuron_release": BARE.release,
        "vllm_env_adopt_venv": BARE.dlami["venv"]}
    assert release_match.settings_update({"vllm_env_adopt_venv": "/opt/mine"}, found) == {
        "prefixbench_neuron_release": BARE.release}
    assert release_match.settings_update({}, replace(found, release=None)) == {}


def test_the_dlami_venvs_probed_are_those_of_the_releases_given() -> None:
    assert release_match.dlami_venvs([R2310]) == []
    assert release_match.dlami_venvs([R2310, BETA]) == [BETA.dlami["venv"]]
