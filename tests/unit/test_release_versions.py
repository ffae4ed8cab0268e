"""Neuron package versions are ordered as dpkg orders them (numbers compared as numbers,
Debian Policy 5.6.12 "Version"), so a move down is seen however the digits are written:
2.31.100.0 is above 2.31.15.0. The pins are the release data's own."""

from __future__ import annotations

from dataclasses import replace

import pytest

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
    dkms = "aws-neuronx-dkms"
    installed[dkms] = _above_as_a_number_below_as_text(R2320.known_apt()[dkms])
    found = release_match.resolve("h1", R2320.release, installed, [], allow_upgrade=True,
                                  rels=RELS)
    assert found.release is None and found.how == "named"
    assert found.refusal == (
        f"h1: prefixbench_neuron_release {R2320.release} would move Neuron packages down "
        f"({dkms} {installed[dkms]} -> {R2320.known_apt()[dkms]}; "
        f"{TOOLS} {_above_as_a_number_below_as_text(wanted)} -> {wanted}); the host is on "
        "no release this bundle knows, and the bundle never moves a Neuron package down: "
        "set prefixbench_neuron_release: auto to use the host as it is, or use a fresh "
        "host; nothing was changed")


# -- resolve, branch by branch: what the host gets and the one line that says so ---------

R2310 = releases.load_release("2.31.0")
NEWEST = releases.newest(RELS)


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


def test_a_bare_host_gets_the_newest_release_and_its_dlami_venv() -> None:
    found = _resolve({"python3": "3.12.3-0ubuntu2"}, [_own_venv(NEWEST)])
    assert found.as_dict() == {
        "release": NEWEST.release, "how": "bare", "venv": NEWEST.dlami["venv"],
        "refusal": "",
        "note": f"h1: no Neuron package installed; installing Neuron {NEWEST.label()} "
                "(the newest; set prefixbench_neuron_release to pick another)"}
    # The default catalogue is the one the bundle ships.
    assert release_match.resolve("h1", "auto", {}, [], allow_upgrade=False).release == \
        NEWEST


def test_a_bare_host_gets_the_release_named() -> None:
    found = _resolve({}, [], R2310.release)
    assert found.as_dict() == {
        "release": R2310.release, "how": "named", "venv": "", "refusal": "",
        "note": f"h1: no Neuron package installed; installing Neuron {R2310.label()}"}


def test_a_host_on_a_release_is_used_as_it_is() -> None:
    found = _resolve(_debs(NEWEST), [_own_venv(NEWEST)])
    assert found.as_dict() == {
        "release": NEWEST.release, "how": "matched", "venv": NEWEST.dlami["venv"],
        "refusal": "",
        "note": f"h1: on Neuron {NEWEST.label()}, read from its packages; used as it is"}
    named = _resolve(_debs(NEWEST), [_own_venv(NEWEST)], NEWEST.release)
    assert named.as_dict() == {
        "release": NEWEST.release, "how": "named", "venv": NEWEST.dlami["venv"],
        "refusal": "", "note": f"h1: on Neuron {NEWEST.label()}, as named"}


def test_a_host_matching_no_release_is_refused_naming_the_nearest() -> None:
    installed = _debs(NEWEST)
    installed["aws-neuronx-tools"] = "9.9.1.0-0abc1234"
    installed["aws-neuronx-dkms"] = "9.9.2.0"
    found = _resolve(installed, [])
    assert (found.release, found.how, found.venv, found.note) == (None, "matched", "", "")
    assert found.as_dict()["release"] == ""
    assert found.refusal == (
        f"h1: its Neuron packages match no release this bundle knows "
        f"({', '.join(r.release for r in RELS)}); nearest is {NEWEST.release}, which "
        f"differs in {'; '.join(_moves(NEWEST, installed))}; name a newer release with "
        "prefixbench_neuron_release and neuron_sdk_allow_upgrade: true, or use a "
        "host from a supported image; nothing was changed")
    assert len(_moves(NEWEST, installed)) == 2


def test_moving_a_host_up_needs_allow_upgrade() -> None:
    installed = _debs(R2310)
    moves = "; ".join(_moves(NEWEST, installed))
    refused = _resolve(installed, [], NEWEST.release)
    assert (refused.release, refused.how, refused.venv, refused.note) == (None, "named", "", "")
    assert refused.refusal == (
        f"h1: is on {R2310.release}; prefixbench_neuron_release {NEWEST.release} would "
        f"change {moves}; set neuron_sdk_allow_upgrade: true to move them up, or "
        "prefixbench_neuron_release: auto to use the host as it is; nothing was changed")
    moved = _resolve(installed, [_own_venv(NEWEST)], NEWEST.release, allow_upgrade=True)
    assert moved.as_dict() == {
        "release": NEWEST.release, "how": "named", "venv": NEWEST.dlami["venv"],
        "refusal": "",
        "note": f"h1: moving up from {R2310.release} to Neuron {NEWEST.label()}: {moves}"}


def test_a_host_on_no_known_release_moving_up_says_so() -> None:
    installed = _debs(R2310)
    installed["aws-neuronx-tools"] = "2.0.0.0"  # below every release's pin
    refused = _resolve(installed, [], NEWEST.release)
    assert refused.refusal.startswith("h1: is on no release this bundle knows; ")


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
    other = release_match.Venv("/opt/another", NEWEST.vllm, str(NEWEST.dlami["plugin"]))
    own = _own_venv(NEWEST)
    assert release_match.adoptable_venv(NEWEST, [other, own]) == own.path
    assert release_match.adoptable_venv(NEWEST, [other]) == other.path
    # The plugin is compared by its public version: the local part is the build's.
    public = NEWEST.pip_packages["vllm-neuron"]
    local = _own_venv(NEWEST, plugin=f"{public}+abc+def")
    assert release_match.adoptable_venv(NEWEST, [local]) == local.path
    assert release_match.adoptable_venv(NEWEST, [_own_venv(NEWEST, plugin="0.0.1")]) == ""


def test_a_wrong_plugin_in_the_releases_own_venv_is_a_difference() -> None:
    found = release_match.differences(NEWEST, {}, [
        release_match.Venv("/opt/other", None, None),
        release_match.Venv(str(NEWEST.dlami["venv"]), NEWEST.vllm, None)])
    assert found == [f"{NEWEST.dlami['venv']} vllm-neuron missing "
                     f"(wants {NEWEST.pip_packages['vllm-neuron']})"]


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
    found = _resolve(_debs(NEWEST), [_own_venv(NEWEST)])
    assert release_match.settings_update({}, found) == {
        "prefixbench_neuron_release": NEWEST.release,
        "vllm_env_adopt_venv": NEWEST.dlami["venv"]}
    assert release_match.settings_update({"vllm_env_adopt_venv": "/opt/mine"}, found) == {
        "prefixbench_neuron_release": NEWEST.release}
    assert release_match.settings_update({}, replace(found, release=None)) == {}


def test_the_dlami_venvs_probed_are_those_of_the_releases_given() -> None:
    assert release_match.dlami_venvs([R2310]) == []
    assert release_match.dlami_venvs([R2310, BETA]) == [BETA.dlami["venv"]]
