"""``prefixbench whatif``: the predicted prefix-cache hit ratio of a prompts file or a
workload, printed (one prediction, or hit ratio against KV capacity with
``--capacity-curve``). With ``--concurrency N`` above 1 the requests are replayed through
the model of vLLM's scheduler (:mod:`prefixbench.predict.schedsim`) with the server's
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
from typing import Any, TextIO

from prefixbench.frontend.cli_shared import UsageError
from prefixbench.frontend.runview import EXIT_OK
from prefixbench.predict.cachemodel import FULL_ATTENTION, CacheModel, from_model_dir
from prefixbench.predict.schedconfig import Serving

__all__ = ["cache_model", "run_whatif", "serving", "whatif_workload"]


def whatif_workload(args: argparse.Namespace) -> Any:
    """The workload ``whatif`` predicts: ``--workload NAME`` with the overrides given, or
    a custom workload of the prompts file."""
    from prefixbench.bench import workloads as wl  # noqa: PLC0415 - whatif only

    def overrides(data: dict[str, Any]) -> dict[str, Any]:
        if args.seed is not None:
            data["seed"] = args.seed
        if args.no_shuffle:
            data["disable_shuffle"] = True
        if args.num_prompts is not None:
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
            return wl.Workload.from_dict(overrides(found.to_dict()))
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
            "custom_output_len": args.custom_output_len}))
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def run_whatif(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Predict and print; the exit code (a
    :class:`~prefixbench.frontend.cli_shared.UsageError` on a bad argument)."""
    from prefixbench.predict import whatif  # noqa: PLC0415 - loads the tokenizer library
    from prefixbench.predict.progress import ProgressBar  # noqa: PLC0415

    workload = whatif_workload(args)
    if args.block_size < 1 or (args.capacity_blocks is not None and args.capacity_blocks < 1):
        raise UsageError("--block-size and --capacity-blocks must be >= 1")
    if args.tokenizer is not None and not args.tokenizer.exists():
        raise UsageError(f"--tokenizer {args.tokenizer}: no such file or directory")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    model = cache_model(args).chunked(args.max_num_batched_tokens)
    served = serving(args)
    if args.capacity_curve is not None:
        return _curve(args, workload, model, served, out=out, err=err)
    with ProgressBar(err) as bar:
        pred = whatif.predict(workload, block_size=args.block_size,
                              capacity_blocks=args.capacity_blocks, prompts_file=None,
                              tokenizer_dir=args.tokenizer, workers=args.workers,
                              progress=bar, cache_model=model, serving=served)
    if pred.ratio is None:
        raise UsageError(pred.note or "no prediction")
    cap = "unbounded" if args.capacity_blocks is None else f"{args.capacity_blocks} blocks"
    print(f"workload:        {workload.name} ({workload.dataset_name}), seed "
          f"{workload.seed if workload.seed is not None else 0}, "
          f"{'file order' if workload.disable_shuffle else 'shuffled'}", file=out)
    print(f"cache:           block {args.block_size}, capacity {cap}, "
          f"{model.describe()}", file=out)
    print(f"replayed:        {served.describe()}", file=out)
    print(f"predicted ratio: {pred.ratio:.4%}", file=out)
    if pred.band_note is not None:  # above concurrency 1
        print(f"timing range:    {pred.band_note}", file=out)
    print(f"hit tokens:      {pred.hit_tokens:,} of {pred.query_tokens:,} queried, "
          f"{pred.requests:,} requests", file=out)
    print(f"evicted blocks:  {pred.evicted_blocks:,}", file=out)
    if pred.formula_ratio is not None:
        print(f"formula:         {pred.formula_ratio:.4%} (block-aligned, unbounded cache; "
              f"tutorial's step 9: {workload.tutorial_ratio():.4%})", file=out)
    print(f"method:          {pred.method}", file=out)
    if pred.note:
        print(f"note:            {pred.note}", file=out)
    return EXIT_OK


def serving(args: argparse.Namespace) -> Serving:
    """How ``--concurrency``, ``--max-num-seqs`` and ``--max-num-batched-tokens`` send
    the requests (the workload's ready check and warmups are added by the prediction)."""
    for flag, value in (("--concurrency", args.concurrency),
                        ("--max-num-seqs", args.max_num_seqs),
                        ("--max-num-batched-tokens", args.max_num_batched_tokens)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    return Serving(concurrency=args.concurrency, max_num_seqs=args.max_num_seqs,
                   max_num_batched_tokens=args.max_num_batched_tokens,
                   async_scheduling=args.async_scheduling)


def cache_model(args: argparse.Namespace) -> CacheModel:
    """The cache model ``--kv-cache`` / ``--sliding-window`` ask for; without
    ``--kv-cache``, the one the model's ``config.json`` beside ``--tokenizer`` implies
    (gpt-oss: hybrid, with its own window), else full attention."""
    if args.kv_cache is None:
        return from_model_dir(args.tokenizer) or FULL_ATTENTION
    if args.kv_cache == "full":
        return FULL_ATTENTION
    if args.sliding_window < 2:
        raise UsageError(f"--sliding-window must be >= 2 tokens, got {args.sliding_window}")
    return CacheModel("hybrid", sliding_window=args.sliding_window)


def _curve(args: argparse.Namespace, workload: Any, model: CacheModel, served: Serving, *,
           out: TextIO, err: TextIO) -> int:
    from prefixbench.predict import capacity_curve  # noqa: PLC0415 - loads the tokenizer library
    from prefixbench.predict.progress import ProgressBar  # noqa: PLC0415

    if args.capacity_blocks is not None:
        raise UsageError("give --capacity-blocks or --capacity-curve, not both")
    try:
        caps = capacity_curve.parse_capacities(args.capacity_curve)
        with ProgressBar(err) as bar:
            curve = capacity_curve.predict_curve(
                workload, block_size=args.block_size, capacities=caps,
                tokenizer_dir=args.tokenizer, workers=args.workers, progress=bar,
                cache_model=model, serving=served)
    except capacity_curve.CurveError as exc:
        raise UsageError(str(exc)) from None
    print(f"workload:        {workload.name} ({workload.dataset_name}), block "
          f"{args.block_size}, {model.describe()}", file=out)
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
