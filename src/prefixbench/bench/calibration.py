"""The calibration bench: prompts of varied lengths on the baseline server, for the TTFT fit.

The tutorial's prompts all have one length, so its baseline benches give one TTFT
equation for the four terms of the step-time model (:mod:`prefixbench.predict.ttftfit`).
This bench adds what separates them: vLLM's ``random`` dataset, ``CALIBRATION_PROMPTS``
prompts whose lengths are drawn uniformly from an eighth of the run's longest tutorial
prompt up to that prompt (on Neuron's 4096-token prompts: 512-4096 tokens; on the
simulated fleet's 2048: 256-2048), sent one at a time (``--max-concurrency 1``), short
outputs, per-request TTFTs kept (``--save-detailed``). It runs on the baseline server
after that server's tutorial benches, before the servers switch; its record is
``<host>/baseline/calibration/rep1.json``, written and resumed like every bench's, with
one difference: a resume runs it only while the baseline server has a tutorial bench left,
never starting that server for it alone (:func:`skipped_line`).

It is not a tutorial workload: no criterion judges it (:mod:`prefixbench.bench.criteria`),
the report's tables, verdicts and fleet checks never see it (``report.load`` keeps it
apart); only the TTFT fit reads it. ``prefixbench_calibration: false`` leaves it out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from prefixbench.engines.workloads import Workload

__all__ = ["CALIBRATION", "calibration_workload", "enabled", "is_calibration", "plan_line",
           "skipped_line"]

#: The calibration bench's workload name (reserved: a declared workload cannot take it).
CALIBRATION: Final = "calibration"
#: Requests of the bench (about five per length bucket of a 4-bucket spread).
CALIBRATION_PROMPTS: Final = 20
#: Output tokens per request: enough for a median inter-token latency, and short.
CALIBRATION_OUTPUT_LEN: Final = 16
#: The shortest prompt as a share of the longest.
SHORTEST: Final = 1 / 8
#: The longest prompt when no prefix_repetition workload sets it (your own prompts only).
DEFAULT_LONGEST: Final = 4096


def enabled(settings: Mapping[str, Any]) -> bool:
    """Whether the hosts run the calibration bench: on unless ``prefixbench_calibration``
    is false, and only where a baseline server runs (not in a KV-capacity sweep)."""
    return (bool(settings.get("prefixbench_calibration", True))
            and "baseline" in (settings.get("prefixbench_configurations") or ["baseline"])
            and not settings.get("prefixbench_sweep_kv_blocks"))


def _ratio() -> float:
    """vLLM's range ratio that spans ``[SHORTEST, 1]`` of the longest prompt."""
    return round((1 - SHORTEST) / (1 + SHORTEST), 3)


def lengths(settings: Mapping[str, Any], workloads: list[Workload]) -> tuple[int, int]:
    """The shortest and longest prompt the bench sends: up to the longest tutorial prompt
    of ``workloads`` (else :data:`DEFAULT_LONGEST`), within the server's
    ``max_model_len`` with the longest output."""
    longest = max((w.prompt_len for w in workloads
                   if w.dataset_name == "prefix_repetition"), default=DEFAULT_LONGEST)
    mml = settings.get("vllm_service_max_model_len")
    out_max = math.ceil(CALIBRATION_OUTPUT_LEN * (1 + _ratio()))
    if mml:
        longest = min(longest, int(mml) - out_max - 1)
    return max(1, round(longest * SHORTEST)), longest


def calibration_workload(settings: Mapping[str, Any], workloads: list[Workload]) -> Workload:
    """The bench as a :class:`Workload` (``dataset_name: random``); its seed is the run's
    base seed (the baseline server caches nothing, so no seed can contaminate another)."""
    _, longest = lengths(settings, workloads)
    ratio = _ratio()
    # vLLM draws from [floor(len * (1 - r)), ceil(len * (1 + r))] (vllm 0.32.0
    # vllm/benchmarks/datasets/utils.py get_sampling_params): the mean length puts the
    # top at the longest prompt.
    return Workload(name=CALIBRATION, dataset_name="random",
                    random_input_len=math.floor(longest / (1 + ratio)),
                    random_output_len=CALIBRATION_OUTPUT_LEN, random_range_ratio=ratio,
                    num_prompts=CALIBRATION_PROMPTS, max_concurrency=1,
                    seed=int(settings.get("prefixbench_base_seed", 1000)), criterion="none")


def expected(block_size: int | None, max_num_seqs: int, max_num_batched_tokens: int
             ) -> dict[str, Any]:
    """The record's ``expected``: no hit ratio to expect; the server's limits, which the
    TTFT fit reads."""
    return {"tutorial_ratio": None, "block_aligned_ratio": None, "block_size": block_size,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "note": "the calibration bench: no expected hit ratio, never judged"}


def is_calibration(workload: str) -> bool:
    """Whether a result's workload name is the calibration bench's."""
    return workload == CALIBRATION


def plan_line(settings: Mapping[str, Any], workloads: list[Workload]) -> str:
    """What the plan says of the bench on a host."""
    if not enabled(settings):
        return ("calibration bench: off (prefixbench_calibration: false, or no baseline "
                "server): the TTFT fit keeps two of its four terms")
    shortest, longest = lengths(settings, workloads)
    return (f"calibration bench: {CALIBRATION_PROMPTS} random prompts of {shortest}-"
            f"{longest} tokens on the baseline server after its benches, one at a time "
            f"(for the TTFT fit's four terms; never judged; prefixbench_calibration: false "
            f"leaves it out)")


def skipped_line(host: str) -> str:
    """What a resume says of a host whose baseline server has nothing left but the
    calibration bench (prefixbench.bench.experiment.pending_items leaves it out)."""
    return (f"{host}: this run has no calibration bench result, and the baseline server is "
            f"not started for it alone (every other bench of it is done): the TTFT fit "
            f"keeps two of its four terms; a new run (a new prefixbench_run_id) has one: "
            f"docs/own-traffic.md, \"Calibrating the TTFT model\" (whatif --calibration)")
