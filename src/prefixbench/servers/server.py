"""The two vLLM servers of the tutorial, as data: argv, environment and unit directives.

The tutorial runs one server without prefix caching (baseline) and one with it (cached),
otherwise identical so that both run the same compiled graph. Everything a systemd unit
needs is computed here from validated settings; the Jinja template only prints it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from prefixbench.hosts import efa, instances, releases
from prefixbench.servers.sandbox import (
    FIRST_START_LEVEL,
    OPEN_FILES_LIMIT,
    PROOF_FILE,
    PROVEN_LEVELS,
    check_level,
    grants,
    hardening,
    library_path,
    open_files_limit,
    unit_path,
)

Configuration = Literal["baseline", "cached"]
CONFIGURATIONS: Final[tuple[Configuration, ...]] = ("baseline", "cached")

#: The environment the tutorial sets for gpt-oss compilation on Neuron ("Prepare your
#: environment") differs between releases (2.32.0 renames the compile timeout): it is the
#: host's release manifest's ``server.environment`` and, on Trn3 only,
#: ``server.trn3_environment`` (:func:`neuron_environment`).
TRN3_ONLY_ENVIRONMENT: Final = frozenset(
    name for rel in releases.load_all() for name in rel.trn3_environment)


def neuron_environment(settings: Mapping[str, Any]) -> dict[str, str]:
    """The release's environment for a Neuron unit (the Trn3-only part on Trn3)."""
    rel = releases.for_settings(settings)
    # The release's compilation route (2.33+: the native route named, so that its
    # precompile cache is on; the manifest's compile_route), then the tutorial's.
    env = {**rel.compile_route_environment, **rel.server_environment}
    if instances.family(str(settings.get("prefixbench_instance_type", ""))) == "trn3":
        env.update(rel.trn3_environment)
    return env


#: How long vLLM's API server waits for its engine cores at start-up (vllm 0.21
#: ``vllm/envs.py``: ``VLLM_ENGINE_READY_TIMEOUT_S``, default 600 s; enforced in
#: ``vllm/v1/engine/core_client.py``). Neuron's gpt-oss tutorial sets 5400 for the 120B
#: servers' cold compile (aws-neuron/aws-neuron-sdk at v2.31.1 and v2.32.0,
#: vllm-neuron/docs/tutorials/tutorial-gpt-oss.md: "export VLLM_ENGINE_READY_TIMEOUT_S=5400").
#: Set from vllm_service_engine_ready_timeout.
ENGINE_READY_TIMEOUT_VAR: Final = "VLLM_ENGINE_READY_TIMEOUT_S"
#: Where openai-harmony reads the tiktoken vocabulary from instead of downloading it
#: (openai/harmony@v0.0.8 src/tiktoken_ext/public_encodings.rs; vllm-project/recipes
#: OpenAI/GPT-OSS.md, "TIKTOKEN_ENCODINGS_BASE"). Set from model_cache_tiktoken_dir.
TIKTOKEN_BASE_VAR: Final = "TIKTOKEN_ENCODINGS_BASE"
#: The vocabulary's directory when the settings name none: the catalogue's default of
#: model_cache_tiktoken_dir (what preflight gives every host that sets none).
DEFAULT_TIKTOKEN_DIR: Final = "/opt/models/tiktoken"

#: Where both units keep vLLM's compile cache, so the second server reuses the first's.
DEFAULT_CACHE_ROOT: Final = "/var/cache/vllm-prefixbench"
#: The service user's home and working directory (systemd StateDirectory).
STATE_DIR: Final = "/var/lib/vllm-prefixbench"
#: Where the role puts the preloaded bench client on a host
#: (:mod:`prefixbench.bench.client_launch`): here, below the bench, so that teardown
#: (:mod:`prefixbench.servers.teardown`) can name its directory.
BENCH_CLIENT_SCRIPT: Final = "/var/lib/prefixbench/warm_client.py"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def unit_name(configuration: Configuration) -> str:
    """The systemd unit of a configuration."""
    return f"vllm-{configuration}.service"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "), sort_keys=False)


