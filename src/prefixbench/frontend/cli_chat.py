"""``prefixbench chat-traffic``: write a multi-turn chat traffic file (a custom workload's
prompts, :mod:`prefixbench.engines.chat_traffic`) and show the hit ratio to expect from it.

With ``--tokenizer`` (the server's), the file is replayed by the what-if
(:func:`prefixbench.predict.whatif.predict`, the same prediction the report puts next to
the measured ratio) and shown next to the structural estimate
(:mod:`prefixbench.predict.chat_estimate`), counted in the tokenizer's tokens; words come
from the tokenizer's vocabulary. Without it, the estimate counts words as tokens and the
words come from a built-in list.

The server it assumes is resolved as ``prefixbench whatif`` resolves it
(:func:`prefixbench.frontend.whatif_setup.resolve`: ``--platform``, neuron by default,
gives the block size, the KV-cache manager and the scheduler), and the command prints
the same ``assumed:`` block, every value with where it comes from.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from prefixbench.engines import chat_traffic as ct
from prefixbench.frontend.cli_shared import UsageError
from prefixbench.frontend.cli_whatif import neuron_lines, rejected_line
from prefixbench.frontend.runview import EXIT_OK
from prefixbench.frontend.whatif_setup import (
    DEFAULTS,
    Assumed,
    Setup,
    add_server_arguments,
    resolve,
)

if TYPE_CHECKING:
    from prefixbench.engines.tokenizer import Tokenizer
    from prefixbench.engines.workloads import Workload
    from prefixbench.predict.chat_estimate import Estimate
    from prefixbench.predict.replay import Prediction

__all__ = ["add_parser", "run_chat_traffic", "tokenizer_words"]

#: A tokenizer's word usable in a message: letters, then letters or digits.
_PLAIN: Final = re.compile(r"[A-Za-z][A-Za-z0-9]*")
#: Fewer plain words than this in a tokenizer's vocabulary: the built-in list instead.
MIN_WORDS: Final = 64
#: A replay this far from the estimate (percentage points) gets a line saying why.
EXPLAIN_PP: Final = 0.5


def add_parser(sub: Any, epilog: str) -> None:
    p = sub.add_parser(
        "chat-traffic", help="write multi-turn chat traffic as a custom workload's prompts "
        "file, with its expected hit ratio",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog,
        description="Generate users' conversations (a shared system prompt, turns whose "
        "history grows, synthetic assistant replies) as JSONL chat lines in send order, "
        "think time as requests of other users in between. Distributions: N, fixed:N, "
        "uniform:A:B, geometric:MEAN, poisson:MEAN. With --tokenizer, print the what-if "
        "replay's predicted hit ratio beside the structural estimate.")
    p.add_argument("out", type=Path, metavar="OUT.jsonl",
                   help="the file to write (its directory must exist)")
    p.add_argument("--force", action="store_true",
                   help="overwrite OUT.jsonl when it exists (without it, an existing file "
                   "is an error: it may be your own prompts)")
    p.add_argument("--users", type=int, default=8, metavar="N", help="conversations (default 8)")
    p.add_argument("--turns", default="uniform:2:6", metavar="DIST",
                   help="turns per user (default uniform:2:6)")
    p.add_argument("--system-words", type=int, default=400, metavar="N",
                   help="words of the system prompt every user shares, 0: none (default 400)")
    p.add_argument("--user-words", default="uniform:20:80", metavar="DIST",
                   help="words of a user message (default uniform:20:80)")
    p.add_argument("--reply-words", default="uniform:20:120", metavar="DIST",
                   help="words of a synthetic assistant reply, also the request's "
                   "output_tokens (default uniform:20:120)")
    p.add_argument("--think", default="uniform:0:4", metavar="DIST",
                   help="requests of other users between a user's turns (default "
                   "uniform:0:4)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="the generator's seed (default 0)")
    p.add_argument("--tokenizer", type=Path, metavar="DIR",
                   help="the server's tokenizer directory (tokenizer.json and its chat "
                   "template): words from its vocabulary, and the what-if replay")
    add_server_arguments(p)
    p.add_argument("--capacity-blocks", type=int, metavar="N",
                   help="usable KV capacity for the replay (num_gpu_blocks - 1); default "
                   "unbounded")
    p.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="the server's --max-num-batched-tokens (on neuron the prefill "
                   f"segment); default: {DEFAULTS['--max-num-batched-tokens']}")


def tokenizer_words(tokenizer: Tokenizer) -> list[str]:
    """The tokenizer's plain words (a token decoding alone to letters and digits), in id
    order, without special tokens and without the words of its chat template (so a
    message never holds a role marker)."""
    banned = set(_PLAIN.findall(tokenizer.chat_template or ""))
    banned |= set(tokenizer.special_tokens().values())
    ids = [[i] for i in range(tokenizer.base_vocab_size)]
    decoded = tokenizer.backend.decode_batch(ids, skip_special_tokens=True)
    words = (str(w).strip() for w in decoded)
    return list(dict.fromkeys(w for w in words if _PLAIN.fullmatch(w) and w not in banned))


def _spec(args: argparse.Namespace) -> ct.ChatSpec:
    try:
        return ct.ChatSpec(
            users=args.users, system_words=args.system_words, seed=args.seed,
            turns=ct.parse_dist(args.turns, minimum=1, option="--turns"),
            user_words=ct.parse_dist(args.user_words, minimum=1, option="--user-words"),
            reply_words=ct.parse_dist(args.reply_words, minimum=1, option="--reply-words"),
            think=ct.parse_dist(args.think, minimum=0, option="--think"))
    except ct.ChatTrafficError as exc:
        raise UsageError(str(exc)) from None


def _tokenizer(args: argparse.Namespace) -> Tokenizer | None:
    from prefixbench.engines.tokenizer import TokenizerError, load  # noqa: PLC0415

    if args.tokenizer is None:
        if args.capacity_blocks is not None:
            raise UsageError("--capacity-blocks is for the replay, which needs --tokenizer DIR")
        return None
    if not args.tokenizer.exists():
        raise UsageError(f"--tokenizer {args.tokenizer}: no such file or directory")
    try:
        tokenizer = load(args.tokenizer)
    except TokenizerError as exc:
        raise UsageError(str(exc)) from None
    if not tokenizer.renders_chat:
        raise UsageError(f"--tokenizer {args.tokenizer}: no chat template, so chat lines "
                         f"cannot be rendered")
    return tokenizer


def _setup(args: argparse.Namespace, workload: Workload) -> Setup:
    """The server the estimate and the replay assume, resolved as ``whatif`` resolves it
    (the file sent one request at a time, as its workload says)."""
    setup = resolve(argparse.Namespace(
        platform=args.platform, block_size=args.block_size,
        capacity_blocks=args.capacity_blocks, kv_cache=args.kv_cache,
        sliding_window=args.sliding_window, tokenizer=args.tokenizer, prompts=None,
        concurrency=None, max_num_seqs=None,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len, async_scheduling=args.async_scheduling,
        num_batched_tokens_buckets=args.num_batched_tokens_buckets,
        kv_segment_size_buckets=args.kv_segment_size_buckets,
        custom_output_len=None), workload)
    if args.tokenizer is not None:
        return setup
    none = Assumed("tokenizer", "none", "words counted as tokens; --tokenizer DIR (the "
                   "server's) counts them and replays the file")
    return replace(setup, assumed=tuple(none if a.name == "tokenizer" else a
                                        for a in setup.assumed))


def _predict(args: argparse.Namespace, workload: Workload, setup: Setup, err: TextIO
             ) -> Prediction:
    from prefixbench.engines.progress import ProgressBar  # noqa: PLC0415
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library

    with ProgressBar(err) as bar:
        return whatif.predict(workload, block_size=setup.block_size,
                              capacity_blocks=args.capacity_blocks,
                              tokenizer_dir=args.tokenizer, progress=bar,
                              cache_model=setup.cache_model, serving=setup.serving)


def _check_out(path: Path, *, force: bool) -> None:
    """Nothing overwritten or created silently: an existing file needs ``--force``, a
    missing directory is an error (not made)."""
    parent = path.parent if str(path.parent) else Path()
    if not parent.is_dir():
        raise UsageError(f"{path}: the directory {parent} does not exist (create it first)")
    if path.is_dir():
        raise UsageError(f"{path}: is a directory (give a file name)")
    if path.exists() and not force:
        raise UsageError(f"{path} exists: --force overwrites it (is it your own prompts "
                         f"file?)")


def _workload(path: Path) -> dict[str, Any]:
    """The custom workload that replays the file as written: in file order, one request
    at a time, each line's output_tokens."""
    return {"name": "chat", "dataset_name": "custom", "dataset_path": str(path.resolve()),
            "custom_output_len": -1, "max_concurrency": 1, "disable_shuffle": True}


