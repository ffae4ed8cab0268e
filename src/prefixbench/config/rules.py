"""The tutorial's rules for the server settings, enforced by preflight.

Each rule reads validated settings and yields one line per problem. They encode what the
tutorial states ("Tuning kv_segment_size_buckets", Step 2's key flags, "Prepare your
environment") so that a wrong setting never reaches a host.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from prefixbench.bench import calibration, experiment
from prefixbench.bench.goodput import LadderError
from prefixbench.config import catalogue
from prefixbench.engines import tokenizer_vocab
from prefixbench.engines.schedneuron import NEURON_BLOCK_SIZE, resolve_prefill_buckets
from prefixbench.engines.workloads import WorkloadError
from prefixbench.hosts import instances, releases
from prefixbench.hosts.instances import family
from prefixbench.predict.segments import warm_request_saving
from prefixbench.servers import server, sweep
from prefixbench.servers.server import TRN3_ONLY_ENVIRONMENT

_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_NEURON_CONFIG_KEYS: Final = {
    "num_batched_tokens_buckets": "list",
    "num_seqs_buckets": "list",
    "kv_segment_size_buckets": "list",
    "on_device_sampling_config": "dict",
}
#: The keys the plugin resolves by itself when left out (automatic segmented prefill:
#: :mod:`prefixbench.config.rules_plugin` refuses what it would refuse).
_PLUGIN_RESOLVES: Final = frozenset({"kv_segment_size_buckets", "num_batched_tokens_buckets"})


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


@catalogue.rule
def neuron_config_shape(s: Mapping[str, Any]) -> Iterator[str]:
    """neuron_config carries the tutorial's four keys, with the right types."""
    cfg = s["vllm_service_neuron_config"]
    for key, kind in _NEURON_CONFIG_KEYS.items():
        if key not in cfg:
            if key not in _PLUGIN_RESOLVES:
                yield f"vllm_service_neuron_config.{key} is missing (the tutorial sets it)"
        elif kind == "list" and _int_list(cfg[key]) is None:
            yield (f"vllm_service_neuron_config.{key} must be a non-empty list of integers, "
                   f"got {cfg[key]!r}")
        elif kind == "dict" and not isinstance(cfg[key], Mapping):
            yield f"vllm_service_neuron_config.{key} must be a mapping, got {cfg[key]!r}"
    for key in sorted(set(cfg) - set(_NEURON_CONFIG_KEYS)):
        yield (f"vllm_service_neuron_config.{key} is not a neuron_config key this bundle "
               f"knows ({', '.join(_NEURON_CONFIG_KEYS)})")


#: Where vllm-neuron 0.21 states its segmented-attention constraints: one segment size,
#: equal to the prefill bucket, a multiple of the block size.
SEGMENT_SOURCE: Final = ("aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/"
                         "reference-configuration.md, \"Prefix caching constraints\"")


def segment_sizes_allowed(s: Mapping[str, Any]) -> tuple[tuple[int, ...], str]:
    """The segment sizes a host may use, and whose list that is: its named release's
    (``prefix_caching.segment_sizes`` in its manifest), or with ``auto`` any known
    release's (each host is held to its own once its release is read:
    prefixbench.hosts.release_match.segment_refusal)."""
    name = str(s.get("prefixbench_neuron_release", releases.AUTO))
    try:
        if name != releases.AUTO:
            rel = releases.load_release(name)
            return rel.segment_sizes, f"Neuron {rel.release}"
        rels = releases.load_all()
    except releases.ReleaseError:
        rels = releases.load_all()  # rule neuron_release says what is wrong with it
    stated = [r for r in rels if r.segment_sizes]
    return (releases.segment_sizes(stated), "any Neuron release this bundle knows the "
            f"sizes of ({', '.join(r.release for r in stated)})")


