"""``prefixbench whatif``: the predicted prefix-cache hit ratio of a prompts file or a
workload, printed (one prediction, or hit ratio against KV capacity with
``--capacity-curve``). With ``--concurrency N`` above 1 the requests are replayed through
the model of vLLM's scheduler (:mod:`prefixbench.engines.schedsim`) with the server's
``--max-num-seqs`` / ``--max-num-batched-tokens`` (and ``--async-scheduling``: vLLM's
``AsyncScheduler``), a curve's capacities too; the ``replayed:`` line says which model
was used, and the ``timing range:`` line the lowest and highest ratio over arrival
timings (:mod:`prefixbench.predict.arrivals`; ``--request-rate`` and
``--burstiness`` pace the client).

The workload comes from the arguments (:func:`whatif_workload`); the prediction is
:mod:`prefixbench.predict.whatif`'s, the curve :mod:`prefixbench.predict.capacity_curve`'s.
Both are imported when the command runs (they load the tokenizer library).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from prefixbench.engines.schedconfig import SERIAL
from prefixbench.frontend.cli_shared import UsageError
from prefixbench.frontend.cli_ttft import add_calibration_argument, calibration_of, print_calibrated
from prefixbench.frontend.runview import EXIT_OK
from prefixbench.frontend.whatif_setup import (
    DEFAULTS,
    SEGMENT_RULE,
    UNCHECKED,
    Setup,
    add_server_arguments,
    resolve,
)

__all__ = ["add_parser", "method_sentence", "neuron_lines", "rejected_line", "run_whatif",
           "sentences", "whatif_workload"]


def _default(flag: str) -> str:
    return f"default: {DEFAULTS[flag]}"


def add_parser(sub: Any, epilog: str) -> None:
    """The ``whatif`` subcommand's arguments; every default is
    :data:`~prefixbench.frontend.whatif_setup.DEFAULTS`' (None here: :func:`resolve`
    applies it and says so)."""
    w = sub.add_parser(
        "whatif", help="predict the prefix-cache hit ratio of your prompts or a workload",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog,
        description="Replay requests through the model of vLLM's prefix cache, in the order "
        "vllm bench serve sends them, and print the predicted token hit ratio "
        "(prefix_cache_hits / prefix_cache_queries), with every assumption and where it "
        "comes from. Either a JSONL prompts file (prompt or chat-messages lines, counted "
        "with --tokenizer) or a prefix_repetition workload (--workload; no tokenizer "
        "needed). With --platform neuron, first the prefill chunks (and padded tokens) warm "
        "requests skip.")
    w.add_argument("prompts", nargs="?", type=Path, metavar="PROMPTS.jsonl",
                   help="your prompts, one JSON object a line")
    w.add_argument("--workload", metavar="NAME",
                   help="a workload by name instead (the tutorial's, or --workloads)")
    w.add_argument("--workloads", type=Path, metavar="FILE",
                   help="with --workload: a YAML file with a 'workloads:' list (default: "
                   "the tutorial's)")
    w.add_argument("--tokenizer", type=Path, metavar="DIR",
                   help="the server's tokenizer: its directory or its tokenizer.json (with "
                   "tokenizer_config.json for chat lines, config.json for the model)")
    add_server_arguments(w)
    w.add_argument("--capacity-blocks", type=int, metavar="N",
                   help="usable KV capacity in blocks: the server's num_gpu_blocks - 1 "
                   f"(block 0 is vLLM's null block); {_default('--capacity-blocks')}")
    w.add_argument("--seed", type=int, help="vllm bench serve --seed (default 0, or "
                   "the workload's)")
    w.add_argument("--no-shuffle", action="store_true",
                   help="as --disable-shuffle: send the prompts in file order")
    w.add_argument("--num-prompts", type=int, metavar="N",
                   help="prompts sent, >= 1 (default: every line, or the workload's)")
    w.add_argument("--custom-output-len", type=int, metavar="N",
                   help="a prompts file: output tokens per request, -1: each line's "
                   "output_tokens (it matters with --capacity-blocks or --concurrency); "
                   f"{_default('--custom-output-len')}")
    w.add_argument("--num-warmups", type=int, default=0, metavar="N",
                   help="warmup requests (copies of the first prompt) sent first")
    w.add_argument("--capacity-curve", metavar="N,N,...",
                   help="predict at each of these KV capacities (usable blocks) and "
                   "unbounded: hit ratio against capacity, the working set, and the "
                   "smallest capacity that holds it")
    w.add_argument("--workers", type=int, metavar="N",
                   help="threads encoding a prompts file (default: one more than the "
                   "usable cores; the prediction is the same for any number)")
    w.add_argument("--concurrency", type=int, metavar="N",
                   help="requests the client keeps in flight (vllm bench serve "
                   "--max-concurrency); above 1 the requests go through a model of "
                   f"vLLM's scheduler; {_default('--concurrency')}")
    w.add_argument("--max-num-seqs", type=int, metavar="N",
                   help="the server's --max-num-seqs, with concurrency above 1; "
                   f"{_default('--max-num-seqs')}")
    w.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="the server's --max-num-batched-tokens, with concurrency above 1; "
                   f"{_default('--max-num-batched-tokens')}")
    w.add_argument("--request-rate", type=float, metavar="R",
                   help="with concurrency above 1: requests per second the client "
                   "releases (vllm bench serve --request-rate; default: the workload's, "
                   "inf for a prompts file); the timing range then spans this paced "
                   "traffic")
    add_calibration_argument(w)
    w.add_argument("--burstiness", type=float, metavar="B",
                   help="with --request-rate: the gamma shape of the arrivals (vllm bench "
                   "serve --burstiness; default: the workload's, 1: Poisson)")


def whatif_workload(args: argparse.Namespace) -> Any:
    """The workload ``whatif`` predicts: ``--workload NAME`` with the overrides given, or
    a custom workload of the prompts file."""
    from prefixbench.engines import workloads as wl  # noqa: PLC0415 - whatif only

    def overrides(data: dict[str, Any]) -> dict[str, Any]:
        if args.seed is not None:
            data["seed"] = args.seed
        if args.no_shuffle:
            data["disable_shuffle"] = True
        if args.num_prompts is not None:
            if args.num_prompts < 1:
                raise UsageError(f"--num-prompts must be >= 1, got {args.num_prompts} "
                                 f"(leave it out to send every line, or the workload's "
                                 f"number)")
            data["num_prompts"] = args.num_prompts
        if args.num_warmups:
            data["num_warmups"] = args.num_warmups
        if args.request_rate is not None:
            data["request_rate"] = args.request_rate
        if args.burstiness is not None:
            data["burstiness"] = args.burstiness
        return data

    try:
        if args.workload is not None:
            if args.prompts is not None:
                raise UsageError("give PROMPTS.jsonl or --workload, not both")
            known = (wl.load_workloads(args.workloads) if args.workloads is not None
                     else wl.tutorial_workloads())
            found = {w.name: w for w in known}.get(args.workload)
            if found is None:
                raise UsageError(f"no workload {args.workload!r}; known: "
                                 f"{', '.join(w.name for w in known)}")
            data = overrides(found.to_dict())
            if args.custom_output_len is not None:
                if not found.is_custom:
                    raise UsageError(f"--custom-output-len applies to a prompts file or a "
                                     f"custom workload; {found.name} is "
                                     f"{found.dataset_name} (its output length is "
                                     f"prefix_repetition_output_len)")
                data["custom_output_len"] = args.custom_output_len
            return wl.Workload.from_dict(data)
        if args.prompts is None:
            raise UsageError("give a PROMPTS.jsonl file or --workload NAME")
        if args.tokenizer is None:
            raise UsageError("a prompts file needs --tokenizer DIR (token counts are the "
                             "server's tokenizer's)")
        if not args.prompts.is_file():
            raise UsageError(f"{args.prompts}: no such file")
        return wl.Workload.from_dict(overrides({
            "name": "whatif", "dataset_name": "custom", "max_concurrency": 1,
            "dataset_path": str(args.prompts.resolve()),
            "custom_output_len": (256 if args.custom_output_len is None
                                  else args.custom_output_len)}))
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def run_whatif(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Predict and print; the exit code (a
    :class:`~prefixbench.frontend.cli_shared.UsageError` on a bad argument)."""
    from prefixbench.engines.progress import ProgressBar  # noqa: PLC0415
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library

    workload = whatif_workload(args)
    if args.tokenizer is not None and not args.tokenizer.exists():
        raise UsageError(f"--tokenizer {args.tokenizer}: no such file or directory")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    setup = resolve(args, workload)
    fits = calibration_of(args, setup)
    if args.capacity_curve is not None:
        return _curve(args, workload, setup, out=out, err=err)
    with ProgressBar(err) as bar:
        pred = whatif.predict(workload, block_size=setup.block_size,
                              capacity_blocks=args.capacity_blocks, prompts_file=None,
                              tokenizer_dir=args.tokenizer, workers=args.workers,
                              progress=bar, cache_model=setup.cache_model,
                              serving=setup.serving)
    if pred.ratio is None:
        raise UsageError(pred.note or "no prediction")
    if pred.rejected and not pred.requests:
        raise UsageError(f"refused: {rejected_line(pred)}")
    cap = "unbounded" if args.capacity_blocks is None else f"{args.capacity_blocks} blocks"
    neuron_lines(pred, out)  # on Neuron the answer comes first: the prefill saved
    print(f"workload:        {workload.name} ({workload.dataset_name}), seed "
          f"{workload.seed if workload.seed is not None else 0}, "
          f"{'file order' if workload.disable_shuffle else 'shuffled'}", file=out)
    print("assumed:         [where each value comes from]", file=out)
    for assumed in setup.assumed:
        print(assumed.line(), file=out)
    print(f"cache:           block {setup.block_size}, capacity {cap}, "
          f"{setup.cache_model.describe()}", file=out)
    through = setup.serving.describe()  # the scheduler model, when the replay used it
    print(f"replayed:        {through if through in pred.method else SERIAL.describe()}",
          file=out)
    print(f"predicted ratio: {pred.ratio:.4%}", file=out)
    if pred.band is not None and pred.band_note is not None:  # above concurrency 1
        timings = pred.band_note.partition(" over ")[2]
        print(f"timing range:    {pred.band[0]:.4%} to {pred.band[1]:.4%} over {timings}",
              file=out)
    elif pred.band_note is not None:
        print(f"timing range:    {pred.band_note}", file=out)
    print(f"hit tokens:      {pred.hit_tokens:,} of {pred.query_tokens:,} queried, "
          f"{pred.requests:,} requests", file=out)
    print(f"evicted blocks:  {pred.evicted_blocks:,}", file=out)
    if pred.formula_ratio is not None:
        print(f"formula:         {pred.formula_ratio:.4%} (block-aligned, unbounded cache; "
              f"tutorial's step 9: {workload.tutorial_ratio():.4%})", file=out)
    print(f"method:          {method_sentence(pred.method, workload, setup)}", file=out)
    for i, note in enumerate(sentences(pred.note)):
        print(f"{'note:' if i == 0 else '':<17}{note}", file=out)
    print_calibrated(fits, args, workload, setup, out)
    return EXIT_OK


