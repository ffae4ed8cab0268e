"""The command-line options of a prefix_repetition-shaped prompt stream, shared by the
speed benchmarks (``make bench-cachesim``, ``bench-whatif``, ``bench-schedsim``,
``bench-ttft``), the server options of the two that replay through a scheduler model, the
stream itself and the one-core pinning they measure on."""

from __future__ import annotations

import argparse
import os
import random
from array import array


def add_stream_arguments(ap: argparse.ArgumentParser) -> None:
    """``--prompts``, the prompt's shape (prefix, suffix, prefixes), the block size, the KV
    capacity and the chunk of prompts built at a time."""
    ap.add_argument("--prompts", type=int, default=1_000_000)
    ap.add_argument("--prefix-len", type=int, default=3072)
    ap.add_argument("--suffix-len", type=int, default=1024)
    ap.add_argument("--num-prefixes", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--capacity-blocks", type=int, default=8192,
                    help="KV capacity in blocks (0 = unbounded; memory grows with prompts)")
    ap.add_argument("--chunk", type=int, default=1000, help="prompts built per batch")


def add_server_arguments(ap: argparse.ArgumentParser) -> None:
    """The client's concurrency, each request's output tokens and the server's two batch
    limits, for the benchmarks that replay through a scheduler model."""
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)


class PromptStream:
    """``num_prefixes`` random prefixes drawn at random, each followed by its own window of
    a random token pool as the suffix; seeded, so every run sends the same stream."""

    def __init__(self, args: argparse.Namespace, pool_len: int, seed: int = 0) -> None:
        self.rnd = random.Random(seed)  # noqa: S311 - benchmark data, not secrets
        self.pool = array("I")
        self.pool.frombytes(self.rnd.randbytes(4 * pool_len))
        self.prefix_len, self.suffix_len = args.prefix_len, args.suffix_len
        self.prefixes = [self.pool[i * self.prefix_len:(i + 1) * self.prefix_len]
                         for i in range(args.num_prefixes)]
        self.start = args.num_prefixes * self.prefix_len
        self.span = pool_len - self.start - self.suffix_len

    def prompt(self, i: int) -> array[int]:
        """Prompt ``i``: a random prefix and a different window of the pool per prompt."""
        k = self.start + (i * 7919) % self.span
        return (self.prefixes[self.rnd.randrange(len(self.prefixes))]
                + self.pool[k:k + self.suffix_len])


def pin_one_core() -> str:
    """Pin this process to its lowest allowed core; says which (or why not)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is None:  # pragma: no cover - not Linux
        return "not pinned"
    core = min(affinity(0))
    os.sched_setaffinity(0, {core})
    return f"pinned to core {core}"
