"""What stops provisioning on a host, before anything changes."""

from __future__ import annotations

from prefixbench.hosts import provision, releases

REL = releases.load_release("2.31")
DEBIAN = {"distribution": "Debian", "distribution_version": "12.15",
          "distribution_major_version": "12"}


def test_a_supported_host_at_the_pins_has_no_problem() -> None:
    pkgs = {"aws-neuronx-runtime-lib": [{"version": "2.33.10.0-abc"}]}
    assert provision.host_problems(REL, "h", DEBIAN, pkgs, allow_upgrade=False) == []


def test_unsupported_os_and_drift_are_each_one_line() -> None:
    fedora = {"distribution": "Fedora", "distribution_version": "40",
              "distribution_major_version": "40"}
    pkgs = {"aws-neuronx-runtime-lib": [{"version": "2.32.31.0-abc"}]}
    lines = provision.host_problems(REL, "h", fedora, pkgs, allow_upgrade=False)
    assert len(lines) == 2
    assert lines[0].startswith("h: Fedora 40 is not supported by Neuron SDK 2.31.1")
    assert lines[1] == "h: aws-neuronx-runtime-lib is 2.32.31.0, Neuron SDK wants 2.33.10.0"


def test_allowed_upgrades_turn_drift_into_work_not_a_problem() -> None:
    pkgs = {"aws-neuronx-runtime-lib": [{"version": "2.32.31.0"}]}
    assert provision.host_problems(REL, "h", DEBIAN, pkgs, allow_upgrade=True) == []


def test_only_a_hold_selection_counts_as_held() -> None:
    # dpkg-query --show --showformat='${Package} ${Status}\n' for four kinds of package
    selections = ("aws-neuronx-dkms hold ok installed\n"
                  "aws-neuronx-tools install ok installed\n"
                  "aws-neuronx-collectives:amd64 hold ok installed\n"
                  "aws-neuronx-runtime-lib deinstall ok config-files\n")
    wanted = ["aws-neuronx-dkms", "aws-neuronx-tools", "aws-neuronx-collectives",
              "aws-neuronx-runtime-lib", "aws-neuronx-oci-hook"]
    assert provision.not_held(wanted, selections) == [
        "aws-neuronx-tools", "aws-neuronx-runtime-lib", "aws-neuronx-oci-hook"]
    assert provision.not_held(wanted[:1], "") == wanted[:1]