def run_chat_traffic(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Write the file and print what to expect; the exit code (a
    :class:`~prefixbench.frontend.cli_shared.UsageError` on a bad argument)."""
    from prefixbench.engines.workloads import Workload  # noqa: PLC0415
    from prefixbench.measure.atomic import write_bytes_atomic  # noqa: PLC0415
    from prefixbench.predict import chat_estimate as ce  # noqa: PLC0415

    spec = _spec(args)
    _check_out(args.out, force=args.force)
    if (args.block_size is not None and args.block_size < 1) or (
            args.capacity_blocks is not None and args.capacity_blocks < 1):
        raise UsageError("--block-size and --capacity-blocks must be >= 1")
    workload = Workload.from_dict(_workload(args.out))
    setup = _setup(args, workload)
    block = setup.block_size
    tokenizer = _tokenizer(args)
    words = tokenizer_words(tokenizer) if tokenizer is not None else []
    source = f"{len(words):,} words of the tokenizer {args.tokenizer}"
    if len(words) < MIN_WORDS:
        source = (f"the built-in list ({len(ct.BUILTIN_WORDS)} words)" if tokenizer is None
                  else f"the built-in list: the tokenizer has {len(words)} plain words")
        words = list(ct.BUILTIN_WORDS)
    traffic = ct.generate(spec, words)
    try:
        write_bytes_atomic(args.out, traffic.jsonl())
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write: {exc.strerror or exc}") from None

    def show(label: str, text: str) -> None:
        print(f"{label + ':':<17}{text}", file=out)

    show("wrote", f"{args.out}, {len(traffic.order):,} chat lines in send order (seed "
                  f"{spec.seed})")
    for label, text in traffic.summary().lines():
        show(label, text)
    show("vocabulary", source)
    show("assumed", "[where each value comes from]")
    for assumed in setup.assumed:
        print(assumed.line(), file=out)
    if tokenizer is None:
        est = ce.structural_estimate(traffic, block)
        show("structural", _estimate(est) + "; words counted as tokens, template not "
             "counted")
        _assumes(show)
        show("predicted ratio", "not computed: --tokenizer DIR (the server's) replays the "
             "file through the what-if")
    else:
        lengths, shared = ce.token_counts(traffic, tokenizer)
        est = ce.structural_estimate(traffic, block, prompt_tokens=lengths,
                                     shared_tokens=shared)
        pred = _predict(args, workload, setup, err)
        if pred.ratio is None:
            raise UsageError(f"{args.out} written, but no prediction: "
                             f"{pred.note or 'the replay gave none'}")
        if pred.rejected and not pred.requests:
            raise UsageError(f"{args.out} written, but refused: {rejected_line(pred)}")
        neuron_lines(pred, out)  # on Neuron: the prefill saved, before the hit ratio
        cap = "unbounded" if args.capacity_blocks is None else f"{args.capacity_blocks} blocks"
        show("cache", f"block {block}, capacity {cap}, {setup.cache_model.describe()}")
        show("predicted ratio", f"{pred.ratio:.2%} (what-if replay of the file: "
             f"{pred.hit_tokens:,} of {pred.query_tokens:,} tokens hit, "
             f"{pred.evicted_blocks:,} blocks evicted)")
        show("structural", _estimate(est))
        _assumes(show)
        diff = (pred.ratio - (est.ratio or 0.0)) * 100
        show("difference", f"{diff:+.2f} pp (replay - structural)")
        if abs(diff) > EXPLAIN_PP:
            show("why", _why(pred, diff))
    show("workload", "{name: chat, dataset_name: custom, dataset_path: "
         f"{args.out.resolve()}, custom_output_len: -1, max_concurrency: 1, "
         "disable_shuffle: true}")
    return EXIT_OK


def _assumes(show: Callable[[str, str], None]) -> None:
    show("  assumes", "an unbounded cache, whole-block hits, each turn's prompt a prefix of "
         "the next, one request at a time")


def _estimate(est: Estimate) -> str:
    def pct(part: int) -> str:
        return f"{part / est.query_tokens:.2%}" if est.query_tokens else "-"

    return (f"{pct(est.hit_tokens)} ({pct(est.system_hit_tokens)} the system prompt + "
            f"{pct(est.history_hit_tokens)} the history; {est.hit_tokens:,} of "
            f"{est.query_tokens:,} {est.unit})")


def _why(pred: Prediction, diff_pp: float) -> str:
    if pred.evicted_blocks:
        return (f"the replay evicts {pred.evicted_blocks:,} blocks at this capacity; the "
                f"estimate assumes an unbounded cache")
    if diff_pp < 0:
        return ("no eviction: the rendered turns are not prefix extensions of each other "
                "in tokens (the chat template or the tokenizer changes the history)")
    return ("no eviction: the prompts share more than the structure says (the same words "
            "at the start of several users' messages)")
