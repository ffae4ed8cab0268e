"""The bundle's settings: one typed catalogue, and the validation that preflight runs.

Every variable the bundle reads from an inventory is declared here once, with its type,
its default, its allowed values and a one-line description. The preflight play hands the
variables it finds for each host to :func:`validate`, which returns the coerced settings
and one line per problem; nothing on any host changes until that list is empty.

Coercion follows Ansible's own argument-spec rules so that ``-e key=value`` works: an
``int`` accepts ``8`` and ``"8"`` but not ``"eight"``, ``8.5`` or ``true``; a ``bool``
accepts the usual yes/no spellings. Cross-field rules (the tutorial's constraints) are
plain functions registered in :data:`RULES`; later features add rules there.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from prefixbench import instances

Kind = Literal["str", "int", "bool", "float", "list_int", "list_str", "dict", "list_dict"]

#: Prefixes of the variables this bundle owns. A variable with one of these prefixes that
#: is not in the catalogue is almost certainly a typo, and is reported as one.
OWNED_PREFIXES: Final = (
    "prefixbench_", "neuron_sdk_", "vllm_env_", "model_cache_", "vllm_service_")

#: Names with an owned prefix that are not settings: what preflight publishes.
RESERVED: Final = frozenset({"prefixbench_settings"})

_REQUIRED: Final = object()

# Characters that never belong in a value that ends up on a command line or in a unit
# file: control characters (newlines would split a unit directive) and NUL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Setting:
    """One variable of the bundle."""

    name: str
    kind: Kind
    description: str
    default: Any = _REQUIRED
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    #: Secrets are never templated by preflight (that would decrypt a vaulted value);
    #: only their presence is checked.
    secret: bool = False

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass
class ValidationResult:
    """Coerced settings of one host and the problems found, one line each."""

    host: str
    settings: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


_RUN_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
_INSTANCE_TYPE_PATTERN: Final = r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"
_URL_PATTERN: Final = r"^(https?|file)://\S+$"
_PATH_PATTERN: Final = r"^/[\w./-]*$"
_NAME_PATTERN: Final = r"^[a-z_][a-z0-9_-]{0,31}$"

CATALOGUE: Final[tuple[Setting, ...]] = (
    # --- deployment-wide (inventory group_vars/all) -----------------------------------
    Setting("prefixbench_neuron_release", "str", "Neuron SDK release whose pinned versions "
            "are installed (a manifest in prefixbench/data/neuron_releases/).", "2.31",
            pattern=r"^\d+\.\d+$"),
    Setting("prefixbench_model_profile", "str", "Model profile (gpt-oss-120b, gpt-oss-20b): "
            "the model, its path and tensor-parallel degree; inventory keys override it. "
            "Empty: none.", "", pattern=r"^$|^[\w.-]+$"),
    Setting("prefixbench_platform", "str", "Accelerator platform of the hosts: neuron on "
            "Trn2/Trn3, cpu on the simulated fleet.", "neuron", choices=("neuron", "cpu")),
    Setting("prefixbench_instance_type", "str", "EC2 instance type of the host (host "
            "variable; the EC2 inventory sets it).", pattern=_INSTANCE_TYPE_PATTERN),
    Setting("prefixbench_sim_address", "str", "Fabric address of a simulated host "
            "(written by scripts/simfleet; informational).", "",
            pattern=r"^$|^\d+\.\d+\.\d+\.\d+$"),
    Setting("prefixbench_run_id", "str", "Name of the run directory under the results "
            "directory; reuse one to resume a run. Empty: a new timestamped id.", "",
            pattern=r"^$|" + _RUN_ID_PATTERN),
    Setting("prefixbench_results_dir", "str", "Controller directory that holds one "
            "sub-directory per run.", "results"),
    Setting("prefixbench_configurations", "list_str", "Server configurations to run, in "
            "order.", ["baseline", "cached"], choices=("baseline", "cached")),
    Setting("prefixbench_repetitions", "int", "Trials of every workload on every "
            "configuration (seeds are paired across configurations).", 1, minimum=1,
            maximum=100),
    Setting("prefixbench_base_seed", "int", "First --seed of the run; each workload and "
            "repetition gets its own (paired across configurations).", 1000, minimum=0,
            maximum=2**31),
    Setting("prefixbench_bench_timeout", "int", "Seconds one `vllm bench serve` may take "
            "before it is stopped and marked failed.", 3600, minimum=30),
    Setting("prefixbench_fail_on", "list_str", "Outcomes that end the run non-zero once the "
            "report is written: fail (a FAIL verdict), failed_bench (a bench without a "
            "result), inconclusive (an INCONCLUSIVE verdict). Empty: never.",
            ["fail", "failed_bench"], choices=("fail", "failed_bench", "inconclusive")),
    Setting("prefixbench_junit_file", "str", "Also write the verdicts as JUnit XML to this "
            "file, relative to the run directory (e.g. junit.xml), for CI systems. Empty: "
            "none.", "", pattern=r"^$|^(?!.*\.\.)[\w.-]+(/[\w.-]+)*$"),
    Setting("prefixbench_price_per_instance_hour", "dict", "Price of an instance-hour by "
            "instance type (e.g. {trn2.48xlarge: 40.0}, in your currency), for the "
            "report's cost per million tokens with and without caching. Empty: no cost.",
            {}),
    Setting("prefixbench_teardown_model", "bool", "playbooks/teardown.yml removes the "
            "model files (off: keep them for the next run).", True),
    Setting("prefixbench_teardown_neuron_packages", "bool", "playbooks/teardown.yml also "
            "removes the Neuron apt packages (off: only their holds are released).", False),
    Setting("prefixbench_skip_provision", "bool", "Skip the provision phase (hosts already "
            "provisioned, e.g. a DLAMI with the pinned versions).", False),
    Setting("prefixbench_sweep_segment_sizes", "list_int", "Segment-size sweep: one "
            "baseline/cached server pair per kv_segment_size_buckets value, each with the "
            "matching num_batched_tokens_buckets and max-num-batched-tokens. Empty: no "
            "sweep, the inventory's server settings.", [], choices=(512, 1024, 2048, 4096)),
    Setting("prefixbench_workloads", "list_dict", "Benchmark workloads; each key mirrors a "
            "`vllm bench serve` flag in snake_case. Empty: the tutorial's three.", []),
    Setting("prefixbench_model_fit", "str", "Preflight check that the model's weights fit "
            "the HBM of the NeuronCores tensor parallelism uses (platform neuron only): "
            "refuse a misfit, warn (shown in the plan, the run goes on), or off.",
            "refuse", choices=("refuse", "warn", "off")),
    Setting("prefixbench_model_parameters", "int", "Parameters of the model (the profile "
            "sets it, e.g. 117000000000 for gpt-oss-120b), for the weights-fit check. "
            "0: unknown, not checked.", 0, minimum=0, maximum=10**13),
    Setting("prefixbench_model_dtype_by_family", "dict", "Dtype the Neuron backend serves "
            "the weights in, per instance family, e.g. {trn2: bf16, trn3: mxfp4} for "
            "gpt-oss; for the weights-fit check. Empty: not checked.", {}),
    Setting("prefixbench_model_weights_gib", "dict", "Size in GiB of the weights per dtype "
            "where parameters x bytes does not apply (an MXFP4 checkpoint's size), e.g. "
            "{mxfp4: 61}; for the weights-fit check.", {}),
    # --- Neuron SDK (roles/neuron_sdk) -------------------------------------------------
    Setting("neuron_sdk_apt_repo_url", "str", "Base URL of the Neuron apt repository.",
            "https://apt.repos.neuron.amazonaws.com", pattern=r"^(https?|file)://\S+$"),
    Setting("neuron_sdk_apt_key_url", "str", "URL of the repository's signing key.",
            "https://apt.repos.neuron.amazonaws.com/GPG-PUB-KEY-AMAZON-AWS-NEURON.PUB",
            pattern=r"^(https?|file)://\S+$"),
    Setting("neuron_sdk_apt_codename", "str", "Repository codename; empty: the host's.",
            "", pattern=r"^[a-z]*$"),
    Setting("neuron_sdk_allow_upgrade", "bool", "Move Neuron packages found at other "
            "versions to the release's pins (off: report and stop).", False),
    Setting("neuron_sdk_tools_dir", "str", "Directory of the Neuron tools.",
            "/opt/aws/neuron/bin", pattern=r"^/[\w./-]*$"),
    Setting("neuron_sdk_verify_devices", "bool", "Check neuron-ls against the instance "
            "type.", True),
    Setting("neuron_sdk_load_driver", "bool", "Run `modprobe neuron` when no /dev/neuron* "
            "exists after the install (the driver's DKMS hook only loads it for the running "
            "kernel).", True),
    Setting("neuron_sdk_reboot_if_no_devices", "bool", "Reboot the host when the devices "
            "are still missing after that (the Neuron setup guide's advice on a fresh "
            "instance).", False),
    # --- vLLM environment (roles/vllm_env) ---------------------------------------------
    Setting("vllm_env_venv", "str", "Virtualenv with vLLM and the Neuron plugin.",
            "/opt/vllm-prefixbench/venv", pattern=r"^/[\w./-]*$"),
    Setting("vllm_env_python", "str", "Interpreter the virtualenv is made from.",
            "/usr/bin/python3", pattern=r"^/[\w./-]*$"),
    Setting("vllm_env_index_url", "str", "pip index URL.", "https://pypi.org/simple",
            pattern=r"^(https?|file)://\S+$"),
    Setting("vllm_env_extra_index_urls", "list_str", "Extra pip index URLs (the Neuron "
            "pip repository).", ["https://pip.repos.neuron.amazonaws.com"]),
    Setting("vllm_env_trusted_hosts", "list_str", "Hosts pip may fetch from over plain "
            "HTTP (the simulated fleet's index).", []),
    Setting("vllm_env_requirements_url", "str", "A pinned requirements file (URL or host "
            "path) installed with --no-deps instead of the release's pip packages.", ""),
    Setting("vllm_env_system_packages", "list_str", "Debian packages the environment "
            "needs.", ["python3-venv", "python3-packaging"]),
    Setting("vllm_env_adopt_venv", "str", "An existing virtualenv to use when its "
            "vllm-neuron matches the release (the Neuron DLAMI's).",
            "/opt/aws_neuronx_venv_pytorch_inference_vllm_0_21_0_1_0_0",
            pattern=r"^$|^/[\w./-]*$"),
    # --- model (roles/model_cache) ----------------------------------------------------
    Setting("model_cache_source", "str", "Where the model comes from: hf (Hugging Face "
            "Hub), s3 (a mirror bucket), url (a .tar.gz with its sha256), local (a "
            "directory already on the host).", "hf", choices=("hf", "s3", "url", "local")),
    Setting("model_cache_url", "str", "URL of a .tar.gz of the model (source url).", "",
            pattern=r"^$|^(https?|file)://\S+$"),
    Setting("model_cache_checksum", "str", "Checksum of that archive (source url): "
            "sha256:<hex>, or sha256:<URL of a checksum file>.", "",
            pattern=r"^$|^sha256:\S+$"),
    Setting("model_cache_repo_id", "str", "Hub repository of the model.",
            "openai/gpt-oss-120b", pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$"),
    Setting("model_cache_revision", "str", "Hub revision (branch, tag or commit); the "
            "resolved commit is recorded for fingerprints.", "main",
            pattern=r"^[\w./-]+$"),
    Setting("model_cache_dir", "str", "Directory on the host that holds the model.",
            "/opt/models/gpt-oss-120b", pattern=r"^/[\w./-]*$"),
    Setting("model_cache_s3_bucket", "str", "Bucket of the model mirror (source s3); "
            "one per region, so a fleet downloads the model once per region.", "",
            pattern=r"^$|^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"),
    Setting("model_cache_s3_prefix", "str", "Key prefix of the model in that bucket, "
            "e.g. gpt-oss-120b; empty: the whole bucket.", "",
            pattern=r"^$|^[\w.=+-]+(/[\w.=+-]+)*/?$"),
    Setting("model_cache_s3_uri", "str", "Shorthand for bucket and prefix: "
            "s3://bucket/prefix (source s3); set it or model_cache_s3_bucket, not both.", "",
            pattern=r"^$|^s3://[a-z0-9.-]{3,63}(/[\w./-]*)?$"),
    Setting("model_cache_s3_region", "str", "Region of the bucket; empty: boto3's default "
            "on the host (AWS_REGION, ~/.aws/config).", "",
            pattern=r"^$|^[a-z]{2}(-[a-z]+)+-\d+$"),
    Setting("model_cache_s3_endpoint_url", "str", "Endpoint of an S3-compatible mirror; "
            "empty: AWS S3.", "", pattern=r"^$|^https?://\S+$"),
    Setting("model_cache_s3_delete_extra", "bool", "Delete files in model_cache_dir that "
            "the mirror does not hold (off: extra files are left alone).", False),
    Setting("model_cache_s3_boto3", "str", "How boto3 gets onto the host: apt "
            "(python3-boto3), venv (pip into model_cache_s3_venv), present (already "
            "importable by the host's Python).", "apt", choices=("apt", "venv", "present")),
    Setting("model_cache_s3_venv", "str", "Virtualenv that holds boto3 (model_cache_s3_boto3 "
            "venv).", "/opt/prefixbench-s3/venv", pattern=r"^/[\w./-]*$"),
    Setting("model_cache_s3_pip_args", "list_str", "Extra pip arguments for that install, "
            "e.g. [--no-index, --find-links, <URL>].", []),
    Setting("model_cache_s3_access_key_id", "str", "Access key id for the mirror; empty: the "
            "host's boto3 credential chain (the instance profile on EC2).", "",
            secret=True),
    Setting("model_cache_s3_secret_access_key", "str", "Secret key of that access key (keep "
            "it in Ansible Vault).", "", secret=True),
    Setting("model_cache_owner", "str", "Owner of the model files on the host (the "
            "service user only reads them).", "root", pattern=r"^[a-z_][a-z0-9_-]*$"),
    Setting("model_cache_hf_token", "str", "Hub token (keep it in Ansible Vault).", "",
            secret=True),
    Setting("model_cache_hf_include", "list_str", "`hf download --include` patterns "
            "(fnmatch: `*` also matches `/`, hence the excludes).",
            ["*.json", "*.jinja", "model-*.safetensors"], pattern=r"^\S+$"),
    Setting("model_cache_hf_exclude", "list_str", "`hf download --exclude` patterns: the "
            "gpt-oss repositories' original/ and metal/ copies, which vLLM never loads.",
            ["original/*", "metal/*"], pattern=r"^\S+$"),
    Setting("model_cache_tiktoken", "bool", "The model's chat encoding needs the tiktoken "
            "vocabulary (gpt-oss: harmony's o200k_base): keep it on the host and point the "
            "server at it (TIKTOKEN_ENCODINGS_BASE).", False),
    Setting("model_cache_tiktoken_dir", "str", "Directory on the host that holds the "
            "tiktoken vocabulary files.", "/opt/models/tiktoken", pattern=_PATH_PATTERN),
    Setting("model_cache_tiktoken_base_url", "str", "Where the vocabulary files are "
            "downloaded from (a mirror may stand in).",
            "https://openaipublic.blob.core.windows.net/encodings/", pattern=_URL_PATTERN),
    Setting("model_cache_tiktoken_files", "list_str", "Vocabulary files to keep, each "
            "checked against its published sha256 (prefixbench.tokenizer_vocab).",
            ["o200k_base.tiktoken"], pattern=r"^[\w.-]+$"),
    # --- vLLM server (roles/vllm_service) ----------------------------------------------
    Setting("vllm_service_model", "str", "Model path on the host (or hub id) that `vllm "
            "serve` loads."),
    Setting("vllm_service_served_model_name", "str", "Name the server reports and the "
            "benchmark requests; empty: the model path.", ""),
    Setting("vllm_service_tensor_parallel_size", "int", "--tensor-parallel-size.", 8,
            minimum=1, maximum=128),
    Setting("vllm_service_tensor_parallel_size_by_family", "dict", "--tensor-parallel-size "
            "per instance family, e.g. {trn2: 16, trn3: 8}; used for a host whose "
            "inventory does not set vllm_service_tensor_parallel_size.", {}),
    Setting("vllm_service_health_timeout", "int", "Seconds a server may take to become "
            "healthy (a cold compile of a large model takes long; the profile sets it).",
            1800, minimum=60, maximum=86400),
    Setting("vllm_service_engine_ready_timeout", "int", "VLLM_ENGINE_READY_TIMEOUT_S on "
            "Neuron: how long vLLM's API server waits for its engine cores. 0: not set "
            "(vLLM's 600 s).", 0, minimum=0, maximum=86400),
    Setting("vllm_service_max_num_seqs", "int", "--max-num-seqs.", 4, minimum=1,
            maximum=1024),
    Setting("vllm_service_max_model_len", "int", "--max-model-len.", 8192, minimum=16,
            maximum=1048576),
    Setting("vllm_service_max_num_batched_tokens", "int", "--max-num-batched-tokens.",
            1024, minimum=16, maximum=1048576),
    Setting("vllm_service_hf_overrides", "dict", "--hf-overrides (JSON); the tutorial "
            "clears quantization_config for gpt-oss on Trn2.",
            {"quantization_config": {}}),
    Setting("vllm_service_neuron_config", "dict", "neuron_config inside "
            "--additional-config: num_batched_tokens_buckets, num_seqs_buckets, "
            "kv_segment_size_buckets, on_device_sampling_config.",
            {"num_batched_tokens_buckets": [1024], "num_seqs_buckets": [4],
             "kv_segment_size_buckets": [1024],
             "on_device_sampling_config": {"all_greedy": True}}),
    Setting("vllm_service_environment", "dict", "Extra environment of both units, e.g. "
            "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION (the tutorial's fix for OOM at start).",
            {}),
    Setting("vllm_service_cache_root", "str", "VLLM_CACHE_ROOT: compile cache on local "
            "disk shared by both units.", "/var/cache/vllm-prefixbench",
            pattern=r"^/[\w./-]*$"),
    Setting("vllm_service_enforce_eager", "bool", "--enforce-eager (no graph compilation; "
            "for CPU hosts without a compiler).", False),
    Setting("vllm_service_host", "str", "--host the server binds to. Anything but "
            "loopback needs vllm_service_expose and vllm_service_api_key.", "127.0.0.1"),
    Setting("vllm_service_expose", "bool", "Opt in to a non-loopback vllm_service_host "
            "(the API then faces the network; an API key is required).", False),
    Setting("vllm_service_api_key", "str", "API key both servers require on /v1 (keep it "
            "in Ansible Vault; 16+ characters of A-Z a-z 0-9 . _ ~ + / = -). Delivered in "
            "a root-only EnvironmentFile, never in the unit.", "", secret=True),
    Setting("vllm_service_port", "int", "--port.", 8000, minimum=1, maximum=65535),
    Setting("vllm_service_user", "str", "Unprivileged system user that runs both servers.",
            "vllm", pattern=_NAME_PATTERN),
    Setting("vllm_service_device_group", "str", "Group the service user joins to open "
            "/dev/neuron* under AWS's hardening rule (GROUP=\"neuron\", MODE=\"0660\"). "
            "Empty: none.", "neuron", pattern=r"^$|" + _NAME_PATTERN),
    Setting("vllm_service_unit_dir", "str", "Directory of the systemd units.",
            "/etc/systemd/system", pattern=r"^/[\w./-]*$"),
)

BY_NAME: Final[dict[str, Setting]] = {s.name: s for s in CATALOGUE}

#: Names of the secret settings, and what preflight passes instead of their values.
SECRETS: Final = frozenset(s.name for s in CATALOGUE if s.secret)
REDACTED: Final = "<redacted>"

Rule = Callable[[Mapping[str, Any]], Iterable[str]]

#: Cross-field rules, run on the coerced settings once every single value is valid.
RULES: list[Rule] = []


def catalogue_default(name: str) -> Any:
    """The catalogue's default of setting ``name`` (``KeyError`` for an unknown or
    required one)."""
    setting = BY_NAME[name]
    if setting.required:
        raise KeyError(f"{name} is required: it has no default")
    return setting.default


def rule(func: Rule) -> Rule:
    """Register a cross-field rule (a function yielding one line per problem)."""
    RULES.append(func)
    return func


_TRUE: Final = frozenset({"true", "yes", "on", "1", "y", "t"})
_FALSE: Final = frozenset({"false", "no", "off", "0", "n", "f"})


class _Invalid(ValueError):
    """A value that does not have the type its setting says."""


def _type_name(value: Any) -> str:
    return type(value).__name__


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Invalid(f"must be an integer, got {value!r} (bool)")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Invalid(f"must be an integer, got {value!r} ({_type_name(value)})")


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise _Invalid(f"must be a number, got {value!r} (bool)")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _Invalid(f"must be a number, got {value!r} ({_type_name(value)})")


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _Invalid(f"must be a boolean (true/false), got {value!r} ({_type_name(value)})")


def _as_str(value: Any) -> str:
    if isinstance(value, str):
        if _CONTROL.search(value):
            raise _Invalid("must not contain control characters (newline, tab, NUL)")
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise _Invalid(f"must be a string, got {value!r} ({_type_name(value)})")


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    raise _Invalid(f"must be a list, got {value!r} ({_type_name(value)})")


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid(f"keys must be strings, got {key!r}")
            out[key] = item
        return out
    raise _Invalid(f"must be a mapping, got {value!r} ({_type_name(value)})")


def coerce(setting: Setting, value: Any) -> Any:
    """Return ``value`` as the setting's type, or raise ``ValueError`` with the reason."""
    result: Any
    if setting.kind == "int":
        result = _as_int(value)
    elif setting.kind == "float":
        result = _as_float(value)
    elif setting.kind == "bool":
        result = _as_bool(value)
    elif setting.kind == "str":
        result = _as_str(value)
    elif setting.kind == "list_int":
        items = _as_list(value)
        try:
            result = [_as_int(v) for v in items]
        except _Invalid as exc:
            raise _Invalid(f"must be a list of integers ({exc})") from None
    elif setting.kind == "list_str":
        result = [_as_str(v) for v in _as_list(value)]
    elif setting.kind == "dict":
        result = _as_dict(value)
    else:  # list_dict
        result = [_as_dict(v) for v in _as_list(value)]

    _check_bounds(setting, result)
    return result