def serve_argv(settings: Mapping[str, Any], configuration: Configuration,
               vllm_executable: str = "vllm") -> list[str]:
    """The ``vllm serve`` command of one configuration, as an argv list.

    Follows the tutorial's Step 1 / Step 4 commands flag by flag; the only difference
    between the two configurations is ``--no-enable-prefix-caching`` on baseline.
    Neuron-only options (``--additional-config`` with ``neuron_config``) are left out on
    the ``cpu`` platform of the simulated fleet; ``--hf-overrides`` is left out when empty.
    """
    if configuration not in CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}")
    s = settings
    argv = [vllm_executable, "serve", str(s["vllm_service_model"])]
    if s.get("vllm_service_served_model_name"):
        argv += ["--served-model-name", str(s["vllm_service_served_model_name"])]
    argv += [
        "--tensor-parallel-size", str(s["vllm_service_tensor_parallel_size"]),
        "--max-num-seqs", str(s["vllm_service_max_num_seqs"]),
        "--max-model-len", str(s["vllm_service_max_model_len"]),
        "--max-num-batched-tokens", str(s["vllm_service_max_num_batched_tokens"]),
    ]
    if s.get("vllm_service_block_size"):
        argv += ["--block-size", str(s["vllm_service_block_size"])]
    if s.get("vllm_service_num_gpu_blocks_override"):
        # vLLM sizes the KV pool to this many blocks (vllm/v1/core/kv_cache_utils.py,
        # may_override_num_blocks) and keeps the pool's first block as its null block
        # (vllm/v1/core/block_pool.py, BlockPool.null_block). On Neuron the vLLM 0.21
        # plugin's docs give the override together with --block-size (aws-neuron/
        # aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/features-guide.md, "Sizing the KV
        # cache"), which preflight requires (rules.neuron_block_override_has_block_size).
        # Its design docs (design/vllm/vllm-integration-kv-cache.md) size the cache through
        # vLLM's own KVCacheConfig, with no NxD Inference pa_num_blocks and no extra null
        # block; whether the 0.21 plugin adds a block of its own, as the 0.11-era plugin
        # did (vllm-project/vllm-neuron branch release-0.2.x), is not documented, and its
        # source (branch release-0.21.0.1.0.0) was not readable here. The report takes
        # the usable count from the server's own num_gpu_blocks, so it holds either way.
        argv += ["--num-gpu-blocks-override", str(s["vllm_service_num_gpu_blocks_override"])]
    if configuration == "baseline":
        argv.append("--no-enable-prefix-caching")
    if s.get("vllm_service_hf_overrides"):
        argv += ["--hf-overrides", _json(s["vllm_service_hf_overrides"])]
    if s.get("prefixbench_platform", "neuron") == "neuron":
        argv += ["--additional-config",
                 _json({"neuron_config": s["vllm_service_neuron_config"]})]
    if s.get("vllm_service_scheduler_cls"):
        # vLLM builds this class instead of its own scheduler (vLLM 0.32
        # SchedulerConfig.get_scheduler_cls); preflight keeps it off Neuron.
        argv += ["--scheduler-cls", str(s["vllm_service_scheduler_cls"])]
    if s.get("vllm_service_disable_hybrid_kv_cache_manager"):
        argv.append("--disable-hybrid-kv-cache-manager")
    if s.get("vllm_service_enforce_eager"):
        argv.append("--enforce-eager")
    argv += ["--host", str(s["vllm_service_host"]), "--port", str(s["vllm_service_port"])]
    return argv


#: vLLM's internal channels on loopback when the API is: without these, the worker's
#: torch.distributed store and gloo sockets bind to the address of the default route
#: (measured on the simulated fleet: ~14 ephemeral ports on the fabric address, reachable
#: from other hosts). vLLM reads VLLM_HOST_IP for its own address (vllm/envs.py; used by
#: get_ip() for the single-process executor's init method) and VLLM_LOOPBACK_IP for the
#: multiprocess executor's (vllm/envs.py and vllm/utils/network_utils.py in the 0.21.0
#: wheel); torch's gloo backend picks its interface from GLOO_SOCKET_IFNAME (PyTorch's
#: torch.distributed documentation, "Choosing the network interface to use"). One host
#: serves the model, so nothing needs another address. Measured on the simulated fleet:
#: with these set, every socket of the service user is on 127.0.0.1 (test_units).
LOOPBACK_ENVIRONMENT: Final = {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    "GLOO_SOCKET_IFNAME": "lo",
}


