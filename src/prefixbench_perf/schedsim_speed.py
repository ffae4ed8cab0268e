"""Measure the scheduler model's throughput (requests per second, one core).

Sends a prefix_repetition-shaped stream (num_prefixes shared random prefixes, a distinct
random suffix per prompt, prefixes drawn at random) through
prefixbench.engines.schedsim.SchedulerSim by a client keeping ``--concurrency`` requests
in flight, each generating ``--output-len`` tokens, and prints requests/s and scheduler
steps/s; then the same stream through the Neuron plugin's scheduler
(prefixbench.engines.schedneuron, async as on Neuron, its KV-concurrency cap computed
at ``--max-model-len``), which must replay at least 10,000 requests/s at concurrency 32.
Building the prompts is timed separately, so each figure is the model's alone; the
process is pinned to one core and each figure is its CPU time there (the wall time,
printed beside it, also counts whatever else the machine runs).

    make bench-schedsim                                  # 200,000 x 192+64 tokens, c=32
    make bench-schedsim ARGS="--concurrency 4 --max-num-seqs 4"   # the tutorial server
    make bench-schedsim ARGS="--prefix-len 3072 --suffix-len 1024 --block-size 128"
    make bench-schedsim ARGS="--kv-cache hybrid"          # gpt-oss's layout, window 128
    make bench-schedsim ARGS="--async-scheduling"         # vLLM's AsyncScheduler
    make bench-schedsim ARGS="--neuron-sync"              # NeuronScheduler, not async
"""

from __future__ import annotations

import argparse
import time
from array import array

from prefixbench.engines.schedhybrid import scheduler_sim_for
from prefixbench.engines.schedneuron import neuron_scheduler_sim
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench_perf.stream_args import (
    PromptStream,
    add_server_arguments,
    add_stream_arguments,
    pin_one_core,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_stream_arguments(ap)
    ap.set_defaults(prompts=200_000, prefix_len=192, suffix_len=64, block_size=16,
                    capacity_blocks=4096)
    add_server_arguments(ap)
    ap.add_argument("--kv-cache", choices=("full", "hybrid"), default="full")
    ap.add_argument("--sliding-window", type=int, default=128)
    ap.add_argument("--async-scheduling", action="store_true",
                    help="model vLLM's AsyncScheduler (a GPU server's default)")
    ap.add_argument("--max-model-len", type=int, default=8192,
                    help="the Neuron model's KV-concurrency cap is computed at it")
    ap.add_argument("--neuron-sync", action="store_true",
                    help="NeuronScheduler rather than NeuronAsyncScheduler")
    args = ap.parse_args()
    pinned = pin_one_core()
    stream = PromptStream(args, pool_len=4_000_000)
    sim = scheduler_sim_for(args.kv_cache, args.block_size, args.capacity_blocks or None,
                            sliding_window=args.sliding_window,
                            max_num_seqs=args.max_num_seqs,
                            max_num_batched_tokens=args.max_num_batched_tokens,
                            async_scheduling=args.async_scheduling)
    neuron = neuron_scheduler_sim(args.block_size, args.capacity_blocks or None,
                                  max_model_len=args.max_model_len,
                                  max_num_seqs=args.max_num_seqs,
                                  max_num_batched_tokens=args.max_num_batched_tokens,
                                  async_scheduling=not args.neuron_sync)
    build = run = neuron_run = wall = neuron_wall = 0.0
    done = 0
    while done < args.prompts:
        n = min(args.chunk, args.prompts - done)
        t0 = time.perf_counter()
        batch: list[array[int]] = [stream.prompt(i) for i in range(done, done + n)]
        t1 = time.perf_counter()
        cpu, took = _send(sim, batch, args, last=done + n >= args.prompts)
        run, wall = run + cpu, wall + took
        cpu, took = _send(neuron, batch, args, last=done + n >= args.prompts)
        neuron_run, neuron_wall = neuron_run + cpu, neuron_wall + took
        build += t1 - t0
        done += n
    cap = args.capacity_blocks or "unbounded"
    print(f"requests:       {done:,} x {args.prefix_len}+{args.suffix_len} tokens, "
          f"{args.output_len} output each, block {args.block_size}, capacity {cap} blocks, "
          f"{args.kv_cache} KV-cache manager")
    print(f"server/client:  concurrency {args.concurrency}, max_num_seqs "
          f"{args.max_num_seqs}, max_num_batched_tokens {args.max_num_batched_tokens}, "
          f"{'async' if args.async_scheduling else 'synchronous'} scheduler; {pinned}")
    print(f"hit ratio:      {sim.hit_tokens_total / sim.query_tokens_total:.4%} (evicted "
          f"{sim.evicted_blocks:,} blocks, {sim.preempted_query_tokens:,} tokens "
          f"re-queried after preemptions)")
    print(f"model time:     {run:.1f} s CPU ({wall:.1f} s wall) -> {done / run:,.0f} requests/s, "
          f"{sim.steps / run:,.0f} scheduler steps/s ({sim.steps:,} steps)")
    print(f"Neuron model:   {neuron_run:.1f} s CPU ({neuron_wall:.1f} s wall) -> "
          f"{done / neuron_run:,.0f} requests/s, "
          f"{neuron.steps / neuron_run:,.0f} steps/s ({neuron.steps:,} steps, "
          f"{neuron.prefill_steps:,} prefill); NeuronScheduler"
          f"{'' if args.neuron_sync else ' (async)'}, KV-concurrency cap "
          f"{neuron.kv_concurrency} at max_model_len {args.max_model_len}, hit ratio "
          f"{neuron.hit_tokens_total / neuron.query_tokens_total:.4%}, padding "
          f"{neuron.padded_tokens - neuron.prefill_tokens:,} tokens")
    print(f"building input: {build:.1f} s (not counted above)")
    return 0


def _send(sim: SchedulerSim, batch: list[array[int]], args: argparse.Namespace, *,
          last: bool) -> tuple[float, float]:
    """Send ``batch`` through ``sim`` (and drain it after the ``last`` one); CPU and wall
    seconds."""
    t0, w0 = time.process_time(), time.perf_counter()
    for tokens in batch:
        sim.send(tokens, args.output_len, concurrency=args.concurrency)
    if last:
        sim.drain()
    return time.process_time() - t0, time.perf_counter() - w0


if __name__ == "__main__":
    raise SystemExit(main())