def _check_bounds(setting: Setting, result: Any) -> None:
    values = result if isinstance(result, list) and setting.kind in ("list_int", "list_str") \
        else [result]
    for item in values:
        if setting.choices is not None and item not in setting.choices:
            allowed = ", ".join(str(c) for c in setting.choices)
            raise _Invalid(f"{item!r} is not one of: {allowed}")
        if setting.minimum is not None and isinstance(item, int | float) \
                and item < setting.minimum:
            raise _Invalid(f"must be >= {setting.minimum:g}, got {item}")
        if setting.maximum is not None and isinstance(item, int | float) \
                and item > setting.maximum:
            raise _Invalid(f"must be <= {setting.maximum:g}, got {item}")
        if setting.pattern is not None and isinstance(item, str) \
                and not re.fullmatch(setting.pattern, item):
            raise _Invalid(f"{item!r} does not match the expected form {setting.pattern}")


PROFILES_DIR: Final = Path(__file__).resolve().parent / "data" / "profiles"


def available_profiles() -> list[str]:
    """Names of the model profiles shipped with the bundle."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yml"))


def load_profile(name: str) -> dict[str, Any]:
    """The settings a model profile sets; ``ValueError`` naming the known ones if unknown."""
    path = PROFILES_DIR / f"{name}.yml"
    if not path.is_file():
        raise ValueError(f"{name!r} is not a known profile (known: "
                         f"{', '.join(available_profiles())})")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(data) - set(BY_NAME))
    if not isinstance(data, dict) or unknown:
        raise ValueError(f"{name!r}: profile sets unknown settings {unknown}")
    return data


def plain(value: Any) -> Any:
    """A copy of ``value`` made of builtin types only.

    Values handed over by a templating engine may be subclasses of ``str``, ``dict`` and
    so on that carry extra data; messages and JSON should only ever see the builtins.
    """
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def owned_names(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that carry one of this bundle's prefixes."""
    return sorted(n for n in names if n.startswith(OWNED_PREFIXES) and n not in RESERVED)