@catalogue.rule
def segment_buckets(s: Mapping[str, Any]) -> Iterator[str]:
    """kv_segment_size_buckets is one supported size, equal to num_batched_tokens_buckets
    and a multiple of the block size.

    vllm-neuron 0.21's docs: "Only a single segment size is supported at this time",
    "kv_segment_size_buckets and num_batched_tokens_buckets must currently be identical"
    and "Block size must divide evenly into the segment size" (:data:`SEGMENT_SOURCE`;
    the same in design/vllm/prefix-caching.md, "kv_segment_size_buckets Configuration").
    """
    cfg = s["vllm_service_neuron_config"]
    segments = _int_list(cfg.get("kv_segment_size_buckets"))
    batched = _int_list(cfg.get("num_batched_tokens_buckets"))
    if segments is None or batched is None:
        return
    if len(segments) > 1:
        yield (f"kv_segment_size_buckets {segments} has {len(segments)} sizes: vllm-neuron "
               f"supports a single segment size ({SEGMENT_SOURCE}): keep one, e.g. "
               f"[{segments[0]}]")
    if segments != batched:
        yield (f"kv_segment_size_buckets {segments} must equal num_batched_tokens_buckets "
               f"{batched} (the tutorial's constraint for segmented attention)")
    unsupported = releases.segment_refusal("kv_segment_size_buckets", segments,
                                           *segment_sizes_allowed(s))
    if unsupported:
        yield unsupported
    block = int(s.get("vllm_service_block_size") or 0)
    if block and s.get("prefixbench_platform") == "neuron":
        uneven = [v for v in segments if v % block]
        if uneven:
            yield (f"vllm_service_block_size {block} does not divide kv_segment_size_buckets "
                   f"{uneven} (block size must divide the segment size, {SEGMENT_SOURCE}): "
                   "use a block size that divides it, e.g. 32 (the plugin's default)")
    mnbt = s["vllm_service_max_num_batched_tokens"]
    if mnbt != max(batched):
        yield (f"vllm_service_max_num_batched_tokens {mnbt} must match the prefill segment "
               f"(num_batched_tokens_buckets {batched}): set it to {max(batched)}")


@catalogue.rule
def seqs_buckets(s: Mapping[str, Any]) -> Iterator[str]:
    """num_seqs_buckets tops out at max_num_seqs."""
    buckets = _int_list(s["vllm_service_neuron_config"].get("num_seqs_buckets"))
    mns = s["vllm_service_max_num_seqs"]
    if buckets is not None and max(buckets) != mns:
        yield (f"num_seqs_buckets {buckets} must reach vllm_service_max_num_seqs {mns} "
               f"(largest bucket = max-num-seqs)")


@catalogue.rule
def api_on_loopback(s: Mapping[str, Any]) -> Iterator[str]:
    """The API stays on the host unless the user opts in, and then only behind a key: an
    open bind to any other address would serve the model (and its /metrics) to the whole
    network. vLLM guards the /v1 routes with the key; /health and /metrics stay open
    (vllm 0.21.0 entrypoints/openai/api_server.py, AuthenticationMiddleware), so the
    confinement to loopback is dropped only on an explicit opt-in."""
    host = str(s.get("vllm_service_host", "127.0.0.1"))
    if server.is_loopback(host):
        return
    if not s.get("vllm_service_expose"):
        yield (f"vllm_service_host {host} is not a loopback address: the API would face "
               "the network; keep 127.0.0.1 (the benchmark runs on the host itself), or set "
               "vllm_service_expose: true and a vllm_service_api_key from Ansible Vault")
    elif not s.get("vllm_service_api_key"):
        yield (f"vllm_service_host {host} with vllm_service_expose needs an API key: set "
               "vllm_service_api_key (in Ansible Vault)")


