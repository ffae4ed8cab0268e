"""The plan states what each workload sends and what the cache model expects of it on
this server, and warns where a workload's numbers would mislead, before any host is
touched."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from prefixbench.config import plan, rules_workload, settings, workload_estimate
from prefixbench.config.workload_estimate import PLAN_MAX_TOKENS, estimate, sizing_of
from prefixbench.engines.cachemodel import CacheModel
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.predict.whatif import predict_prefix_repetition

NEURON: dict[str, Any] = {"prefixbench_platform": "neuron",
                          "vllm_service_model": "/opt/models/gpt-oss-120b",
                          "prefixbench_workloads": []}
CPU_GPT_OSS: dict[str, Any] = {"prefixbench_platform": "cpu",
                               "vllm_service_model": "/opt/models/tiny-gptoss",
                               "vllm_service_max_num_batched_tokens": 1024,
                               "prefixbench_workloads": []}


def _mine(**extra: Any) -> dict[str, Any]:
    return {"name": "mine", "prefix_repetition_prefix_len": 2048,
            "prefix_repetition_suffix_len": 512, "prefix_repetition_num_prefixes": 4,
            "prefix_repetition_output_len": 64, "num_prompts": 40, "max_concurrency": 1,
            **extra}


#: The plan's serving on Neuron for a workload at concurrency 4 (no ready check or warmups
#: in _mine): the plugin's async scheduler, its KV-concurrency cap at max_model_len 4096
#: (100 blocks of 64 tokens hold one request of 4096: at 8192 none, and a Neuron server
#: would not start).
NEURON_C4 = Serving(4, 4, 1024, async_scheduling=True, scheduler="neuron", max_model_len=4096)


def _warnings(base: dict[str, Any], *workloads: dict[str, Any], **extra: Any) -> list[str]:
    return rules_workload.workload_warnings({**base, **extra,
                                             "prefixbench_workloads": list(workloads)})


def test_the_plan_states_requests_tokens_and_the_models_ratio_per_workload() -> None:
    lines = plan.workload_lines(NEURON)
    assert lines[1] == ("  sends 50 requests x 4,096 prompt tokens = 204,800 prompt tokens, "
                        "6,400 output tokens")
    assert lines[2].startswith("  expected hit ratio 67.5% (the bundle's cache model on the "
                               "prompts' token lengths; no tokenizer yet")
    assert lines[3] == ("    assumes full attention (gpt-oss on vllm-neuron: one "
                        "full-attention group), block 32 (vllm-neuron 0.21's default), an "
                        "unbounded KV cache (its size is known once the server starts), one "
                        "request at a time")
    # On Neuron (the default platform) through the plugin's scheduler (issue 44).
    assert lines[11].endswith("concurrency 4 through the Neuron plugin's async scheduler model "
                              "(max_num_seqs 4, max_num_batched_tokens 1024)")
    # Full attention, unbounded: the sustained load's hits do not depend on timing.
    assert lines[12] == ("    the same whenever the requests reach the engine (over 23 "
                         "arrival timings)")
    assert lines[13].startswith("criterion high_overlap")  # then the criteria


def test_gpt_oss_on_cpu_is_expected_through_the_hybrid_model() -> None:
    lines = plan.workload_lines(CPU_GPT_OSS)
    high, sustained = tutorial_workloads()[0], tutorial_workloads()[2]
    hybrid = CacheModel("hybrid").chunked(1024)
    want = predict_prefix_repetition(high, block_size=128, cache_model=hybrid).ratio
    assert want == pytest.approx(0.60)  # each prefix's first repeat misses
    assert lines[2].startswith("  expected hit ratio 60.0% ")
    assert lines[3].startswith("    assumes hybrid sliding window 128 + full attention "
                               "(gpt-oss on vLLM's hybrid manager), block 128 (vLLM's cpu "
                               "default)")
    at_4 = predict_prefix_repetition(sustained, block_size=128, cache_model=hybrid,
                                     serving=Serving(4, 4, 1024)).ratio
    assert at_4 is not None and lines[10].startswith(f"  expected hit ratio {at_4 * 100:.1f}%")


def test_the_block_size_and_capacity_come_from_the_settings() -> None:
    s = {"prefixbench_platform": "neuron", "vllm_service_model": "/opt/models/llama",
         "vllm_service_block_size": 64, "vllm_service_num_gpu_blocks_override": 101,
         "vllm_service_max_model_len": 4096,
         "prefixbench_workloads": [_mine(max_concurrency=4, num_prompts=40)]}
    sizing = sizing_of(s)
    assert (sizing.block_size, sizing.capacity_blocks, sizing.model.kind) == (64, 100, "full")
    lines = plan.workload_lines(s)
    assert lines[3] == ("    assumes full attention, block 64 (vllm_service_block_size), 100 "
                        "usable KV blocks, concurrency 4 through the Neuron plugin's async "
                        "scheduler model (max_num_seqs 4, max_num_batched_tokens 1024)")
    w = Workload.from_dict(_mine(max_concurrency=4))
    bounded = predict_prefix_repetition(w, block_size=64, capacity_blocks=100,
                                        serving=NEURON_C4).ratio
    vllms = predict_prefix_repetition(w, block_size=64, capacity_blocks=100,
                                      serving=Serving(4, 4, 1024)).ratio
    assert bounded != vllms  # the scheduler matters where the cache binds
    assert bounded is not None and bounded < w.expected(64).ratio  # 100 blocks evict
    assert lines[2].startswith(f"  expected hit ratio {bounded * 100:.1f}% ")
    # Four requests at once in 100 blocks: when each reaches the engine moves the hits.
    band = predict_prefix_repetition(w, block_size=64, capacity_blocks=100,
                                     serving=NEURON_C4).band
    assert band is not None and band[0] < band[1]
    assert lines[4].startswith(f"    when requests reach the engine moves it: "
                               f"{band[0]:.2%} to {band[1]:.2%} over 33 arrival timings")


def test_a_big_workload_is_not_replayed_and_the_plan_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("replayed a workload above the plan's cap")

    monkeypatch.setattr("prefixbench.predict.whatif.predict_prefix_repetition", refuse)
    workload_estimate._estimate.cache_clear()
    big = _mine(num_prompts=2000, max_concurrency=8)  # 2000 x 2560 = 5.1 M tokens
    assert PLAN_MAX_TOKENS < 2000 * 2560
    lines = plan.workload_lines({**NEURON, "prefixbench_workloads": [big]})
    w = Workload.from_dict(big)
    assert lines[2].startswith(f"  expected hit ratio {w.expected(32).ratio * 100:.1f}% (the "
                               f"block-aligned formula, exact for this cache")
    lines = plan.workload_lines({**CPU_GPT_OSS, "prefixbench_workloads": [big]})
    assert lines[2] == ("  expected hit ratio: none from the cache model (not replayed: "
                        "5,120,000 prompt tokens, above the plan's 4,000,000; prefixbench "
                        "whatif --workload mine gives it)")


def test_the_tutorial_on_neuron_draws_no_workload_warning() -> None:
    assert _warnings(NEURON) == []


def test_a_prefix_shorter_than_a_block_warns_that_no_hit_is_possible() -> None:
    (line,) = _warnings(NEURON, _mine(prefix_repetition_prefix_len=100),
                        vllm_service_block_size=128)
    assert line == ("workload mine: its prefix (100 tokens) does not fill one KV block (128, "
                    "vllm_service_block_size) and vLLM caches whole blocks only, so no "
                    "shared-prefix hit is possible: raise prefix_repetition_prefix_len to at "
                    "least 128")
    assert _warnings(NEURON, _mine(prefix_repetition_prefix_len=128),
                     vllm_service_block_size=128) == []


def test_one_prompt_per_prefix_warns_unless_it_is_a_no_overlap_workload() -> None:
    (line,) = _warnings(NEURON, _mine(num_prompts=4, criterion="high_overlap"))
    assert line.startswith("workload mine: 4 prompts on 4 prefixes is one prompt per prefix, "
                           "so every prompt is cold")
    assert line.endswith("raise num_prompts to at least 8 or lower "
                         "prefix_repetition_num_prefixes")
    assert _warnings(NEURON, _mine(num_prompts=4)) == []  # inferred no_overlap: by design


def test_a_num_prompts_the_prefixes_do_not_divide_warns_of_the_dropped_requests() -> None:
    (line,) = _warnings(NEURON, _mine(num_prompts=42))
    assert line == ("workload mine: num_prompts 42 is not a multiple of "
                    "prefix_repetition_num_prefixes 4: vLLM sends 40 (10 per prefix) and "
                    "drops 2; set num_prompts to 40 or 44")
    assert plan.workload_lines({**NEURON, "prefixbench_workloads": [_mine(num_prompts=42)]}
                               )[1] == ("  sends 40 requests (2 of num_prompts dropped: not a "
                                        "multiple of the prefixes) x 2,560 prompt tokens = "
                                        "102,400 prompt tokens, 2,560 output tokens")


def test_concurrency_the_server_or_the_workload_cannot_reach_warns() -> None:
    (line,) = _warnings(NEURON, _mine(max_concurrency=64))
    assert line == ("workload mine: max_concurrency 64 is more than the 40 requests it sends, "
                    "so at most 40 are ever in flight: raise num_prompts well above 64")
    (line,) = _warnings(NEURON, _mine(max_concurrency=8))
    assert line.startswith("workload mine: max_concurrency 8 > vllm_service_max_num_seqs 4: "
                           "the server runs 4 at once and queues the rest")
    assert _warnings(NEURON, _mine(max_concurrency=8), vllm_service_max_num_seqs=8) == []
    (line,) = _warnings(NEURON, _mine(max_concurrency=None))
    assert line.startswith("workload mine: max_concurrency unset and request_rate inf send "
                           "all 40 requests at once; the server runs 4")


def test_a_finite_rate_without_a_concurrency_cap_warns_of_an_open_loop() -> None:
    (line,) = _warnings(NEURON, _mine(max_concurrency=None, request_rate=2.0))
    assert line == ("workload mine: request_rate 2/s with max_concurrency unset is an open "
                    "loop: if the server falls behind, requests queue without bound and TTFT "
                    "measures the queue, and the cache model assumes all 40 in flight; set "
                    "max_concurrency to the clients you expect")


def test_an_output_as_long_as_the_prompt_warns_that_decode_dominates() -> None:
    (line,) = _warnings(NEURON, _mine(prefix_repetition_output_len=2560))
    assert line == ("workload mine: out 2560 >= its 2560-token prompt: the run is mostly "
                    "decode, which prefix caching does not shorten, and each request holds 80 "
                    "decode blocks that never hit; lower prefix_repetition_output_len (the "
                    "tutorial's is 128) unless decode is what you size")


def test_a_sliding_window_that_costs_half_the_hits_on_gpt_oss_is_warned() -> None:
    (line,) = _warnings(CPU_GPT_OSS, _mine(num_prompts=12))  # 3 prompts per prefix
    assert line == (
        "workload mine: gpt-oss's sliding-window layers keep the last 128 tokens, so each "
        "prefix's first repeat hits nothing (the window's blocks at the prefix's end are "
        "cached only then): expected 26.7% against 53.3% with full attention; send more "
        "prompts per prefix (now 3; the tutorial's high_overlap sends 10)")
    # The tutorial's high_overlap pays 7.5 of 67.5 points: the plan's expected line says
    # 60.0%, and no warning.
    assert _warnings(CPU_GPT_OSS) == []
    sizing = sizing_of(CPU_GPT_OSS)
    high = tutorial_workloads()[0]
    assert (estimate(high, sizing).ratio, estimate(high, sizing, CacheModel()).ratio) == (
        pytest.approx(0.600), pytest.approx(0.675))
    assert _warnings(NEURON, _mine(num_prompts=12)) == []  # full attention on Neuron


def test_workloads_with_different_prompts_and_one_ratio_warn_that_they_compare_nothing(
        ) -> None:
    short = _mine(name="short", prefix_repetition_prefix_len=20,
                  prefix_repetition_suffix_len=2000)
    cold = _mine(name="cold", num_prompts=4)
    lines = _warnings(NEURON, short, cold, vllm_service_block_size=32)
    assert lines[-1] == ("workloads short and cold send different prompts but both expect "
                         "0.0%, so comparing them says nothing about prefix sharing: make "
                         "their shared prefixes differ by whole blocks (block 32)")
    assert not any(line.startswith("workloads ") for line in _warnings(NEURON))
    # The same prompts at another concurrency: equal ratios are the point of comparing.
    assert _warnings(NEURON, _mine(name="one"), _mine(name="four", max_concurrency=4)) == []


def test_the_settings_module_registers_the_workload_warnings() -> None:
    # What the preflight plugin imports, alone in a fresh interpreter.
    code = ("from prefixbench.config import catalogue, settings; "
            "print([r.__name__ for r in catalogue.WARNINGS])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "workloads_measure_what_they_say" in out


def test_preflight_shows_the_workload_warnings_with_the_hosts_own() -> None:
    base = {"prefixbench_instance_type": "trn2.48xlarge",
            "vllm_service_model": "/opt/models/gpt-oss-120b",
            "prefixbench_workloads": [_mine(max_concurrency=8)]}
    checked = settings.validate(base, "h1", extra_names=list(base))
    assert checked.ok
    warned = [w for w in checked.warnings if "max_concurrency 8" in w]
    assert warned and warned[0].startswith("h1: workload mine: max_concurrency 8 >")
    shown = plan.render([plan.host_plan("h1", checked.settings)])
    assert any(line.startswith("  WARNING: workload mine: max_concurrency 8 >")
               for line in shown)