def _tp_by_family(s: dict[str, Any]) -> Iterable[str]:
    """Set the host's tensor-parallel degree from the per-family map, if it has one.

    Called only when the inventory does not set ``vllm_service_tensor_parallel_size``
    itself (the inventory always wins); yields a line if the host's entry is no valid
    degree. Keys that are no family are a rule's business (rules.by_family_keys).
    """
    name = "vllm_service_tensor_parallel_size_by_family"
    by_family = s.get(name) or {}
    fam = instances.family(str(s.get("prefixbench_instance_type", "")))
    if fam not in by_family:
        return
    tp_setting = BY_NAME["vllm_service_tensor_parallel_size"]
    try:
        s[tp_setting.name] = coerce(tp_setting, plain(by_family[fam]))
    except ValueError as exc:
        yield f"{name}.{fam} {exc}"


def validate(values: Mapping[str, Any], host: str = "all",
             extra_names: Iterable[str] = ()) -> ValidationResult:
    """Validate the variables of one host.

    ``values`` holds the host's variables (only the catalogued ones are read);
    ``extra_names`` are the names of every variable visible to the host, so that
    misspelt names with an owned prefix are reported rather than silently ignored.
    Every problem is one line that starts with the host and the variable's name.
    """
    from prefixbench import rules  # noqa: F401, PLC0415 - registers the tutorial's rules

    result = ValidationResult(host=host)
    inventory = values
    profile_name = values.get("prefixbench_model_profile") or ""
    if profile_name:
        try:
            values = {**load_profile(str(profile_name)), **values}
        except ValueError as exc:
            result.problems.append(f"{host}: prefixbench_model_profile {exc}")
            return result
    for setting in CATALOGUE:
        if setting.name in values and values[setting.name] is not None:
            try:
                result.settings[setting.name] = coerce(setting, plain(values[setting.name]))
            except ValueError as exc:
                result.problems.append(f"{host}: {setting.name} {exc}")
        elif setting.required:
            result.problems.append(
                f"{host}: {setting.name} is required ({setting.description}) "
                "- set it in the inventory's group_vars or host_vars")
        else:
            result.settings[setting.name] = setting.default

    if result.ok and inventory.get("vllm_service_tensor_parallel_size") is None:
        result.problems.extend(f"{host}: {line}" for line in _tp_by_family(result.settings))

    for name in owned_names(extra_names):
        if name not in BY_NAME:
            close = difflib.get_close_matches(name, BY_NAME.keys(), n=1)
            hint = f" - did you mean {close[0]}?" if close else ""
            result.problems.append(f"{host}: {name} is not a setting of this bundle{hint}")

    if result.ok:
        for check in RULES:
            result.problems.extend(f"{host}: {line}" for line in check(result.settings))
    return result
