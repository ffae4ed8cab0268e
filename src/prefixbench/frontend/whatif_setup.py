"""What ``prefixbench whatif`` assumes about the server and the client, and where each
assumption comes from: a flag, the model's files, the workload, or a default (the
platform's, the bench's or the tutorial server's, named).

:func:`resolve` turns the parsed arguments and the workload into a :class:`Setup`: the
values the replay uses and one :class:`Assumed` line per assumption, in the order the
command prints them. Every default the command applies is in :data:`DEFAULTS`, the one
text that ``--help`` and ``docs/own-traffic.md`` ("What the what-if assumes") state, and a
test holds the three together.

The platform decides the defaults that differ between vLLM's CPU platform (the bundle's
simulated servers) and vllm-neuron 0.21 on Trn (``--platform neuron``):

* block size: 128 on cpu (``vllm/platforms/cpu.py``, ``check_and_update_config``), 32 on
  Neuron (aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/
  reference-configuration.md, "KV cache options"; the same at v2.32.0);
* KV-cache manager: on cpu, what the model's ``config.json`` beside the tokenizer implies
  (:func:`prefixbench.engines.cachemodel.from_model_dir`: gpt-oss is hybrid), else full
  attention; on Neuron full attention, as the plugin registers a ``FullAttentionSpec``
  for every layer (aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/design/vllm/
  vllm-integration-kv-cache.md; :mod:`prefixbench.engines.cachemodel`);
* async scheduling: off on cpu (vLLM's CPU platform turns it off), on on Neuron ("Async
  scheduling is on by default", aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/design/
  vllm/async-scheduling-and-async-execution.md);
* on Neuron the prefill segment is ``min(--max-num-batched-tokens, --max-model-len)``
  (the tutorial: "the 1024-token prefill segment (--max-num-batched-tokens)"): below
  ``--max-model-len`` the plugin turns segmented prefill on with it, so it must be a
  supported size, and at or above it the plugin refuses prefix caching
  (:mod:`prefixbench.config.rules_plugin`); the block size must divide it
  (:data:`prefixbench.config.rules.SEGMENT_SOURCE`); its prefill buckets are the plugin's
  (:func:`prefixbench.engines.schedneuron.resolve_prefill_buckets`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel, from_model_dir
from prefixbench.engines.hybridsim import DEFAULT_SLIDING_WINDOW
from prefixbench.engines.schedconfig import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    Serving,
)
from prefixbench.engines.tokenizer import TOKENIZER_JSON, model_directory
from prefixbench.frontend.cli_shared import UsageError
from prefixbench.predict.segments import DESIGN_RULE, TUTORIAL_DISAGREES, UNCHECKED

if TYPE_CHECKING:
    from prefixbench.engines.workloads import Workload

__all__ = ["DEFAULTS", "PLATFORMS", "SEGMENT_RULE", "UNCHECKED", "Assumed", "Setup",
           "add_server_arguments", "resolve"]

#: The platforms, the default first: Neuron, the hardware this bundle's users run (what
#: ``prefixbench_platform`` defaults to); cpu is the simulated fleet's vLLM.
PLATFORMS: Final = ("neuron", "cpu")
#: vLLM's KV block size on each platform when none is given (see the module's docstring).
PLATFORM_BLOCK_SIZE: Final = {"cpu": 128, "neuron": 32}
#: The tutorial server's ``--max-model-len`` (the catalogue's
#: ``vllm_service_max_model_len``): on Neuron, the plugin's KV-concurrency cap is computed
#: at it (:mod:`prefixbench.engines.schedneuron`).
TUTORIAL_MAX_MODEL_LEN: Final = 8192
#: vllm bench serve's ``--custom-output-len`` default (vLLM 0.32 benchmarks/datasets).
BENCH_OUTPUT_LEN: Final = 256
_NEURON_DOCS: Final = "aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs"
_SOURCES: Final = {
    "cpu block": "vLLM's cpu platform: vllm/platforms/cpu.py, check_and_update_config",
    "neuron block": f"vllm-neuron 0.21 and 0.24: {_NEURON_DOCS}/guides/reference-configuration.md "
                    "(also at v2.32.0)",
    "neuron kv": f"vllm-neuron registers a FullAttentionSpec for every layer: {_NEURON_DOCS}"
                 f"/design/vllm/vllm-integration-kv-cache.md",
    "cpu async": "vLLM's cpu platform turns it off: vllm/platforms/cpu.py",
    "neuron async": f"vllm-neuron's default: {_NEURON_DOCS}/design/vllm/"
                    f"async-scheduling-and-async-execution.md",
}

#: The rule that makes a hit a saving on Neuron, and where it is stated
#: (:mod:`prefixbench.predict.segments`).
SEGMENT_RULE: Final = DESIGN_RULE

#: Every default the command applies, by flag: what --help says and the docs table shows.
DEFAULTS: Final = {
    "--platform": "neuron (a Trn2/Trn3 server, as prefixbench_platform; cpu: vLLM's CPU "
                  "platform, the bundle's simulated servers)",
    "--block-size": "the platform's: 128 on cpu, 32 on neuron (vllm-neuron 0.21 and 0.24)",
    "--capacity-blocks": "unbounded",
    "--kv-cache": "on cpu, what the model's config.json beside --tokenizer implies "
                  "(gpt-oss: hybrid), else full; on neuron, full",
    "--sliding-window": f"the model's config.json, else {DEFAULT_SLIDING_WINDOW} (gpt-oss's)",
    "--concurrency": "the workload's max_concurrency (a prompts file: 1, one request at "
                     "a time)",
    "--max-num-seqs": f"{DEFAULT_MAX_NUM_SEQS}, the tutorial server's",
    "--max-num-batched-tokens": f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}, the tutorial server's "
                                f"(on neuron, also the prefill segment)",
    "--async-scheduling": "the platform's: off on cpu, on on neuron",
    "--max-model-len": "8192, the tutorial server's (neuron only)",
    "--num-batched-tokens-buckets": "none set: the plugin resolves them, "
                                    "[max_num_batched_tokens] below max_model_len "
                                    "(neuron only)",
    "--kv-segment-size-buckets": "none set: automatic segmented prefill, one segment of "
                                 "max_num_batched_tokens (neuron only)",
    "--custom-output-len": f"{BENCH_OUTPUT_LEN} for every request, vllm bench serve's "
                           f"(a line's output_tokens only with -1)",
}


@dataclass(frozen=True)
class Assumed:
    """One assumption of the prediction: its name, value and where the value comes from."""

    name: str
    value: str
    source: str

    def line(self) -> str:
        return f"  {self.name + ':':<24}{self.value} [{self.source}]"


@dataclass(frozen=True)
class Setup:
    """The values a what-if replays with, and every assumption behind them."""

    platform: str
    block_size: int
    cache_model: CacheModel
    serving: Serving
    #: Neuron only: the prefill segment in tokens (``--max-num-batched-tokens``).
    segment: int | None
    assumed: tuple[Assumed, ...]


def add_server_arguments(group: argparse._ActionsContainer) -> None:
    """The flags describing the server, the same for ``whatif`` and ``chat-traffic`` (both
    resolve them with :func:`resolve`): platform, block size, KV-cache manager, sliding
    window, ``--max-model-len``, async scheduling. Each help line ends with its default."""
    def default(flag: str) -> str:
        return f"default: {DEFAULTS[flag]}"

    group.add_argument("--platform", choices=PLATFORMS,
                       help=f"the server's platform; {default('--platform')}")
    group.add_argument("--block-size", type=int, metavar="N",
                       help=f"KV block size of the server; {default('--block-size')}")
    group.add_argument("--kv-cache", choices=("full", "hybrid"),
                       help="the server's KV-cache manager: full (full attention in every "
                       "layer) or hybrid (vLLM's hybrid manager: sliding-window and "
                       "full-attention layers sharing one block pool, as gpt-oss on cpu); "
                       f"{default('--kv-cache')}")
    group.add_argument("--sliding-window", type=int, metavar="N",
                       help="with --kv-cache hybrid: the sliding window in tokens; "
                       f"{default('--sliding-window')}")
    group.add_argument("--max-model-len", type=int, metavar="N",
                       help="with --platform neuron: the server's --max-model-len, at "
                       "which the plugin's scheduler computes how many requests the KV "
                       f"cache holds; {default('--max-model-len')}")
    group.add_argument("--num-batched-tokens-buckets", type=_sizes, metavar="N,N",
                       help="with --platform neuron: the server's neuron_config "
                       "num_batched_tokens_buckets, the sizes prefill chunks are padded "
                       f"to, e.g. 512,1024; {default('--num-batched-tokens-buckets')}")
    group.add_argument("--kv-segment-size-buckets", type=_sizes, metavar="N",
                       help="with --platform neuron: the server's neuron_config "
                       "kv_segment_size_buckets (one size, equal to "
                       f"--num-batched-tokens-buckets); {default('--kv-segment-size-buckets')}")
    group.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction,
                       help="the server runs the async scheduler (vLLM's AsyncScheduler, "
                       f"or the plugin's NeuronAsyncScheduler); "
                       f"{default('--async-scheduling')}")


def _sizes(text: str) -> list[int]:
    """A comma-separated list of positive sizes (argparse's type)."""
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of "
                                         f"integers, e.g. 512,1024") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be >= 1")
    return sizes


