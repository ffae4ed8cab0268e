"""The plan preflight prints."""

from __future__ import annotations

from prefixbench import plan


def test_default_workloads_are_the_tutorials_three() -> None:
    p = plan.host_plan("h1", {"prefixbench_configurations": ["baseline", "cached"],
                              "prefixbench_repetitions": 2, "prefixbench_workloads": [],
                              "prefixbench_instance_type": "trn2.48xlarge",
                              "prefixbench_platform": "neuron"})
    assert p.workloads == ("high_overlap", "no_overlap", "sustained_c4")
    assert p.benches == 12


def test_render_lists_hosts_sorted_then_the_total() -> None:
    plans = [plan.host_plan(h, {"prefixbench_configurations": ["cached"],
                                "prefixbench_workloads": [{"name": "mine"}]})
             for h in ("b", "a")]
    lines = plan.render(plans)
    assert lines[0].startswith("a (")
    assert "cached x [mine] x 1 rep = 1 benches" in lines[0]
    assert lines[-1] == "total: 2 hosts, 2 benches"


def test_render_of_nothing_says_so() -> None:
    assert "no hosts" in plan.render([])[0]