@catalogue.rule
def prices(s: Mapping[str, Any]) -> Iterator[str]:
    """Prices per instance-hour are non-negative numbers."""
    for key, value in (s.get("prefixbench_price_per_instance_hour") or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            yield (f"prefixbench_price_per_instance_hour.{key} must be a number >= 0, got "
                   f"{value!r}")


@catalogue.rule
def environment_values(s: Mapping[str, Any]) -> Iterator[str]:
    """Environment names are identifiers; values are single-line scalars."""
    for key, value in (s.get("vllm_service_environment") or {}).items():
        if not _ENV_NAME.match(key):
            yield f"vllm_service_environment: {key!r} is not a valid variable name"
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            yield (f"vllm_service_environment.{key} must be a string or number, got "
                   f"{value!r}")
        elif isinstance(value, str) and any(ord(c) < 0x20 for c in value):
            yield f"vllm_service_environment.{key} must not contain control characters"


@catalogue.rule
def trn3_only_settings(s: Mapping[str, Any]) -> Iterator[str]:
    """Trn3-only environment is not set by hand on other families."""
    env = s.get("vllm_service_environment") or {}
    fam = family(str(s.get("prefixbench_instance_type", "")))
    for key in sorted(set(env) & set(TRN3_ONLY_ENVIRONMENT)):
        if fam != "trn3":
            yield (f"vllm_service_environment.{key} is for Trn3 only and this host is "
                   f"{fam} ({s.get('prefixbench_instance_type')}): remove it")
        else:
            yield (f"vllm_service_environment.{key} is set by the bundle on Trn3 hosts: "
                   "remove it from the inventory")


@catalogue.rule
def neuron_release(s: Mapping[str, Any]) -> Iterator[str]:
    """A named release has a complete manifest (auto is read from each host)."""
    name = s["prefixbench_neuron_release"]
    if name == releases.AUTO:
        return
    try:
        releases.load_release(name).require_complete()
    except releases.ReleaseError as exc:
        yield f"prefixbench_neuron_release: {exc}"


@catalogue.rule
def real_instance_on_neuron(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, the instance type is a real one: a simulated catalogue entry exists
    only for the simulated fleet (platform cpu), and a run on it would be reported as
    measured on hardware that does not exist."""
    if s["prefixbench_platform"] != "neuron":
        return
    itype = str(s["prefixbench_instance_type"])
    try:
        spec = instances.lookup(itype)
    except instances.CatalogError:
        return  # tensor_parallel_fits names the unknown type
    if spec.simulated:
        real = ", ".join(sorted(n for n, t in instances.load_catalog().items()
                                if not t.simulated))
        yield (f"prefixbench_instance_type: {itype} is a simulated instance type, not one "
               f"for prefixbench_platform neuron: set a real one ({real}) or "
               f"prefixbench_platform: cpu for the simulated fleet")


@catalogue.rule
def tensor_parallel_fits(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, the tensor-parallel degree fits the instance's NeuronCores."""
    if s["prefixbench_platform"] != "neuron":
        return
    itype = s["prefixbench_instance_type"]
    try:
        spec = instances.lookup(itype)
    except instances.CatalogError as exc:
        yield f"prefixbench_instance_type: {exc}"
        return
    tp = s["vllm_service_tensor_parallel_size"]
    cores = spec.logical_cores()
    if tp > cores:
        yield (f"vllm_service_tensor_parallel_size {tp} does not fit a {itype} "
               f"({cores} NeuronCores at LNC={spec.default_lnc})")
    elif cores % tp:
        yield (f"vllm_service_tensor_parallel_size {tp} does not divide the {cores} "
               f"NeuronCores of a {itype}")


# --- start-up and the tokenizer vocabulary -------------------------------------------------


@catalogue.rule
def health_outlasts_engine_ready(s: Mapping[str, Any]) -> Iterator[str]:
    """The bundle waits for health at least as long as vLLM waits for its engines."""
    if s.get("prefixbench_platform") != "neuron":
        return
    ready = int(s.get("vllm_service_engine_ready_timeout") or 0)
    health = int(s.get("vllm_service_health_timeout") or 0)
    if ready and health < ready:
        yield (f"vllm_service_health_timeout {health} s is shorter than "
               f"vllm_service_engine_ready_timeout {ready} s: the bundle would give up on a "
               f"server vLLM still lets start; set it to {ready} or more")


@catalogue.rule
def tiktoken_files_known(s: Mapping[str, Any]) -> Iterator[str]:
    """Every vocabulary file to fetch has a published sha256 to check it against."""
    if not s.get("model_cache_tiktoken"):
        return
    files = list(s.get("model_cache_tiktoken_files") or [])
    if not files:
        yield ("model_cache_tiktoken_files is empty while model_cache_tiktoken is on "
               "(gpt-oss needs o200k_base.tiktoken)")
        return
    try:
        tokenizer_vocab.expected_sha256(files)
    except tokenizer_vocab.UnknownVocabFile as exc:
        yield f"model_cache_tiktoken_files: {exc}"


@catalogue.rule
def workloads_fit_the_server(s: Mapping[str, Any]) -> Iterator[str]:
    """Workloads are valid, fit max-model-len, and have a prefix worth caching."""
    try:
        workloads = experiment.workloads_of(s)
        experiment.server_items(s, "baseline")
    except LadderError:
        return  # goodput_ladder_valid says what is wrong
    except (WorkloadError, KeyError, TypeError, ValueError) as exc:
        yield f"prefixbench_workloads: {exc}"
        return
    mml = s["vllm_service_max_model_len"]
    chunk = min(s["vllm_service_max_num_batched_tokens"], mml)
    buckets = resolve_prefill_buckets(chunk, mml, s["vllm_service_neuron_config"])
    block = int(s.get("vllm_service_block_size") or NEURON_BLOCK_SIZE)
    for w in workloads:
        if calibration.is_calibration(w.name):
            yield (f"workload {w.name}: the name is the calibration bench's "
                   f"(prefixbench_calibration); give the workload another name")
        if w.is_custom:
            # Prompt lengths need the host's tokenizer: the bench finds those too long.
            from prefixbench.engines.custom import check_file  # noqa: PLC0415 - custom only
            from prefixbench.engines.custom_read import CustomPromptsError  # noqa: PLC0415

            try:
                check_file(w)
            except CustomPromptsError as exc:
                yield f"workload {w.name}: {exc}"
            if w.custom_output_len >= mml:
                yield (f"workload {w.name}: custom_output_len {w.custom_output_len} leaves "
                       f"no room for a prompt in vllm_service_max_model_len {mml}")
            continue
        need = w.prompt_len + w.prefix_repetition_output_len
        if need > mml:
            yield (f"workload {w.name}: prompt {w.prompt_len} + output "
                   f"{w.prefix_repetition_output_len} = {need} tokens exceeds "
                   f"vllm_service_max_model_len {mml}")
        shared = w.prefix_repetition_prefix_len
        if (s.get("prefixbench_platform") == "neuron" and w.prompts_per_prefix > 1
                and shared > 0 and (why := warm_request_saving(
                    shared, w.prompt_len, block, chunk, buckets))):
            yield (f"workload {w.name}: prefix_repetition_prefix_len {shared}: {why}; the "
                   f"tutorial's 3072 + 1024 saves 3 of 4 chunks")


@catalogue.rule
def goodput_ladder_valid(s: Mapping[str, Any]) -> Iterator[str]:
    """The goodput settings make a ladder of the run's workloads, or are all off."""
    try:
        experiment.ladder_of(s)
    except LadderError as exc:
        yield str(exc)
    except (WorkloadError, KeyError, TypeError, ValueError):
        return  # workloads_fit_the_server reports the workloads themselves


#: vLLM's KV block size on the cpu platform when none is given (vllm/platforms/cpu.py,
#: check_and_update_config: ``cache_config.block_size = 128`` unless the user gave one;
#: a given one is kept for models without MLA, as gpt-oss is).
CPU_BLOCK_SIZE: Final = 128
#: vllm-neuron 0.21's default ``block_size`` (aws-neuron/aws-neuron-sdk@v2.31.1
#: vllm-neuron/docs/guides/reference-configuration.md, "KV cache options").
NEURON_DEFAULT_BLOCK_SIZE: Final = 32
#: Where vllm-neuron 0.21 gives --num-gpu-blocks-override together with --block-size.
BLOCK_OVERRIDE_SOURCE: Final = ("aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/"
                                "features-guide.md, \"Sizing the KV cache\"")


@catalogue.rule
def neuron_block_override_has_block_size(s: Mapping[str, Any]) -> Iterator[str]:
    """On Neuron, a KV-block override comes with a block size.

    vllm-neuron 0.21: "On Neuron, block count is set explicitly via
    num_gpu_blocks_override, and block_size must be specified" (:data:`BLOCK_OVERRIDE_SOURCE`).
    The capacity sweep sets the override at every point, so a Neuron sweep needs it too.
    """
    if s.get("prefixbench_platform") != "neuron":
        return
    if int(s.get("vllm_service_num_gpu_blocks_override") or 0) and not int(
            s.get("vllm_service_block_size") or 0):
        yield ("vllm_service_num_gpu_blocks_override on Neuron needs vllm_service_block_size "
               f"(the plugin takes the block count with a block size, {BLOCK_OVERRIDE_SOURCE}):"
               f" set vllm_service_block_size, e.g. {NEURON_DEFAULT_BLOCK_SIZE} (its default)")


@catalogue.rule
def kv_blocks_hold_a_request(s: Mapping[str, Any]) -> Iterator[str]:
    """A KV-block override leaves room for one request at max_model_len.

    vLLM checks at start-up that the pool, sized to the override, holds one request at
    ``max_model_len`` and refuses to start otherwise (vllm/v1/core/kv_cache_utils.py,
    get_kv_cache_configs: the override replaces the profiled memory before
    _check_enough_kv_cache_memory, less the null block that vllm/v1/core/block_pool.py
    keeps). The block size is the inventory's, else the platform's default. On Neuron
    the check is left to the server's start-up: whether the 0.21 plugin adds a block of
    its own to the override is not documented (see server.serve_argv).
    """
    override = int(s.get("vllm_service_num_gpu_blocks_override") or 0)
    if override == 1:
        yield ("vllm_service_num_gpu_blocks_override 1 leaves no usable block (block 0 is "
               "vLLM's null block): use 0 (not set) or at least 2")
        return
    if not override or s.get("prefixbench_platform") != "cpu":
        return
    block = int(s.get("vllm_service_block_size") or 0) or CPU_BLOCK_SIZE
    needed = -(-int(s["vllm_service_max_model_len"]) // block) + 1
    if override < needed:
        yield (f"vllm_service_num_gpu_blocks_override {override} cannot hold one request "
               f"at max_model_len {s['vllm_service_max_model_len']} (block "
               f"{block} on cpu: needs {needed} with the null block), so vLLM "
               f"would refuse to start: raise it or lower vllm_service_max_model_len")


@catalogue.rule
def engine_overrides_off_neuron(s: Mapping[str, Any]) -> Iterator[str]:
    """The scheduler class and the hybrid manager's switch are the simulated fleet's: on
    Neuron the plugin installs its own scheduler and allocates every layer as full
    attention (aws-neuron-sdk v2.31.1 vllm-neuron/docs/design/vllm/neuron-scheduler.md and
    vllm-integration-kv-cache.md, the same behaviour at v2.32.0), so either would replace or
    repeat what it does."""
    if s.get("prefixbench_platform") != "neuron":
        return
    if s.get("vllm_service_scheduler_cls"):
        yield (f"vllm_service_scheduler_cls {s['vllm_service_scheduler_cls']} would replace "
               f"the Neuron plugin's own scheduler: leave it empty on prefixbench_platform "
               f"neuron")
    if s.get("vllm_service_disable_hybrid_kv_cache_manager"):
        yield ("vllm_service_disable_hybrid_kv_cache_manager is for the cpu platform: the "
               "Neuron plugin already allocates every layer as full attention; set it false")


@catalogue.rule
def sweep_points_valid(s: Mapping[str, Any]) -> Iterator[str]:
    """Every point of a sweep passes the rules above with its own settings; a segment
    size the release does not support is said once, for the setting."""
    try:
        points = sweep.points(s)
    except ValueError as exc:
        yield str(exc)
        return
    unsupported = releases.segment_refusal(
        "prefixbench_sweep_segment_sizes",
        [p.value for p in points if p.dial == sweep.SEG], *segment_sizes_allowed(s))
    if unsupported:
        yield unsupported
        return
    for point in points:
        for check in catalogue.RULES:
            if check in (sweep_points_valid, goodput_ladder_valid):
                continue  # the ladder is the run's, the same at every point
            for line in check(point.settings):
                yield f"sweep point {point.name}: {line}"