#: Where each platform's server keeps the compiled graphs it reuses at its next start,
#: relative to ``VLLM_CACHE_ROOT``: what the bundle's shared compile cache carries
#: (:mod:`prefixbench.servers.compile_cache`).
#:
#: * ``neuron``: vLLM Neuron's local compilation cache, ``$VLLM_CACHE_ROOT/neuron/
#:   compile_cache/<hash>/`` (NEFFs; awsdocs-neuron, vllm-neuron/docs/design/compilation/
#:   compilation_cache).
#: * ``cpu``: torch Inductor's FX graph cache, put there by ``TORCHINDUCTOR_CACHE_DIR``
#:   (:data:`CPU_COMPILE_ENVIRONMENT`).
COMPILE_CACHE_SUBDIRS: Final = {"neuron": "neuron/compile_cache", "cpu": "inductor"}

#: vLLM on CPU (the simulated fleet). vLLM 0.32 turns on AOT compilation for torch
#: >= 2.10 (``use_aot_compile`` in vllm/envs.py), but with torch 2.13 the saved artifact
#: loads back as a plain function and every start logs ``Compiling model again due to a
#: load failure ... 'function' object has no attribute 'finalize_loading'``
#: (vllm/compilation/decorators.py) and compiles from scratch. With
#: ``VLLM_USE_AOT_COMPILE=0`` the graphs come from Inductor's FX graph cache instead:
#: measured on this machine with the tiny model, warm-up 20.5 s cold, 3.3 s warm, no
#: recompilation. Inductor keeps that cache in ``/tmp/torchinductor_<user>`` by default,
#: which the unit's PrivateTmp= empties at every start, so it goes under VLLM_CACHE_ROOT.
CPU_COMPILE_ENVIRONMENT: Final = {"VLLM_USE_AOT_COMPILE": "0"}
INDUCTOR_CACHE_VAR: Final = "TORCHINDUCTOR_CACHE_DIR"


def is_loopback(address: str) -> bool:
    """Whether ``address`` (the API's --host) is a loopback address."""
    import ipaddress  # noqa: PLC0415

    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def tiktoken_dir(settings: Mapping[str, Any]) -> str:
    """Where the unit reads the tiktoken vocabulary: ``model_cache_tiktoken_dir``, else
    :data:`DEFAULT_TIKTOKEN_DIR` (settings that did not go through preflight)."""
    return str(settings.get("model_cache_tiktoken_dir") or DEFAULT_TIKTOKEN_DIR)


def environment(settings: Mapping[str, Any], configuration: Configuration,
                runtime_dir: str) -> dict[str, str]:
    """The unit's environment: the tutorial's variables plus the bundle's own.

    On Neuron, ``VLLM_ENGINE_READY_TIMEOUT_S`` comes from the model profile (a cold
    compile of a 120B model outlasts vLLM's 600 s default); a model that needs the
    tiktoken vocabulary (gpt-oss) reads it from ``model_cache_tiktoken_dir``, so the
    server never downloads it.

    ``vllm_service_environment`` is not here: it goes into the root-only
    :data:`ENV_FILE` (see :func:`private_environment`), which systemd applies over these.

    ``runtime_dir`` is the unit's RuntimeDirectory: systemd creates it empty at each start
    and removes it at stop, which is what wipes the Prometheus multiprocess directory.
    """
    env: dict[str, str] = {}
    if settings.get("prefixbench_platform", "neuron") == "neuron":
        env.update(neuron_environment(settings))
        # NEURON_SKIP_EFA_AFFINITY=1 where the host has no EFA, as read from it
        # (prefixbench.hosts.efa: AWS's quickstart, or the server fails to start).
        env.update(efa.environment(settings))
        ready = int(settings.get("vllm_service_engine_ready_timeout") or 0)
        if ready > 0:
            env[ENGINE_READY_TIMEOUT_VAR] = str(ready)
    if settings.get("model_cache_tiktoken"):
        env[TIKTOKEN_BASE_VAR] = tiktoken_dir(settings)
    if is_loopback(str(settings.get("vllm_service_host", "127.0.0.1"))):
        env.update(LOOPBACK_ENVIRONMENT)
    cache_root = str(settings.get("vllm_service_cache_root", DEFAULT_CACHE_ROOT))
    env["VLLM_CACHE_ROOT"] = cache_root
    if settings.get("prefixbench_platform", "neuron") == "cpu":
        env.update(CPU_COMPILE_ENVIRONMENT)
        env[INDUCTOR_CACHE_VAR] = f"{cache_root}/{COMPILE_CACHE_SUBDIRS['cpu']}"
    env["PROMETHEUS_MULTIPROC_DIR"] = f"{runtime_dir}/prometheus"
    env["HF_HUB_OFFLINE"] = "1"
    env["HOME"] = STATE_DIR
    env["PREFIXBENCH_CONFIGURATION"] = configuration
    return env