#: The bucket flags, by the neuron_config key each sets.
BUCKET_FLAGS: Final = {"num_batched_tokens_buckets": "--num-batched-tokens-buckets",
                       "kv_segment_size_buckets": "--kv-segment-size-buckets"}


def _given(flag: str) -> str:
    return f"given: {flag}"


def _block(args: argparse.Namespace, platform: str) -> Assumed:
    if args.block_size is not None:
        if args.block_size < 1:
            raise UsageError(f"--block-size must be >= 1, got {args.block_size}")
        return Assumed("block size", f"{args.block_size} tokens", _given("--block-size"))
    return Assumed("block size", f"{PLATFORM_BLOCK_SIZE[platform]} tokens",
                   f"{platform} platform's default; {_SOURCES[platform + ' block']}")


def _kv(args: argparse.Namespace, platform: str) -> tuple[CacheModel, Assumed]:
    name = "KV-cache manager"
    if args.kv_cache == "full":
        return FULL_ATTENTION, Assumed(name, FULL_ATTENTION.describe(), _given("--kv-cache"))
    model_dir = model_directory(args.tokenizer)
    read = from_model_dir(args.tokenizer) if platform == "cpu" or args.kv_cache else None
    if args.kv_cache == "hybrid":
        window, said = args.sliding_window, _given("--kv-cache hybrid --sliding-window")
        if window is None:
            window = read.sliding_window if read is not None else None
            said = (_given("--kv-cache hybrid") + "; window " + (
                f"from the model's files: {model_dir}/config.json" if window is not None
                else f"default {DEFAULT_SLIDING_WINDOW}, gpt-oss's"))
        if window is not None and window < 2:
            raise UsageError(f"--sliding-window must be >= 2 tokens, got {window}")
        model = CacheModel("hybrid", sliding_window=window)
        return model, Assumed(name, model.describe(), said)
    if args.sliding_window is not None:
        raise UsageError("--sliding-window applies with --kv-cache hybrid only")
    if platform == "neuron":
        return FULL_ATTENTION, Assumed(name, FULL_ATTENTION.describe(),
                                       f"neuron platform's default; {_SOURCES['neuron kv']}")
    if read is not None:
        return read, Assumed(name, read.describe(),
                             f"read from the model's files: {model_dir}/config.json")
    why = ("no --tokenizer" if args.tokenizer is None
           else f"no usable config.json beside {args.tokenizer}")
    return FULL_ATTENTION, Assumed(name, FULL_ATTENTION.describe(),
                                   f"cpu platform's default for a model it cannot read "
                                   f"({why})")