def neuron_lines(pred: Any, out: TextIO) -> None:
    """On Neuron, the prediction's first lines: the prefill the hits save (chunks and
    padded tokens, :mod:`prefixbench.predict.segments`), the requests the server would
    refuse, the rule and that it is unchecked on Trainium. Nothing elsewhere."""
    if pred.prefill is None:
        if pred.rejected:
            print(f"rejected:        {rejected_line(pred)}", file=out)
        return
    for label, text in pred.prefill.lines():
        print(f"{label + ':':<17}{text}", file=out)
    if pred.rejected:
        print(f"rejected:        {rejected_line(pred)}", file=out)
    print(f"saving rule:     {SEGMENT_RULE}", file=out)
    print(f"{'':<17}{UNCHECKED}", file=out)


def rejected_line(pred: Any) -> str:
    """The one line saying how many requests the server refuses."""
    total = pred.requests + pred.rejected
    return (f"{pred.rejected:,} of {total:,} requests have a prompt longer than the "
            f"server's max_model_len (--max-model-len): it refuses them, and they are left "
            f"out of every figure here")


def method_sentence(method: str, workload: Any, setup: Setup) -> str:
    """How the prediction was computed, as one sentence."""
    if method.startswith("block-aligned formula"):
        return ("Too many prompt tokens to replay, so the ratio is the block-aligned "
                "formula's, which is exact for an unbounded cache.")
    seed = workload.seed if workload.seed is not None else 0
    made = ("read from the file and encoded with the tokenizer" if workload.is_custom
            else f"regenerated from seed {seed} as vLLM draws them")
    through = setup.serving.describe()  # when the replay went through the scheduler model
    sent = f"through the {through}" if through in method else "one at a time"
    return (f"The requests were {made}, then replayed in vLLM's send order, {sent}, "
            f"against a model of vLLM's prefix cache: {setup.cache_model.describe()}.")


