"""``prefixbench whatif --calibration RUN_DIR``: the what-if's TTFT lines.

For each host of a finished run with a baseline at concurrency 1, the host's step-time
model (:func:`prefixbench.report.ttft_predicted.host_fits`) times the what-if's requests
with and without prefix caching (:mod:`prefixbench.predict.ttft_whatif`); printed
first, then every assumption with its source, the host, its release and the fit.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from prefixbench.frontend.cli_shared import UsageError
from prefixbench.frontend.whatif_setup import Assumed, Setup

__all__ = ["add_calibration_argument", "calibration_of", "print_calibrated"]


def add_calibration_argument(w: argparse.ArgumentParser) -> None:
    w.add_argument("--calibration", type=Path, metavar="RUN_DIR",
                   help="a finished run's directory: predict median and p99 TTFT with and "
                   "without prefix caching on each of its hosts, timed by a model fitted "
                   "to that host's baseline benches")


def calibration_of(args: argparse.Namespace, setup: Setup) -> list[Any]:
    """The hosts' fitted models of ``--calibration`` (empty without it); a
    :class:`UsageError` naming the problem if the run cannot calibrate."""
    if getattr(args, "calibration", None) is None:
        return []
    from prefixbench.report.load import ReportInputError, load_run  # noqa: PLC0415
    from prefixbench.report.ttft_predicted import host_fits  # noqa: PLC0415
    if args.capacity_curve is not None:
        raise UsageError("--calibration predicts TTFT at one capacity: leave out "
                         "--capacity-curve")
    try:
        data = load_run(args.calibration)
        fits = host_fits(data, max_num_batched_tokens=setup.serving.max_num_batched_tokens)
    except (OSError, ReportInputError, ValueError) as exc:
        raise UsageError(f"--calibration {args.calibration}: {exc}") from None
    if not fits:
        raise UsageError(f"--calibration {args.calibration}: no host has a baseline bench at "
                         f"concurrency 1 (TTFTs and inter-token latencies without prefix "
                         f"caching) to fit its step time to")
    return fits


def print_calibrated(fits: list[Any], args: argparse.Namespace, workload: Any,
                     setup: Setup, out: TextIO) -> None:
    """The TTFT lines of each calibrated host."""
    if not fits:
        return
    from prefixbench.predict.ttft_whatif import (  # noqa: PLC0415
        calibrated_ttft,
        workload_requests,
    )
    try:
        prompts, outputs = workload_requests(workload, args.tokenizer)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--calibration: {exc}") from None
    for cal in fits:
        got = calibrated_ttft(cal.fit, workload, prompts, outputs,
                              block_size=setup.block_size,
                              capacity_blocks=args.capacity_blocks,
                              cache_model=setup.cache_model, serving=setup.serving)
        c, u = got.cached, got.uncached
        print(f"TTFT predicted:  median {c.median_s * 1e3:.1f} ms with prefix caching, "
              f"{u.median_s * 1e3:.1f} ms without ({got.median_saving:.1%} less); p99 "
              f"{c.p99_s * 1e3:.1f} / {u.p99_s * 1e3:.1f} ms [host {cal.host}]", file=out)
        for a in _assumptions(cal, setup):
            print(a.line(), file=out)
        if cal.platform is not None and cal.platform != setup.platform:
            print(f"{'':<17}the calibration host runs {cal.platform}, the what-if models "
                  f"{setup.platform}: its step times are another server's", file=out)


def _assumptions(cal: Any, setup: Setup) -> list[Assumed]:
    fit = cal.fit
    return [
        Assumed("calibration host", f"{cal.host} (platform {cal.platform or 'unknown'}, "
                f"release {cal.release or 'none'}, vLLM {cal.vllm or 'unknown'})",
                "the run's fingerprint.json"),
        Assumed("step time", "step + token x tokens + pair x attention pairs, per step; "
                "+ request outside steps", "prefixbench.engines.steptime"),
        Assumed("fit", fit.summary(), "the host's baseline benches, prefixbench.predict."
                "ttftfit"),
        Assumed("p99 tail", f"+{fit.tail_s * 1e3:.1f} ms (the baseline's p99 over the "
                f"model's)", "prefixbench.predict.ttftreplay"),
        Assumed("stated error", "median 10%, p99 25%", "docs/performance.md, 'TTFT "
                "predicted'"),
        Assumed("scheduler", setup.serving.describe(), "the what-if's server settings"),
    ]