def _int_flag(args: argparse.Namespace, attr: str, flag: str, default: int, said: str
              ) -> tuple[int, str]:
    value = getattr(args, attr)
    if value is None:
        return default, said
    if value < 1:
        raise UsageError(f"{flag} must be >= 1, got {value}")
    return value, _given(flag)


def _concurrency(args: argparse.Namespace, workload: Workload) -> tuple[int, str]:
    if args.concurrency is not None:
        return _int_flag(args, "concurrency", "--concurrency", 1, "")
    if workload.max_concurrency is None:
        if not workload.num_prompts:
            raise UsageError(f"workload {workload.name} runs at unbounded concurrency: "
                             f"give --concurrency N")
        return workload.num_prompts, (f"workload {workload.name} runs unbounded: every "
                                      f"prompt in flight at once")
    if args.prompts is not None:
        return workload.max_concurrency, "default for a prompts file; --concurrency N"
    return workload.max_concurrency, f"workload {workload.name}'s max_concurrency"


def _scheduler(args: argparse.Namespace, workload: Workload, platform: str
               ) -> tuple[Serving, list[Assumed]]:
    concurrency, c_said = _concurrency(args, workload)
    seqs, s_said = _int_flag(args, "max_num_seqs", "--max-num-seqs", DEFAULT_MAX_NUM_SEQS,
                             "default: the tutorial server's")
    batched, b_said = _int_flag(args, "max_num_batched_tokens", "--max-num-batched-tokens",
                                DEFAULT_MAX_NUM_BATCHED_TOKENS,
                                "default: the tutorial server's")
    if args.async_scheduling is not None:
        asynchronous, a_said = args.async_scheduling, _given(
            "--async-scheduling" if args.async_scheduling else "--no-async-scheduling")
    else:
        asynchronous = platform == "neuron"
        a_said = f"{platform} platform's default; {_SOURCES[platform + ' async']}"
    neuron = platform == "neuron"
    if args.max_model_len is not None and not neuron:
        raise UsageError("--max-model-len applies with --platform neuron only (vLLM's "
                         "scheduler has no KV-concurrency cap)")
    mml, m_said = _int_flag(args, "max_model_len", "--max-model-len", TUTORIAL_MAX_MODEL_LEN,
                            "default: the tutorial server's")
    serving = Serving(concurrency=concurrency, max_num_seqs=seqs,
                      max_num_batched_tokens=batched, async_scheduling=asynchronous,
                      scheduler="neuron" if neuron else "vllm",
                      max_model_len=mml if neuron else None)
    assumed = [Assumed("concurrency", str(concurrency), c_said)]
    if serving.scheduled or asynchronous:
        assumed += [Assumed("max_num_seqs", str(seqs), s_said),
                    Assumed("max_num_batched_tokens", str(batched), b_said)]
    if neuron:
        assumed.append(Assumed("max_model_len", f"{mml} (the KV-concurrency cap's)", m_said))
    kind = f"{'Neuron' if neuron else ''}{'Async' if asynchronous else ''}Scheduler"
    model = ("the Neuron plugin's, engines.schedneuron" if neuron
             else "vLLM's, engines.schedsim")
    assumed.append(Assumed("scheduler", f"{kind} ({model})", a_said))
    return serving, assumed


