"""A fleet whose hosts ran different Neuron releases says so beside its reproducibility
checks (prefixbench.report.fleet.release_groups / releases_line)."""

from __future__ import annotations

from pathlib import Path

from report_runs import fingerprint, make_run

from prefixbench.report import build_summary
from prefixbench.report.document import render_markdown


def test_a_fleet_on_one_release_says_nothing_of_releases(tmp_path: Path) -> None:
    s = build_summary(make_run(tmp_path, ("host-a", "host-b")))
    assert not s.fleet.mixed_releases
    assert s.fleet.to_dict()["neuron_releases"] == {"2.31.0": ["host-a", "host-b"]}
    assert "mixes Neuron releases" not in render_markdown(s)


def test_a_fleet_mixing_releases_names_each_and_its_hosts(tmp_path: Path) -> None:
    fps = {"host-a": fingerprint("host-a", neuron_release="2.32.0"),
           "host-b": fingerprint("host-b", neuron_release="2.31.0-vllm-beta"),
           "host-c": fingerprint("host-c", neuron_release="2.32.0")}
    s = build_summary(make_run(tmp_path, ("host-a", "host-b", "host-c"), fingerprints=fps))
    assert s.fleet.mixed_releases
    assert s.fleet.releases == (("2.31.0-vllm-beta", ("host-b",)),
                                ("2.32.0", ("host-a", "host-c")))
    md = render_markdown(s)
    section = md[md.index("Fleet reproducibility"):]
    assert ("The fleet mixes Neuron releases: 2.31.0-vllm-beta (host-b); 2.32.0 (host-a, "
            "host-c)") in section
    assert s.fleet.to_dict()["mixed_releases"] is True
