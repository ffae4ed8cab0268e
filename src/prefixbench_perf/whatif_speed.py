"""Measure the what-if analyzer's speed (prompts per second), and its overhead over the tokenizer.

1. prefix_repetition, the tutorial's shape (3072 + 1024 tokens, 5 prefixes), 1,000,000
   prompts by default: prompts drawn as prefixbench.predict.whatif draws them (32-bit words
   from numpy's legacy MT19937 stream), the prefix of each request chosen in vLLM's
   shuffled order, replayed through the cache model in chunks (all of them would not fit
   in memory). Drawing and replaying are timed separately.
2. custom prompts, with tokenization: a JSONL file of text prompts (a shared system
   prompt plus a distinct question each; the simulated fleet's word-level tokenizer),
   through prefixbench.predict.whatif.predict: read, prepare, send order, encode, replay. Side
   by side, for each worker count: the host's tokenizer alone encoding the same prompts
   (the tokenizers library's encode_batch_fast over the texts already in memory, in
   batches of --tokenizer-batch, with its own parallelism: off for 1 worker, else its
   rayon pool on every core the workers can use), the whole prediction, and their
   ratio, in wall and in CPU seconds (the CPU ratio is the steadier one on a busy
   machine). The best of --repeat runs of each, interleaved, is kept. Predictions must be
   identical for every worker count.

    make bench-whatif                                      # both, defaults
    make bench-whatif ARGS="--prompts 0 --custom-prompts 5000 --workers 1,2 --repeat 3"
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from array import array
from pathlib import Path

from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.prefix_repetition import LegacyNumpyRandom, prefix_order
from prefixbench.engines.workloads import Workload
from prefixbench.measure.ratios import block_aligned_expected
from prefixbench.predict import replay, whatif
from prefixbench_perf.stream_args import add_stream_arguments

#: The tokenizers library's rayon pool (the tokenizer-alone runs only; read at its first
#: parallel batch): every core.
os.environ.setdefault("RAYON_NUM_THREADS", str(replay.usable_cores()))


def prefix_repetition(args: argparse.Namespace) -> None:
    n, k = args.prompts, args.num_prefixes
    gen = LegacyNumpyRandom(args.seed)
    prefixes = [gen.words(args.prefix_len) for _ in range(k)]
    order = [p for p, _ in prefix_order(args.seed, n, k)]
    sim = PrefixCacheSim(args.block_size, args.capacity_blocks or None)
    draw = replay = 0.0
    hits = queries = 0
    for start in range(0, len(order), args.chunk):
        t0 = time.perf_counter()
        batch: list[array[int]] = [prefixes[p] + gen.words(args.suffix_len)
                                   for p in order[start:start + args.chunk]]
        t1 = time.perf_counter()
        result = sim.replay(batch)
        t2 = time.perf_counter()
        draw += t1 - t0
        replay += t2 - t1
        hits += result.total_hit_tokens
        queries += result.query_tokens
    sent = len(order)
    formula = block_aligned_expected(n, k, args.prefix_len, args.suffix_len, args.block_size)
    cap = args.capacity_blocks or "unbounded"
    print(f"[1] prefix_repetition: {sent:,} prompts x {args.prefix_len}+{args.suffix_len} "
          f"tokens, {k} prefixes, block {args.block_size}, capacity {cap}")
    print(f"    hit ratio {hits / queries:.4%} (formula, unbounded: {formula.ratio:.4%}); "
          f"evicted {sim.evicted_blocks:,} blocks")
    print(f"    replay {replay:.1f} s -> {sent / replay:,.0f} prompts/s; drawing tokens "
          f"{draw:.1f} s ({sent / draw:,.0f} prompts/s); together {sent / (draw + replay):,.0f}"
          f" prompts/s")


def tokenizer_alone(tokenizer_json: Path, texts: list[str], threads: int, batch: int
                    ) -> tuple[float, float]:
    """Wall and CPU seconds the tokenizers library takes to encode ``texts`` on ``threads``
    cores."""
    from tokenizers import Tokenizer  # noqa: PLC0415 - the host tokenizer's own library

    backend = Tokenizer.from_file(str(tokenizer_json))
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"
    encode = backend.encode_batch_fast
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        encode(texts[start:start + batch], add_special_tokens=True)
    return time.perf_counter() - t0, time.process_time() - c0


def best(kept: dict[int, tuple[float, float]], n: int, took: tuple[float, float]) -> None:
    """Keep the least wall and the least CPU time of each measurement."""
    old = kept.get(n, took)
    kept[n] = (min(old[0], took[0]), min(old[1], took[1]))


def worker_counts(text: str) -> list[int]:
    """``--workers``: counts, or ``all`` for the default (every core, one thread more)."""
    return list(dict.fromkeys(replay.default_workers() if w == "all" else int(w)
                              for w in text.split(",")))


def custom(args: argparse.Namespace) -> None:
    # The simulated fleet's tokenizer: a benchmark may use the simulation, the product not.
    from prefixbench_sim import tinyconfig, tinytokenizer  # noqa: PLC0415

    spec = tinyconfig.TinyLlamaSpec()
    words = [tinytokenizer.word(i) for i in range(4, spec.vocab_size)]
    counts = worker_counts(args.workers)
    rayon = int(os.environ["RAYON_NUM_THREADS"])
    with tempfile.TemporaryDirectory() as tmp:
        tok = Path(tmp) / "tok"
        tok.mkdir()
        (tok / "tokenizer.json").write_text(json.dumps(tinytokenizer.tokenizer_json(spec)))
        (tok / "tokenizer_config.json").write_text(
            json.dumps(tinytokenizer.tokenizer_config(spec)))
        system = " ".join(words[i % len(words)] for i in range(args.system_len))
        path = Path(tmp) / "prompts.jsonl"
        with path.open("w") as handle:
            for i in range(args.custom_prompts):
                question = " ".join(words[(i * 7919 + j * 31) % len(words)]
                                    for j in range(args.question_len))
                handle.write(json.dumps({"prompt": f"{system} {question}"}) + "\n")
        w = Workload.from_dict({"name": "bench", "dataset_name": "custom",
                                "dataset_path": str(path), "seed": args.seed,
                                "max_concurrency": 1})
        with path.open() as handle:
            texts = [json.loads(line)["prompt"] for line in handle]
        alone: dict[int, tuple[float, float]] = {}
        whole: dict[int, tuple[float, float]] = {}
        preds: dict[int, whatif.Prediction] = {}
        for _ in range(args.repeat):
            for n in counts:
                best(alone, n, tokenizer_alone(tok / "tokenizer.json", texts, min(n, rayon),
                                               args.tokenizer_batch))
                t0, c0 = time.perf_counter(), time.process_time()
                pred = whatif.predict(w, block_size=args.block_size,
                                      capacity_blocks=args.capacity_blocks or None,
                                      tokenizer_dir=tok, workers=n)
                best(whole, n, (time.perf_counter() - t0, time.process_time() - c0))
                if preds.setdefault(n, pred) != pred:
                    raise SystemExit(f"workers {n}: the prediction changed between runs")
    first = preds[counts[0]]
    same = all(p == first for p in preds.values())
    cap = args.capacity_blocks or "unbounded"
    print(f"[2] custom: {args.custom_prompts:,} prompts of {args.system_len}+"
          f"{args.question_len} words (word-level tokenizer), block {args.block_size}, "
          f"capacity {cap}; best of {args.repeat}")
    print(f"    hit ratio {first.ratio:.4%}, {first.hit_tokens:,} of {first.query_tokens:,} "
          f"tokens; {'identical' if same else 'DIFFERENT'} for workers "
          f"{', '.join(map(str, counts))}")
    print("    seconds, wall (CPU): the host's tokenizer alone, the whole prediction")
    print(f"    {'workers':>7}  {'cores':>5}  {'tokenizer alone':>16}  {'whole prediction':>16}"
          f"  {'ratio':>5}  {'(CPU)':>5}  {'prompts/s':>9}")
    for n in counts:
        (a, ac), (b, bc) = alone[n], whole[n]
        print(f"    {n:>7}  {min(n, rayon):>5}  {a:>7.2f} ({ac:>6.2f})  {b:>7.2f} ({bc:>6.2f})  "
              f"{b / a:>5.2f}  {bc / ac:>5.2f}  {args.custom_prompts / b:>9,.0f}")
    if not same:
        raise SystemExit("predictions differ between worker counts")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_stream_arguments(ap)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--custom-prompts", type=int, default=20_000)
    ap.add_argument("--system-len", type=int, default=1536)
    ap.add_argument("--question-len", type=int, default=256)
    ap.add_argument("--workers", default="1,all",
                    help="encoding threads to measure, comma-separated ('all': the default, "
                    "every core and one thread more); the tokenizer alone gets as many cores")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each measurement; the best is kept")
    ap.add_argument("--tokenizer-batch", type=int, default=64,
                    help="texts per encode_batch_fast call in the tokenizer-alone runs")
    args = ap.parse_args()
    if args.prompts:
        prefix_repetition(args)
    if args.custom_prompts:
        custom(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
