"""Measure the timed replay's throughput (requests per second, one core): the scheduler
model with step durations from a step-time model (prefixbench.engines.steptime), as the
TTFT prediction runs it (prefixbench.predict.ttftreplay).

A prefix_repetition-shaped stream (shared random prefixes, a distinct suffix each) sent
at ``--concurrency`` by the bench's client (all released at once) through vLLM's
scheduler model and through the Neuron plugin's (async, buckets and segments padded),
each step timed by a fixed cost model (the coefficients the recorded runs fit:
docs/performance.md). Must reach at least 10,000 requests/s at concurrency 32.

    make bench-ttft                              # 100,000 x 192+64 tokens, c=32
    make bench-ttft ARGS="--concurrency 4 --max-num-seqs 4"
"""

from __future__ import annotations

import argparse
import time

from prefixbench.engines.schedneuron import neuron_scheduler_sim
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.steptime import StepCost, replay_seconds, timed
from prefixbench_perf.stream_args import (
    PromptStream,
    add_server_arguments,
    add_stream_arguments,
    pin_one_core,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_stream_arguments(ap)
    ap.set_defaults(prompts=100_000, prefix_len=192, suffix_len=64, block_size=16,
                    capacity_blocks=4096)
    add_server_arguments(ap)
    args = ap.parse_args()
    pinned = pin_one_core()
    stream = PromptStream(args, pool_len=1_000_000)
    prompts = [stream.prompt(i) for i in range(args.prompts)]
    outs = [args.output_len] * len(prompts)
    zero = [0.0] * len(prompts)
    cpu_cost = StepCost("cpu", 0.0, 1.9e-3, 0.0, 18e-9)
    top = args.max_num_batched_tokens
    neuron_cost = StepCost("neuron", 0.0, 5e-3, 2e-6, 0.0, (top,), top,
                           (1, 2, 4, 8, 16, args.max_num_seqs))
    cap = args.capacity_blocks or None
    models = (
        ("vLLM Scheduler", timed(SchedulerSim(
            args.block_size, cap, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=top), cpu_cost)),
        ("NeuronScheduler (async)", timed(neuron_scheduler_sim(
            args.block_size, cap, max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=top), neuron_cost)),
    )
    print(f"requests:  {len(prompts):,} x {args.prefix_len}+{args.suffix_len} tokens, "
          f"{args.output_len} output each, concurrency {args.concurrency}, "
          f"max_num_seqs {args.max_num_seqs}; {pinned}")
    for name, sim in models:
        c0, w0 = time.process_time(), time.perf_counter()
        ttfts = replay_seconds(sim, prompts, outs, arrivals=zero,
                               concurrency=args.concurrency)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        print(f"{name + ':':26}{cpu:.1f} s CPU ({wall:.1f} s wall) -> "
              f"{len(prompts) / cpu:,.0f} requests/s timed ({sim.steps:,} steps, "
              f"mean TTFT {sum(ttfts) / len(ttfts) * 1e3:.1f} ms model time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