def _bucket_config(args: argparse.Namespace, platform: str) -> dict[str, list[int]]:
    """The neuron_config bucket lists the flags give (none given: empty)."""
    config = {key: given for key, flag in BUCKET_FLAGS.items()
              if (given := getattr(args, key, None)) is not None}
    if config and platform != "neuron":
        flag = BUCKET_FLAGS[next(iter(config))]
        raise UsageError(f"{flag} applies with --platform neuron only (a neuron_config "
                         f"setting of the Neuron plugin)")
    return config


def _bucket_refusals(serving: Serving, config: dict[str, list[int]], sizes: tuple[int, ...]
                     ) -> list[str]:
    """Why a Neuron server with these bucket flags would not start, one line each: the
    preflight rules (:func:`prefixbench.config.rules.segment_buckets`, and
    :func:`prefixbench.config.rules_plugin.plugin_refusals`) worded for the flags."""
    from prefixbench.config.rules import SEGMENT_SOURCE  # noqa: PLC0415 - neuron only
    from prefixbench.config.rules_plugin import plugin_refusals  # noqa: PLC0415
    from prefixbench.engines.schedneuron import prefill_buckets  # noqa: PLC0415
    from prefixbench.hosts import releases  # noqa: PLC0415 - neuron only

    mml, mnbt = serving.max_model_len, serving.max_num_batched_tokens
    out = list(plugin_refusals(mnbt, mml, config, sizes, flags=True))
    batched = config.get("num_batched_tokens_buckets")
    segments = config.get("kv_segment_size_buckets")
    if batched is not None:
        try:
            prefill_buckets(mnbt, mml, batched)
        except ValueError as exc:
            out.append(f"--num-batched-tokens-buckets: {exc} (--max-num-batched-tokens, "
                       f"--max-model-len)")
    if segments is not None:
        if len(segments) > 1:
            out.append(f"--kv-segment-size-buckets {segments} has {len(segments)} sizes: "
                       f"vllm-neuron supports a single segment size ({SEGMENT_SOURCE}): "
                       f"keep one, e.g. {segments[0]}")
        if batched is not None and batched != segments:
            out.append(f"--kv-segment-size-buckets {segments} must equal "
                       f"--num-batched-tokens-buckets {batched} (the tutorial's constraint "
                       f"for segmented attention)")
        if refused := releases.segment_refusal("--kv-segment-size-buckets", segments, sizes,
                                               "any known Neuron release"):
            out.append(refused)
        if mnbt != max(segments):
            out.append(f"--max-num-batched-tokens {mnbt} must match the prefill segment "
                       f"(--kv-segment-size-buckets {segments}): set it to {max(segments)}")
    return out


