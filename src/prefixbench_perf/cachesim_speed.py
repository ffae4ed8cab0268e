"""Measure the prefix-cache model's throughput (prompts per second, one core).

Replays a prefix_repetition-shaped stream (num_prefixes shared random prefixes, a
distinct random suffix per prompt, prefixes drawn at random) through
prefixbench.engines.cachesim and prints prompts/s and blocks/s. Building the prompts is timed
separately, so the figure is the model's alone.

    make bench-cachesim                                  # 1,000,000 prompts, 3072+1024, block 128
    make bench-cachesim ARGS="--tokens tuple"            # prompts as tuples of Python ints
    make bench-cachesim ARGS="--prompts 200000 --prefix-len 512 --suffix-len 128"
"""

from __future__ import annotations

import argparse
import random
import time
from array import array

from prefixbench.engines.cachesim import PrefixCacheSim, Tokens
from prefixbench_perf.stream_args import add_stream_arguments


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_stream_arguments(ap)
    ap.add_argument("--tokens", choices=("array", "tuple"), default="array",
                    help="prompt representation: array('I') of ids or tuple of ints")
    args = ap.parse_args()

    rnd = random.Random(0)  # noqa: S311 - benchmark data, not secrets
    pool_len = 4_000_000
    pool = array("I")
    pool.frombytes(rnd.randbytes(4 * pool_len))
    prefixes = [pool[i * args.prefix_len:(i + 1) * args.prefix_len]
                for i in range(args.num_prefixes)]
    start = args.num_prefixes * args.prefix_len
    span = pool_len - start - args.suffix_len
    sim = PrefixCacheSim(args.block_size, args.capacity_blocks or None)
    build = replay = 0.0
    done = hits = queries = 0
    while done < args.prompts:
        n = min(args.chunk, args.prompts - done)
        t0 = time.perf_counter()
        batch: list[Tokens] = []
        for i in range(done, done + n):
            k = start + (i * 7919) % span  # a different window of the pool per prompt
            prompt = prefixes[rnd.randrange(args.num_prefixes)] + pool[k:k + args.suffix_len]
            batch.append(prompt if args.tokens == "array" else tuple(prompt))
        t1 = time.perf_counter()
        result = sim.replay(batch)
        t2 = time.perf_counter()
        build += t1 - t0
        replay += t2 - t1
        hits += result.total_hit_tokens
        queries += result.query_tokens
        done += n
    blocks = done * ((args.prefix_len + args.suffix_len) // args.block_size)
    cap = args.capacity_blocks or "unbounded"
    print(f"prompts:        {done:,} x {args.prefix_len}+{args.suffix_len} tokens as "
          f"{args.tokens}, block {args.block_size}, capacity {cap} blocks")
    print(f"hit ratio:      {hits / queries:.4%} (evicted {sim.evicted_blocks:,} blocks)")
    print(f"replay time:    {replay:.1f} s -> {done / replay:,.0f} prompts/s, "
          f"{blocks / replay:,.0f} blocks/s")
    print(f"building input: {build:.1f} s (not counted above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
