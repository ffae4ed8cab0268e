"""The command-line options of a prefix_repetition-shaped prompt stream, shared by the
cache-model and what-if speed benchmarks (``make bench-cachesim``, ``make bench-whatif``)."""

from __future__ import annotations

import argparse


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