def _segment(serving: Serving, block_size: int, config: dict[str, list[int]] | None = None
             ) -> tuple[Serving, list[Assumed]]:
    """The prefill chunk and buckets of a Neuron server with prefix caching on, as the
    plugin resolves them from its settings (``config``: the bucket flags), or the one
    line saying why the plugin would refuse it."""
    from prefixbench.config.rules import SEGMENT_SOURCE  # noqa: PLC0415 - neuron only
    from prefixbench.engines.platforms import neuron_serving  # noqa: PLC0415
    from prefixbench.hosts import releases  # noqa: PLC0415 - neuron only

    # No host here, so no release: any size some known release supports (the union of
    # the manifests' prefix_caching.segment_sizes); preflight holds a host to its own.
    sizes = releases.segment_sizes()
    mml = serving.max_model_len
    config = config or {}
    for refusal in _bucket_refusals(serving, config, sizes):
        raise UsageError(refusal)
    segments = config.get("kv_segment_size_buckets")
    segment = (segments[0] if segments else
               min(serving.max_num_batched_tokens, mml or serving.max_num_batched_tokens))
    if segment % block_size:
        raise UsageError(f"--block-size {block_size} does not divide the {segment}-token "
                         f"prefill segment (block size must divide the segment size, "
                         f"{SEGMENT_SOURCE}): use one that divides it, e.g. "
                         f"{PLATFORM_BLOCK_SIZE['neuron']}")
    serving = replace(neuron_serving(serving, mml, async_scheduling=serving.async_scheduling,
                                     neuron_config=config), prefill_segment=segment)
    buckets = list(serving.prefill_buckets or ())
    auto = ("(vllm_neuron/utils/bucket_utils.py, resolve_segmented_prefill_config, the "
            "vllm-neuron of Neuron 2.32)")
    seg_said = (_given("--kv-segment-size-buckets") if segments else
                "--max-num-batched-tokens below --max-model-len: the plugin turns "
                f"segmented prefill on by itself, one segment of that size {auto}")
    if "num_batched_tokens_buckets" in config:
        buckets_said = _given("--num-batched-tokens-buckets")
    elif segments:
        buckets_said = ("--kv-segment-size-buckets: the model runner sets the prefill "
                        f"buckets to them {auto}")
    else:
        buckets_said = ("the plugin's automatic segmented prefill: [max_num_batched_tokens] "
                        "(vllm_neuron/vllm/core/scheduler.py, NeuronScheduler.__init__)")
    return serving, [
        Assumed("prefill segment", f"{segment} tokens", seg_said),
        Assumed("prefill buckets", f"{buckets} (every chunk padded to one)", buckets_said),
        Assumed("prefill saving", "design over tutorial", TUTORIAL_DISAGREES),
    ]


