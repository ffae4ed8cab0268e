"""The exact ``vllm bench serve`` command line of one workload run.

:func:`bench_argv` turns a seeded :class:`~prefixbench.engines.workloads.Workload` (its seed from
:func:`prefixbench.bench.seeds.plan_seeds`), the server, the model and where the result goes
into an argv list (never a shell string), refusing values that could inject flags or
lines. A custom workload is sent from its prepared file on the host
(:func:`prefixbench.engines.custom.prepare`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from prefixbench.engines.workloads import Workload, WorkloadError

__all__ = ["bench_argv"]

_METADATA_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _dataset_argv(w: Workload, dataset_path: str | None) -> list[str]:
    """The dataset flags, the count and the seed."""
    if w.is_custom:
        if (not dataset_path or not dataset_path.endswith(".jsonl")
                or any(c in dataset_path for c in "\n\r\x00")):
            raise WorkloadError(f"workload {w.name!r}: a custom workload needs the host "
                                f"path of its prepared .jsonl file, got {dataset_path!r}")
        if w.num_prompts < 1:
            raise WorkloadError(f"workload {w.name!r}: num_prompts is not resolved; "
                                f"prepare its file first (prefixbench.engines.custom.prepare)")
        return [
            "--dataset-name", w.dataset_name,
            "--dataset-path", dataset_path,
            "--custom-output-len", str(w.custom_output_len),
            "--skip-chat-template",
            "--no-oversample",
            "--num-prompts", str(w.num_prompts),
            "--seed", str(w.seed),
        ]
    if w.is_random:
        # vLLM's random dataset draws token ids from the tokenizer's vocabulary and
        # re-encodes them: the local tokenizer only, no dataset file, nothing downloaded
        # (vllm 0.32.0 vllm/benchmarks/datasets/datasets.py, RandomDataset.sample).
        return [
            "--dataset-name", w.dataset_name,
            "--random-input-len", str(w.random_input_len),
            "--random-output-len", str(w.random_output_len),
            "--random-range-ratio", _num(w.random_range_ratio),
            "--num-prompts", str(w.num_prompts),
            "--seed", str(w.seed),
        ]
    return [
        "--dataset-name", w.dataset_name,
        "--prefix-repetition-prefix-len", str(w.prefix_repetition_prefix_len),
        "--prefix-repetition-suffix-len", str(w.prefix_repetition_suffix_len),
        "--prefix-repetition-num-prefixes", str(w.prefix_repetition_num_prefixes),
        "--prefix-repetition-output-len", str(w.prefix_repetition_output_len),
        "--num-prompts", str(w.num_prompts),
        "--seed", str(w.seed),
    ]


def bench_argv(
    workload: Workload,
    base_url: str,
    model: str,
    *,
    tokenizer: str | None,
    result_dir: str,
    result_filename: str,
    metadata: Mapping[str, str] | None = None,
    executable: Sequence[str] = ("vllm",),
    dataset_path: str | None = None,
) -> list[str]:
    """The exact ``vllm bench serve`` argv for one run (a list, never a shell string).

    The workload must have a seed (see :func:`prefixbench.bench.seeds.plan_seeds`): relying
    on vLLM's default seed 0 is what contaminates workloads. ``metadata`` lands in the
    result JSON (``--metadata k=v ...``). A custom workload needs ``dataset_path``, the
    prepared file *on the host* (:func:`prefixbench.engines.custom.prepare`; it must end in
    ``.jsonl``), and a resolved ``num_prompts`` (:meth:`Workload.with_num_prompts`); it
    is sent with ``--skip-chat-template`` (the prepared text is exactly what the server
    gets) and ``--no-oversample``.
    """
    if workload.seed is None:
        raise WorkloadError(f"workload {workload.name!r} has no seed; assign one with "
                            f"plan_seeds() so runs cannot share cache entries")
    for label, value in (("base_url", base_url), ("model", model),
                         ("result_dir", result_dir), ("result_filename", result_filename)):
        if not value or any(c in value for c in "\n\r\x00"):
            raise WorkloadError(f"{label} must be a non-empty single line, got {value!r}")
    if not re.match(r"^https?://", base_url):
        raise WorkloadError(f"base_url must start with http:// or https://, got {base_url!r}")
    if "/" in result_filename:
        raise WorkloadError(f"result_filename must be a file name, got {result_filename!r}")
    w = workload
    argv = [*executable, "bench", "serve",
            "--base-url", base_url,
            "--model", model]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    argv += _dataset_argv(w, dataset_path)
    if w.max_concurrency is not None:
        argv += ["--max-concurrency", str(w.max_concurrency)]
    if not math.isinf(w.request_rate):
        argv += ["--request-rate", _num(w.request_rate)]
    if w.burstiness != 1.0:
        argv += ["--burstiness", _num(w.burstiness)]
    if w.ignore_eos:
        argv.append("--ignore-eos")
    if w.disable_shuffle:
        argv.append("--disable-shuffle")
    if w.num_warmups:
        argv += ["--num-warmups", str(w.num_warmups)]
    if w.ready_check_timeout_sec is not None:
        argv += ["--ready-check-timeout-sec", str(w.ready_check_timeout_sec)]
    if w.percentile_metrics:
        argv += ["--percentile-metrics", w.percentile_metrics]
    if w.metric_percentiles:
        argv += ["--metric-percentiles", w.metric_percentiles]
    argv += ["--save-result", "--result-dir", result_dir, "--result-filename", result_filename]
    if w.save_detailed:
        argv.append("--save-detailed")
    if metadata:
        items = []
        for key, value in metadata.items():
            text = str(value)
            if not _METADATA_KEY.match(key) or any(c in text for c in "\n\r\x00"):
                raise WorkloadError(f"metadata {key!r}={text!r}: keys are identifiers, "
                                    f"values single lines")
            items.append(f"{key}={text}")
        # --metadata takes nargs='*': keep it last so it cannot swallow other flags.
        argv += ["--metadata", *items]
    return argv