#: The root-only file both units read with ``EnvironmentFile=``: the inventory's
#: ``vllm_service_environment`` and the API key. ``Environment=`` lines are readable by
#: every local user (the unit file is 0644 and ``systemctl show -p Environment`` answers
#: anyone over D-Bus); systemd reads an EnvironmentFile as root before dropping to the
#: service user, and its settings override ``Environment=`` (systemd.exec(5),
#: EnvironmentFile=), so the inventory still wins over the bundle's own variables.
ENV_FILE: Final = "/etc/vllm-prefixbench/vllm.env"
#: vLLM reads its API key from this variable when ``--api-key`` is absent (vllm 0.21.0
#: entrypoints/openai/api_server.py: ``args.api_key or [envs.VLLM_API_KEY]``); on the
#: command line the key would be in the unit, in ``ps`` and in vLLM's start-up log of
#: non-default arguments.
API_KEY_VAR: Final = "VLLM_API_KEY"
#: ``vllm bench serve`` sends ``Authorization: Bearer $OPENAI_API_KEY`` (vllm 0.21.0
#: benchmarks/lib/endpoint_request_func.py).
BENCH_API_KEY_VAR: Final = "OPENAI_API_KEY"
#: What an API key may contain: a bearer token's characters (RFC 6750 b64token), at least
#: 16 of them; nothing a shell or systemd would read specially.
API_KEY_PATTERN: Final = re.compile(r"^[A-Za-z0-9._~+/=-]{16,}$")


def private_environment(settings: Mapping[str, Any], api_key: str = "") -> dict[str, str]:
    """What goes into :data:`ENV_FILE`: ``vllm_service_environment`` and the API key."""
    env = {str(k): str(v) for k, v in (settings.get("vllm_service_environment") or {}).items()}
    if api_key:
        if not API_KEY_PATTERN.match(api_key):
            raise ValueError("vllm_service_api_key must be 16 or more characters of "
                             "A-Z a-z 0-9 . _ ~ + / = -")
        env[API_KEY_VAR] = api_key
    return env


def process_environment(settings: Mapping[str, Any], configuration: Configuration,
                        runtime_dir: str, api_key: str = "") -> dict[str, str]:
    """What the server process sees: the unit's lines, then the environment file's."""
    return {**environment(settings, configuration, runtime_dir),
            **private_environment(settings, api_key)}


def env_file_text(env: Mapping[str, str]) -> str:
    """An EnvironmentFile: one ``KEY='value'`` line per variable.

    Single quotes keep every character literal both for systemd's parser and for a POSIX
    shell that sources the file (the bench does, to read the key); a value holding a
    quote or a control character is refused rather than escaped.
    """
    lines = ["# Managed by prefixbench (vllm_service role): root-only, read by systemd."]
    for key in sorted(env):
        value = env[key]
        if not _ENV_NAME.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
        if "'" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError(f"vllm_service_environment.{key}: a single quote or a control "
                             "character cannot be passed to the server; remove it")
        lines.append(f"{key}='{value}'")
    return "\n".join(lines) + "\n"


def bench_argv_with_key(argv: Sequence[str], env_file: str = ENV_FILE) -> list[str]:
    """Wrap a ``vllm bench serve`` argv so that it sends the servers' API key, read on
    the host from :data:`ENV_FILE`: the key never travels in a module argument, an
    environment prefix or a command line that ``-vvv`` or ``ps`` would show."""
    script = (f'set -a; . "$0"; {BENCH_API_KEY_VAR}="${{{API_KEY_VAR}:-}}"; '
              f'export {BENCH_API_KEY_VAR}; exec "$@"')
    return ["/bin/sh", "-c", script, env_file, *argv]