def _output(args: argparse.Namespace, workload: Workload) -> Assumed:
    name = "output length"
    if not workload.is_custom:
        return Assumed(name, f"{workload.prefix_repetition_output_len} tokens a request",
                       f"workload {workload.name}'s prefix_repetition_output_len "
                       f"(--ignore-eos: all of them)")
    n = workload.custom_output_len
    value = ("each line's output_tokens" if n == -1 else f"{n} tokens a request")
    if args.custom_output_len is not None:
        said = _given("--custom-output-len")
    elif args.prompts is not None:
        said = (f"vllm bench serve's default --custom-output-len {BENCH_OUTPUT_LEN}; a "
                f"line's output_tokens only with -1")
    else:
        said = f"workload {workload.name}'s custom_output_len"
    return Assumed(name, value, said)


def resolve(args: argparse.Namespace, workload: Workload) -> Setup:
    """The setup of one what-if, every assumption with its source; a
    :class:`~prefixbench.frontend.cli_shared.UsageError` for a value the replay cannot
    take or a Neuron server would refuse."""
    platform = args.platform or PLATFORMS[0]
    assumed = [Assumed("platform", platform, _given("--platform") if args.platform
                       else "default (as prefixbench_platform); --platform cpu for "
                            "vLLM's CPU platform")]
    block = _block(args, platform)
    block_size = int(block.value.split()[0])
    model, kv = _kv(args, platform)
    serving, sched = _scheduler(args, workload, platform)
    model = model.chunked(serving.max_num_batched_tokens)
    assumed += [block, kv, *sched]
    segment: int | None = None
    config = _bucket_config(args, platform)
    if platform == "neuron":
        serving, seg = _segment(serving, block_size, config)
        segment = serving.prefill_segment
        assumed += seg
    if args.capacity_blocks is not None and args.capacity_blocks < 1:
        raise UsageError(f"--capacity-blocks must be >= 1, got {args.capacity_blocks}")
    assumed.append(Assumed(
        "KV capacity", "unbounded" if args.capacity_blocks is None
        else f"{args.capacity_blocks:,} blocks",
        "default; --capacity-blocks N (the server's num_gpu_blocks - 1)"
        if args.capacity_blocks is None else _given("--capacity-blocks")))
    assumed.append(_output(args, workload))
    assumed.append(_tokenizer(args, workload))
    return Setup(platform=platform, block_size=block_size, cache_model=model,
                 serving=serving, segment=segment, assumed=tuple(assumed))


def _tokenizer(args: argparse.Namespace, workload: Workload) -> Assumed:
    name = "tokenizer"
    if args.tokenizer is None:
        return Assumed(name, "none", "prefix_repetition draws token ids from the seed; "
                       "--tokenizer adds the server's BOS")
    path = Path(args.tokenizer)
    file = path / TOKENIZER_JSON if path.is_dir() else path
    use = ("counts the prompts" if workload.is_custom
           else "adds the BOS the server puts before every prompt")
    return Assumed(name, f"{file} ({use})", _given("--tokenizer"))