def sentences(note: str | None) -> list[str]:
    """A prediction's note (parts joined by ``"; "``) as sentences, one a part."""
    out = []
    for part in (note or "").split("; "):
        text = part.strip()
        if text:
            out.append(text[0].upper() + text[1:] + ("" if text.endswith(".") else "."))
    return out


def _curve(args: argparse.Namespace, workload: Any, setup: Setup, *, out: TextIO,
           err: TextIO) -> int:
    from prefixbench.engines.progress import ProgressBar  # noqa: PLC0415
    from prefixbench.predict import capacity_curve  # noqa: PLC0415 - loads the tokenizer library

    if args.capacity_blocks is not None:
        raise UsageError("give --capacity-blocks or --capacity-curve, not both")
    model, served = setup.cache_model, setup.serving
    try:
        caps = capacity_curve.parse_capacities(args.capacity_curve)
        with ProgressBar(err) as bar:
            curve = capacity_curve.predict_curve(
                workload, block_size=setup.block_size, capacities=caps,
                tokenizer_dir=args.tokenizer, workers=args.workers, progress=bar,
                cache_model=model, serving=served)
    except capacity_curve.CurveError as exc:
        raise UsageError(str(exc)) from None
    print(f"workload:        {workload.name} ({workload.dataset_name}), block "
          f"{setup.block_size}, {model.describe()}", file=out)
    print("assumed:         [where each value comes from]", file=out)
    for assumed in setup.assumed:
        if assumed.name != "KV capacity":  # the curve's
            print(assumed.line(), file=out)
    if served.scheduled or served.async_scheduling:
        print(f"replayed:        {served.describe()}", file=out)
    print(f"{'capacity':>12}  {'hit ratio':>9}  {'evicted blocks':>14}", file=out)
    for point in (*curve.points, curve.unbounded):
        cap = "unbounded" if point.capacity_blocks is None else f"{point.capacity_blocks:,}"
        ratio = "refused" if point.ratio is None else f"{point.ratio:.2%}"
        print(f"{cap:>12}  {ratio:>9}  {point.evicted_blocks:>14,}", file=out)
    fits = curve.fits_from
    reach = (f"the unbounded hit ratio from {fits:,} blocks (of those tried)" if fits is not None
             else "no capacity tried reaches the unbounded hit ratio")
    if served.scheduled:  # the scheduler model's cached blocks are not the working set
        print(f"working set:     not counted at concurrency {served.concurrency} (see the "
              f"curve without --concurrency); {reach}", file=out)
    else:
        print(f"working set:     {curve.working_set_blocks:,} blocks; {reach}", file=out)
    refused = [p for p in curve.points if p.ratio is None]
    if refused:
        print(f"refused:         {refused[0].note}", file=out)
    if curve.unbounded.note:
        print(f"note:            {curve.unbounded.note}", file=out)
    return EXIT_OK
