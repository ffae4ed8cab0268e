"""The plan preflight prints."""

from __future__ import annotations

from prefixbench.config import plan


def test_default_workloads_are_the_tutorials_three() -> None:
    p = plan.host_plan("h1", {"prefixbench_configurations": ["baseline", "cached"],
                              "prefixbench_repetitions": 2, "prefixbench_workloads": [],
                              "prefixbench_instance_type": "trn2.48xlarge",
                              "prefixbench_platform": "neuron"})
    assert p.workloads == ("high_overlap", "no_overlap", "sustained_c4")
    # 2 configurations x 3 workloads x 2 repetitions, and the baseline server's
    # calibration bench (on by default; off: the tutorial's 12 alone).
    assert p.benches == 13
    assert "x 2 rep + calibration = 13 benches" in plan.render([p])[0]
    off = plan.host_plan("h1", {"prefixbench_configurations": ["baseline", "cached"],
                                "prefixbench_repetitions": 2, "prefixbench_calibration": False})
    assert off.benches == 12 and "calibration bench: off" in off.calibration


def test_render_lists_hosts_sorted_then_the_total() -> None:
    mine = {"name": "mine", "prefix_repetition_prefix_len": 2048,
            "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 2,
            "prefix_repetition_output_len": 8, "num_prompts": 8}
    plans = [plan.host_plan(h, {"prefixbench_configurations": ["cached"],
                                "prefixbench_workloads": [mine]})
             for h in ("b", "a")]
    lines = plan.render(plans)
    assert lines[0].startswith("a (")
    assert "cached x [mine] x 1 rep = 1 benches" in lines[0]
    assert lines[-1] == "total: 2 hosts, 2 benches"


def test_render_of_nothing_says_so() -> None:
    assert "no hosts" in plan.render([])[0]


def test_workload_lines_show_the_tutorial_ratio() -> None:
    lines = plan.workload_lines({"prefixbench_workloads": []})
    assert lines[0].startswith("workload high_overlap: prefix 3072 + suffix 1024, 5 prefixes")
    assert "expected hit ratio 67.5%" in lines[0]
    assert "c=4, rate 2/s" in lines[8]  # each workload: shape, sends, expected, assumes
