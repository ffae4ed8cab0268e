"""Workloads as data, the exact bench argv, and seed isolation proven with the cache model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from prefixbench.bench.bench_argv import bench_argv
from prefixbench.bench.seeds import carry_over, plan_seeds
from prefixbench.engines.workloads import (
    Workload,
    WorkloadError,
    load_workloads,
    tutorial_workloads,
)

VOCAB = 2048  # the recorded fixtures' tokenizer
BLOCK = 128  # the recorded fixtures' block size (vllm:cache_config_info)


def test_tutorial_defaults_are_the_tutorials_workloads() -> None:
    high, none, sustained = tutorial_workloads()
    assert [w.name for w in (high, none, sustained)] == [
        "high_overlap", "no_overlap", "sustained_c4"]
    assert (high.prefix_repetition_prefix_len, high.prefix_repetition_suffix_len,
            high.prefix_repetition_num_prefixes, high.prefix_repetition_output_len,
            high.num_prompts, high.max_concurrency) == (3072, 1024, 5, 128, 50, 1)
    assert math.isinf(high.request_rate)
    assert none.prefix_repetition_num_prefixes == 50
    assert (sustained.num_prompts, sustained.max_concurrency, sustained.request_rate) == (
        200, 4, 2.0)
    assert all(w.ignore_eos and w.seed is None for w in (high, none, sustained))
    assert high.tutorial_ratio() == pytest.approx(0.675)
    assert sustained.tutorial_ratio() == pytest.approx(0.73125)
    assert none.tutorial_ratio() == 0.0
    assert high.expected(BLOCK).ratio == pytest.approx(0.675)


def test_bench_argv_is_the_tutorials_command_plus_seed_and_result_options() -> None:
    high = tutorial_workloads()[0].with_seed(1001)
    argv = bench_argv(high, "http://127.0.0.1:8000", "openai/gpt-oss-120b",
                      tokenizer="/opt/models/gpt-oss-120b", result_dir="/var/lib/pb/run1",
                      result_filename="high_overlap-rep1.json",
                      metadata={"host": "trn-a", "configuration": "cached"})
    assert argv == [
        "vllm", "bench", "serve",
        "--base-url", "http://127.0.0.1:8000",
        "--model", "openai/gpt-oss-120b",
        "--tokenizer", "/opt/models/gpt-oss-120b",
        "--dataset-name", "prefix_repetition",
        "--prefix-repetition-prefix-len", "3072",
        "--prefix-repetition-suffix-len", "1024",
        "--prefix-repetition-num-prefixes", "5",
        "--prefix-repetition-output-len", "128",
        "--num-prompts", "50",
        "--seed", "1001",
        "--max-concurrency", "1",
        "--ignore-eos",
        # Explicit, so the expected hit ratio never rests on the client's default.
        "--ready-check-timeout-sec", "0",
        "--save-result", "--result-dir", "/var/lib/pb/run1",
        "--result-filename", "high_overlap-rep1.json",
        "--save-detailed",
        "--metadata", "host=trn-a", "configuration=cached",
    ]
    sustained = tutorial_workloads()[2].with_seed(7)
    argv = bench_argv(sustained, "http://h:8000", "m", tokenizer=None, result_dir="d",
                      result_filename="f.json", executable=["/opt/venv/bin/vllm"])
    assert argv[0] == "/opt/venv/bin/vllm"
    assert "--tokenizer" not in argv
    assert argv[argv.index("--request-rate") + 1] == "2"
    assert argv[argv.index("--max-concurrency") + 1] == "4"


def test_bench_argv_refuses_unseeded_and_unsafe_values() -> None:
    high = tutorial_workloads()[0]
    with pytest.raises(WorkloadError, match="no seed"):
        bench_argv(high, "http://h:8000", "m", tokenizer=None, result_dir="d",
                   result_filename="f.json")
    seeded = high.with_seed(1)
    with pytest.raises(WorkloadError, match="base_url"):
        bench_argv(seeded, "h:8000", "m", tokenizer=None, result_dir="d", result_filename="f")
    with pytest.raises(WorkloadError, match="single line"):
        bench_argv(seeded, "http://h", "m\n--evil", tokenizer=None, result_dir="d",
                   result_filename="f")
    with pytest.raises(WorkloadError, match="file name"):
        bench_argv(seeded, "http://h", "m", tokenizer=None, result_dir="d",
                   result_filename="../f")
    with pytest.raises(WorkloadError, match="metadata"):
        bench_argv(seeded, "http://h", "m", tokenizer=None, result_dir="d",
                   result_filename="f", metadata={"a=b": "c"})


def test_optional_flags_appear_only_when_set() -> None:
    w = Workload.from_dict({
        "name": "w", "prefix_repetition_prefix_len": 256, "prefix_repetition_suffix_len": 256,
        "prefix_repetition_num_prefixes": 2, "prefix_repetition_output_len": 8,
        "num_prompts": 10, "seed": 3, "num_warmups": 2, "ready_check_timeout_sec": 60,
        "burstiness": 0.5, "request_rate": 1.5, "disable_shuffle": True,
        "percentile_metrics": "ttft,e2el", "metric_percentiles": "50,99",
        "save_detailed": False, "ignore_eos": False})
    argv = bench_argv(w, "http://h", "m", tokenizer=None, result_dir="d", result_filename="f")
    for flag, value in (("--num-warmups", "2"), ("--ready-check-timeout-sec", "60"),
                        ("--burstiness", "0.5"), ("--request-rate", "1.5"),
                        ("--percentile-metrics", "ttft,e2el"),
                        ("--metric-percentiles", "50,99")):
        assert argv[argv.index(flag) + 1] == value
    assert "--disable-shuffle" in argv
    assert "--save-detailed" not in argv
    assert "--ignore-eos" not in argv
    assert w.pre_requests == 3  # ready check + 2 warmups
    assert w.expected(128).requests == 13


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_prompts": 4}, "must be >= prefix_repetition_num_prefixes"),
        ({"bogus": 1}, "unknown key"),
        ({"num_prompts": "50"}, "must be an integer"),
        ({"ignore_eos": "yes"}, "true or false"),
        ({"request_rate": 0}, "request_rate must be > 0"),
        ({"seed": 2**32}, "seed must be in"),
        ({"name": "../x"}, "name must be"),
        ({"dataset_name": "sharegpt"}, "not supported"),
    ],
)
def test_invalid_workloads_are_named(change: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "name": "w", "prefix_repetition_prefix_len": 1, "prefix_repetition_suffix_len": 1,
        "prefix_repetition_num_prefixes": 5, "prefix_repetition_output_len": 1,
        "num_prompts": 50}
    base.update(change)
    with pytest.raises(WorkloadError, match=message):
        Workload.from_dict(base)


def test_workloads_round_trip_and_load_from_yaml(tmp_path: Path) -> None:
    ws = tutorial_workloads()
    again = load_workloads([w.to_dict() for w in ws])
    assert again == ws
    path = tmp_path / "w.yml"
    path.write_text("workloads:\n  - name: a\n    prefix_repetition_prefix_len: 8\n"
                    "    prefix_repetition_suffix_len: 8\n    prefix_repetition_num_prefixes: 1\n"
                    "    prefix_repetition_output_len: 4\n    num_prompts: 3\n")
    assert load_workloads(path)[0].requests_sent == 3
    with pytest.raises(WorkloadError, match="unique"):
        load_workloads([ws[0].to_dict(), ws[0].to_dict()])


def test_seed_plan_is_distinct_per_run_and_paired_across_configurations() -> None:
    ws = tutorial_workloads()
    plan = plan_seeds(ws, repetitions=3, base_seed=1000)
    assert len(set(plan.seeds.values())) == 9
    assert plan.seed("high_overlap", 1) == 1000
    assert plan.seed("sustained_c4", 3) == 1008
    base = plan.for_configuration("baseline")
    cached = plan.for_configuration("cached")
    for (_cfg, w, r), seed in base.items():
        assert cached[("cached", w, r)] == seed
    seq = plan.sequence(ws, 3)
    assert [w.seed for w in seq] == list(range(1000, 1009))
    with pytest.raises(KeyError, match="no seed planned"):
        plan.seed("high_overlap", 4)


def test_seed_plan_refuses_collisions() -> None:
    high, none, _ = tutorial_workloads()
    with pytest.raises(WorkloadError, match="seed 0 planned for both"):
        plan_seeds([high.with_seed(0), none.with_seed(0)], 1, 100)
    with pytest.raises(WorkloadError, match="planned for both"):
        plan_seeds([high.with_seed(101), none], 2, 100)  # fixed 101/102 meets 100/101
    with pytest.raises(WorkloadError, match="out of"):
        plan_seeds([high], 2, 2**32 - 1)


def test_the_tutorials_seed_0_procedure_carries_over_exactly_as_recorded() -> None:
    # The fixtures' cached server: high, no-overlap, sustained, all with seed 0.
    seq = [w.with_seed(0) for w in tutorial_workloads()]
    result = carry_over(seq, block_size=BLOCK, vocab_size=VOCAB, capacity_blocks=8192)
    assert [(r.hit_tokens, r.query_tokens) for r in result] == [
        (138240, 204800), (7936, 204800), (615040, 819200)]  # the measured deltas
    assert [r.carried_over for r in result] == [0, 7936, 16000]
    assert result[1].ratio == pytest.approx(0.03875)


def test_planned_seeds_leave_nothing_to_carry_over() -> None:
    ws = tutorial_workloads()
    plan = plan_seeds(ws, repetitions=2, base_seed=0)
    result = carry_over(plan.sequence(ws, 2), block_size=BLOCK, vocab_size=VOCAB,
                        capacity_blocks=8192)
    assert [r.carried_over for r in result] == [0] * 6
    # And each run then measures exactly the block-aligned expectation.
    for w, r in zip(plan.sequence(ws, 2), result, strict=True):
        assert r.hit_tokens == w.expected(BLOCK).hit_tokens


def test_repeating_a_seed_on_one_server_is_caught() -> None:
    high = tutorial_workloads()[0].with_seed(5)
    result = carry_over([high, high], block_size=BLOCK, vocab_size=VOCAB)
    assert result[1].carried_over > 0
    assert result[1].ratio == pytest.approx(50 * 3968 / 204800)  # every prompt repeated


def test_expected_ratios_for_a_record() -> None:
    exp = tutorial_workloads()[0].expected_ratios(128)
    assert exp["tutorial_ratio"] == pytest.approx(0.675)
    assert exp["block_aligned_ratio"] == pytest.approx(0.675)
    assert (exp["hit_tokens"], exp["query_tokens"]) == (138240, 204800)
    odd = tutorial_workloads()[0].expected_ratios(1000)  # a block size that splits the prefix
    assert odd["hit_tokens_per_warm_request"] == 3000
    assert odd["block_aligned_ratio"] < odd["tutorial_ratio"]


def test_pre_requests_are_inferred_from_the_queries_delta() -> None:
    high = tutorial_workloads()[0]
    assert high.infer_pre_requests(204800) == 0  # the recorded run: no ready check
    assert high.infer_pre_requests(51 * 4096) == 1
    assert high.infer_pre_requests(204801) is None
    assert high.infer_pre_requests(4096) is None