_SYSTEMD_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def systemd_quote(arg: str, *, expand_variables: bool = True) -> str:
    """Quote one argument for an ``ExecStart=`` (or ``Environment=``) line.

    systemd splits on whitespace, honours double quotes with C-style escapes and expands
    ``%`` specifiers in both; in ``ExecStart=`` it also expands ``$VAR`` / ``${VAR}``,
    which ``$$`` escapes. ``Environment=`` does no ``$`` expansion ("the $ character has
    no special meaning", systemd.exec(5)), so there ``$`` must stay single
    (``expand_variables=False``) or the process would receive ``$$``.
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in arg):
        raise ValueError(f"control character in command-line argument {arg!r}")
    escaped = arg.replace("%", "%%")
    if expand_variables:
        escaped = escaped.replace("$", "$$")
    if escaped and _SYSTEMD_SAFE.match(escaped):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def exec_line(argv: Sequence[str]) -> str:
    """An argv as the value of ``ExecStart=``."""
    return " ".join(systemd_quote(a) for a in argv)


def environment_lines(env: Mapping[str, str]) -> list[str]:
    """``Environment=`` values, one per variable, quoted for systemd."""
    lines = []
    for key in sorted(env):
        if not _ENV_NAME.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
        lines.append(systemd_quote(f"{key}={env[key]}", expand_variables=False))
    return lines


@dataclass(frozen=True)
class UnitSpec:
    """Everything the unit template prints for one configuration."""

    configuration: Configuration
    name: str
    conflicts: str
    exec_start: str
    environment: tuple[str, ...]
    environment_file: str
    runtime_directory: str
    argv: tuple[str, ...]
    hardening: tuple[str, ...]
    limit_nofile: int = OPEN_FILES_LIMIT
    #: What the unit grants the runtime at every level (capabilities, limits): lines.
    grants: tuple[str, ...] = ()
    #: The sandbox level (vllm_service_sandbox) ``hardening`` is.
    sandbox_level: str = FIRST_START_LEVEL

    def sandbox_lines(self) -> list[str]:
        """The grant and confinement lines: what the doctor proves on a host."""
        return [*self.grants, *self.hardening]

    def as_dict(self) -> dict[str, Any]:
        return {
            "configuration": self.configuration, "name": self.name,
            "conflicts": self.conflicts, "exec_start": self.exec_start,
            "environment": list(self.environment),
            "environment_file": self.environment_file,
            "runtime_directory": self.runtime_directory, "argv": list(self.argv),
            "hardening": list(self.hardening), "limit_nofile": self.limit_nofile,
            "grants": list(self.grants), "sandbox_level": self.sandbox_level,
            "sandbox_needs_proof": self.sandbox_level in PROVEN_LEVELS,
            "sandbox_proof_file": PROOF_FILE,
        }


def unit_spec(settings: Mapping[str, Any], configuration: Configuration,
              vllm_executable: str) -> UnitSpec:
    """Compute the unit of one configuration from validated settings."""
    other: Configuration = "cached" if configuration == "baseline" else "baseline"
    runtime = f"vllm-{configuration}"
    argv = serve_argv(settings, configuration, vllm_executable)
    platform = str(settings.get("prefixbench_platform", "neuron"))
    level = check_level(str(settings.get("vllm_service_sandbox") or FIRST_START_LEVEL))
    env = {**environment(settings, configuration, f"/run/{runtime}"),
           "PATH": unit_path(vllm_executable)}
    if platform == "neuron":
        # Where libnrt is, as AWS's image of the host's release sets it
        # (the manifest's server.library_path; prefixbench.servers.sandbox).
        env["LD_LIBRARY_PATH"] = library_path(
            platform, releases.for_settings(settings).library_path)
    return UnitSpec(
        configuration=configuration,
        name=unit_name(configuration),
        conflicts=unit_name(other),
        exec_start=exec_line(argv),
        environment=tuple(environment_lines(env)),
        environment_file=ENV_FILE,
        runtime_directory=f"{runtime} {runtime}/prometheus",
        argv=tuple(argv),
        hardening=tuple(hardening(
            platform,
            loopback_only=is_loopback(str(settings.get("vllm_service_host", "127.0.0.1"))),
            level=level)),
        limit_nofile=open_files_limit(platform),
        grants=tuple(d.line for d in grants(platform)),
        sandbox_level=level,
    )
