"""Benchmark workloads, the ``vllm bench serve`` command line, and seed isolation.

A :class:`Workload` holds one ``vllm bench serve`` run; every field is named after the
flag it sets, in snake_case (``prefix_repetition_prefix_len`` ->
``--prefix-repetition-prefix-len``). The tutorial's three workloads are data, in
``prefixbench/data/workloads/tutorial.yml`` (:func:`tutorial_workloads`).

Seed isolation
--------------
vLLM's ``prefix_repetition`` draws every prefix and suffix from one stream seeded by
``--seed`` (default 0), so two runs with the same seed share the beginning of their
prompts: run on one caching server, the tutorial's no-overlap run finds 3.88% hits left
by the high-overlap run, and its sustained run 75.08% instead of 73.125% (the recorded
fixtures; reproduced token for token by :func:`carry_over`). :func:`plan_seeds` gives
every (workload, repetition) of a server's sequence its own seed, and the *same* seed for
that (workload, repetition) on every configuration, so baseline and cached servers see
identical prompts. Different seeds give unrelated MT19937 streams: a 128-token block
repeating by chance has probability ``vocab_size ** -128``. :func:`carry_over` replays a
planned sequence through :mod:`prefixbench.cachesim` with the prompts regenerated as
vLLM does (:mod:`prefixbench.prefix_repetition`) and reports, per run, the hits that
only exist because of earlier runs: 0 for a valid plan.

Your own prompts (``dataset_name: custom``)
--------------------------------------------
A custom workload replays a JSONL file of the user's prompts with vLLM's ``custom``
dataset. Its keys: ``dataset_path`` (the file on the *controller*; a relative path is
resolved against the current directory when the workload is built, and kept absolute
from then on), ``num_prompts`` (0, the default: every line; more than the file holds is
refused by :func:`prefixbench.custom.prepare`, since vLLM would oversample at random),
``custom_output_len`` (``--custom-output-len``, default 256 as in vLLM; -1 takes each
line's ``output_tokens``), and the shared keys. The ``prefix_repetition_*`` keys are
refused on a custom workload (and ``dataset_path`` / ``custom_output_len`` on a
``prefix_repetition`` one). :mod:`prefixbench.custom` turns the file into what the
bench sends. The seed only orders the prompts, so a custom workload repeated on one
caching server finds its own prompts cached: seed isolation cannot apply to it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from prefixbench.cachesim import PrefixCacheSim
from prefixbench.prefix_repetition import generate_prompts
from prefixbench.ratios import ExpectedCache, block_aligned_expected, tutorial_expected_ratio

__all__ = [
    "CarryOver",
    "SeedPlan",
    "Workload",
    "WorkloadError",
    "bench_argv",
    "carry_over",
    "load_workloads",
    "plan_seeds",
    "tutorial_workloads",
]

#: numpy's legacy seeding (used by the dataset) accepts [0, 2**32).
MAX_SEED: Final = 2**32 - 1
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_METADATA_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
CUSTOM: Final = "custom"
DATASETS: Final = ("prefix_repetition", CUSTOM)
_PREFIX_KEYS: Final = frozenset({
    "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len"})
_CUSTOM_KEYS: Final = frozenset({"dataset_path", "custom_output_len"})
#: Values of :attr:`Workload.criterion` ("" = inferred; see prefixbench.criteria).
CRITERIA: Final = ("", "high_overlap", "no_overlap", "sustained", "none")


class WorkloadError(ValueError):
    """A workload definition is invalid; the message names the workload and the key."""


@dataclass(frozen=True)
class Workload:
    """One ``vllm bench serve`` run: the ``prefix_repetition`` dataset, or ``custom``.

    The ``prefix_repetition_*`` fields are 0 on a custom workload; ``num_prompts`` 0 on
    a custom workload means every line of its file.
    """

    name: str
    prefix_repetition_prefix_len: int = 0
    prefix_repetition_suffix_len: int = 0
    prefix_repetition_num_prefixes: int = 0
    prefix_repetition_output_len: int = 0
    num_prompts: int = 0
    max_concurrency: int | None = None
    #: Requests per second; ``inf`` (vLLM's default) sends them all at once.
    request_rate: float = math.inf
    burstiness: float = 1.0
    #: ``None``: assigned by :func:`plan_seeds`. A fixed seed is used as given.
    seed: int | None = None
    ignore_eos: bool = True
    dataset_name: str = "prefix_repetition"
    #: Keep per-request TTFTs (``--save-detailed``): needed for the cold/warm split.
    save_detailed: bool = True
    num_warmups: int = 0
    #: Passed explicitly (0: no ready-check request), so that what the server sees before
    #: the measured requests, and so the expected hit ratio, does not depend on the bench
    #: client's default (vLLM 0.21 and 0.32: 0; some versions sent a ready check).
    #: ``None`` leaves the client's default.
    ready_check_timeout_sec: int | None = 0
    percentile_metrics: str | None = None
    metric_percentiles: str | None = None
    disable_shuffle: bool = False
    #: custom only: the user's JSONL file on the controller (made absolute).
    dataset_path: str | None = None
    #: custom only: ``--custom-output-len``; -1 uses each line's ``output_tokens``.
    custom_output_len: int = 256
    #: Which of the tutorial's confirmation criteria this workload serves
    #: (:mod:`prefixbench.criteria`): ``high_overlap``, ``no_overlap``, ``sustained``,
    #: ``none``; empty: inferred from the workload's parameters, never from its name.
    criterion: str = ""

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not _NAME.match(self.name):
            raise WorkloadError(f"{where}: name must be letters, digits, '_.-' (max 64)")
        if self.dataset_name not in DATASETS:
            raise WorkloadError(f"{where}: dataset_name {self.dataset_name!r} is not "
                                f"supported (only {' or '.join(DATASETS)})")
        self._check_shared(where)
        if self.dataset_name == CUSTOM:
            self._check_custom(where)
            return
        if self.dataset_path is not None or self.custom_output_len != 256:
            raise WorkloadError(f"{where}: dataset_path and custom_output_len apply to "
                                f"dataset_name custom only")
        for key in ("prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
                    "num_warmups"):
            if getattr(self, key) < 0:
                raise WorkloadError(f"{where}: {key} must be >= 0")
        for key in ("prefix_repetition_num_prefixes", "prefix_repetition_output_len",
                    "num_prompts"):
            if getattr(self, key) < 1:
                raise WorkloadError(f"{where}: {key} must be >= 1")
        if self.prefix_repetition_prefix_len + self.prefix_repetition_suffix_len < 1:
            raise WorkloadError(f"{where}: a prompt needs at least one token")
        if self.num_prompts < self.prefix_repetition_num_prefixes:
            raise WorkloadError(
                f"{where}: num_prompts ({self.num_prompts}) must be >= "
                f"prefix_repetition_num_prefixes ({self.prefix_repetition_num_prefixes}); "
                f"vLLM refuses it")

    def _check_custom(self, where: str) -> None:
        for key in sorted(_PREFIX_KEYS):
            if getattr(self, key) != 0:
                raise WorkloadError(f"{where}: {key} does not apply to dataset_name custom")
        path = self.dataset_path
        if not path or not path.strip() or any(c in path for c in "\n\r\x00"):
            raise WorkloadError(f"{where}: dataset_path must name the prompts file (a "
                                f"JSONL file on the controller)")
        if not Path(path).is_absolute():
            object.__setattr__(self, "dataset_path", str(Path.cwd() / path))
        if self.num_prompts < 0:
            raise WorkloadError(f"{where}: num_prompts must be >= 1 (or 0: every line)")
        if self.custom_output_len != -1 and self.custom_output_len < 1:
            raise WorkloadError(f"{where}: custom_output_len must be >= 1, or -1 to use "
                                f"each line's output_tokens")

    def _check_shared(self, where: str) -> None:
        if self.num_warmups < 0:
            raise WorkloadError(f"{where}: num_warmups must be >= 0")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise WorkloadError(f"{where}: max_concurrency must be >= 1")
        if not self.request_rate > 0:
            raise WorkloadError(f"{where}: request_rate must be > 0 (inf = all at once)")
        if not self.burstiness > 0:
            raise WorkloadError(f"{where}: burstiness must be > 0")
        if self.seed is not None and not 0 <= self.seed <= MAX_SEED:
            raise WorkloadError(f"{where}: seed must be in [0, 2**32)")
        if self.ready_check_timeout_sec is not None and self.ready_check_timeout_sec < 0:
            raise WorkloadError(f"{where}: ready_check_timeout_sec must be >= 0")
        if self.criterion not in CRITERIA:
            raise WorkloadError(f"{where}: criterion must be one of "
                                f"{', '.join(c or repr(c) for c in CRITERIA)}, not "
                                f"{self.criterion!r}")

    # -- derived --------------------------------------------------------------------
    @property
    def is_custom(self) -> bool:
        """The user's own prompts (``dataset_name: custom``)."""
        return self.dataset_name == CUSTOM

    def _prefix_repetition_only(self, what: str) -> None:
        if self.is_custom:
            raise WorkloadError(
                f"workload {self.name!r}: {what} is defined for prefix_repetition "
                f"workloads only; predict a custom workload with prefixbench.whatif")

    @property
    def prompts_per_prefix(self) -> int:
        self._prefix_repetition_only("prompts_per_prefix")
        return self.num_prompts // self.prefix_repetition_num_prefixes

    @property
    def requests_sent(self) -> int:
        """Measured requests vLLM actually sends (a remainder is dropped). For a custom
        workload: ``num_prompts`` (0 until resolved against its file)."""
        if self.is_custom:
            return self.num_prompts
        return self.prompts_per_prefix * self.prefix_repetition_num_prefixes

    @property
    def pre_requests(self) -> int:
        """Copies of the first prompt sent before the measured run (ready check, warmups)."""
        ready = 1 if (self.ready_check_timeout_sec or 0) > 0 else 0
        return ready + self.num_warmups

    @property
    def prompt_len(self) -> int:
        self._prefix_repetition_only("prompt_len")
        return self.prefix_repetition_prefix_len + self.prefix_repetition_suffix_len

    @property
    def output_len(self) -> int | None:
        """Output tokens per request; ``None`` when each line of a custom file says."""
        if self.is_custom:
            return None if self.custom_output_len == -1 else self.custom_output_len
        return self.prefix_repetition_output_len

    def tutorial_ratio(self) -> float:
        """The tutorial's step-9 formula for this workload (prefix_repetition only)."""
        self._prefix_repetition_only("the tutorial's formula")
        return tutorial_expected_ratio(self.num_prompts, self.prefix_repetition_num_prefixes,
                                       self.prefix_repetition_prefix_len,
                                       self.prefix_repetition_suffix_len)

    def expected(self, block_size: int, *, bos_tokens: int = 0) -> ExpectedCache:
        """Block-aligned expectation with the server's own block size."""
        self._prefix_repetition_only("the block-aligned formula")
        return block_aligned_expected(
            self.num_prompts, self.prefix_repetition_num_prefixes,
            self.prefix_repetition_prefix_len, self.prefix_repetition_suffix_len,
            block_size, pre_requests=self.pre_requests, bos_tokens=bos_tokens)

    def expected_ratios(self, block_size: int, *, bos_tokens: int = 0) -> dict[str, Any]:
        """Both expectations for a record: the tutorial's and the block-aligned one."""
        exp = self.expected(block_size, bos_tokens=bos_tokens)
        return {
            "tutorial_ratio": self.tutorial_ratio(),
            "block_aligned_ratio": exp.ratio,
            "block_size": block_size,
            "hit_tokens": exp.hit_tokens,
            "query_tokens": exp.query_tokens,
            "requests": exp.requests,
            "hit_tokens_per_warm_request": exp.hit_tokens_per_warm_request,
        }

    def infer_pre_requests(self, queries_delta: float, *, bos_tokens: int = 0) -> int | None:
        """How many extra copies of the first prompt the server saw, from the measured
        ``prefix_cache_queries`` delta (a vLLM that sends a ready check by default shows
        up here as 1). ``None`` when the delta is not a whole number of prompts, and
        for a custom workload (its prompts have no common length)."""
        if self.is_custom:
            return None
        per_prompt = self.prompt_len + bos_tokens
        prompts = queries_delta / per_prompt
        if prompts != int(prompts) or prompts < self.requests_sent:
            return None
        return int(prompts) - self.requests_sent

    def with_seed(self, seed: int) -> Workload:
        data = self.to_dict()
        data["seed"] = seed
        return Workload.from_dict(data)

    def with_num_prompts(self, num_prompts: int) -> Workload:
        """The same workload sending ``num_prompts`` (a custom one's resolved count)."""
        data = self.to_dict()
        data["num_prompts"] = num_prompts
        return Workload.from_dict(data)

    # -- (de)serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The workload's keys; those of the other dataset kind are left out."""
        data = asdict(self)
        for key in _CUSTOM_KEYS if not self.is_custom else _PREFIX_KEYS:
            del data[key]
        if math.isinf(self.request_rate):
            data["request_rate"] = "inf"
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        name = str(data.get("name", "<unnamed>"))
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise WorkloadError(
                f"workload {name!r}: unknown key(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(known))}")
        dataset = data.get("dataset_name", "prefix_repetition")
        if dataset not in DATASETS:
            raise WorkloadError(f"workload {name!r}: dataset_name {dataset!r} is not "
                                f"supported (only {' or '.join(DATASETS)})")
        foreign = sorted(set(data) & (_PREFIX_KEYS if dataset == CUSTOM else _CUSTOM_KEYS))
        if foreign:
            raise WorkloadError(
                f"workload {name!r}: key(s) {', '.join(foreign)} do not apply to "
                f"dataset_name {dataset}")
        required = _REQUIRED_CUSTOM if dataset == CUSTOM else _REQUIRED
        missing = [k for k in known if k not in data and k in required]
        if missing:
            raise WorkloadError(f"workload {name!r}: missing key(s) {', '.join(missing)}")
        values: dict[str, Any] = {}
        for key, value in data.items():
            values[key] = _coerce(name, key, value)
        return cls(**values)


_REQUIRED: Final = frozenset({
    "name", "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len", "num_prompts"})
_REQUIRED_CUSTOM: Final = frozenset({"name", "dataset_path"})
_INT: Final = frozenset({
    "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len", "num_prompts",
    "num_warmups", "custom_output_len"})
_OPT_INT: Final = frozenset({"max_concurrency", "seed", "ready_check_timeout_sec"})
_FLOAT: Final = frozenset({"request_rate", "burstiness"})
_BOOL: Final = frozenset({"ignore_eos", "save_detailed", "disable_shuffle"})


def _coerce(name: str, key: str, value: Any) -> Any:
    where = f"workload {name!r}: {key}"
    if key in _BOOL:
        if not isinstance(value, bool):
            raise WorkloadError(f"{where} must be true or false, got {value!r}")
        return value
    if key in _INT or (key in _OPT_INT and value is not None):
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadError(f"{where} must be an integer, got {value!r}")
        return value
    if key in _FLOAT:
        if isinstance(value, str) and value.strip().lower() in ("inf", "+inf"):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadError(f"{where} must be a number or 'inf', got {value!r}")
        return float(value)
    if value is not None and not isinstance(value, str):
        raise WorkloadError(f"{where} must be a string, got {value!r}")
    return value


def load_workloads(source: str | Path | Iterable[Mapping[str, Any]]) -> list[Workload]:
    """Workloads from a YAML file (``workloads:`` list) or from a list of mappings."""
    if isinstance(source, str | Path):
        loaded = yaml.safe_load(Path(source).read_text(encoding="utf-8"))
        items = loaded.get("workloads") if isinstance(loaded, dict) else None
        if not isinstance(items, list):
            raise WorkloadError(f"{source}: expected a mapping with a 'workloads' list")
    else:
        items = list(source)
    out: list[Workload] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise WorkloadError(f"each workload must be a mapping, got {item!r}")
        out.append(Workload.from_dict(item))
    names = [w.name for w in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise WorkloadError(f"workload names must be unique; repeated: {', '.join(dupes)}")
    return out


def tutorial_workloads() -> list[Workload]:
    """The tutorial's high_overlap, no_overlap and sustained_c4 workloads."""
    text = (resources.files("prefixbench") / "data" / "workloads" / "tutorial.yml").read_text(
        encoding="utf-8")
    loaded = yaml.safe_load(text)
    return load_workloads(loaded["workloads"])


# -- command line ---------------------------------------------------------------------------

def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _dataset_argv(w: Workload, dataset_path: str | None) -> list[str]:
    """The dataset flags, the count and the seed."""
    if w.is_custom:
        if (not dataset_path or not dataset_path.endswith(".jsonl")
                or any(c in dataset_path for c in "\n\r\x00")):
            raise WorkloadError(f"workload {w.name!r}: a custom workload needs the host "
                                f"path of its prepared .jsonl file, got {dataset_path!r}")
        if w.num_prompts < 1:
            raise WorkloadError(f"workload {w.name!r}: num_prompts is not resolved; "
                                f"prepare its file first (prefixbench.custom.prepare)")
        return [
            "--dataset-name", w.dataset_name,
            "--dataset-path", dataset_path,
            "--custom-output-len", str(w.custom_output_len),
            "--skip-chat-template",
            "--no-oversample",
            "--num-prompts", str(w.num_prompts),
            "--seed", str(w.seed),
        ]
    return [
        "--dataset-name", w.dataset_name,
        "--prefix-repetition-prefix-len", str(w.prefix_repetition_prefix_len),
        "--prefix-repetition-suffix-len", str(w.prefix_repetition_suffix_len),
        "--prefix-repetition-num-prefixes", str(w.prefix_repetition_num_prefixes),
        "--prefix-repetition-output-len", str(w.prefix_repetition_output_len),
        "--num-prompts", str(w.num_prompts),
        "--seed", str(w.seed),
    ]


def bench_argv(
    workload: Workload,
    base_url: str,
    model: str,
    *,
    tokenizer: str | None,
    result_dir: str,
    result_filename: str,
    metadata: Mapping[str, str] | None = None,
    executable: Sequence[str] = ("vllm",),
    dataset_path: str | None = None,
) -> list[str]:
    """The exact ``vllm bench serve`` argv for one run (a list, never a shell string).

    The workload must have a seed (see :func:`plan_seeds`): relying on vLLM's default
    seed 0 is what contaminates workloads. ``metadata`` lands in the result JSON
    (``--metadata k=v ...``). A custom workload needs ``dataset_path``, the prepared
    file *on the host* (:func:`prefixbench.custom.prepare`; it must end in ``.jsonl``),
    and a resolved ``num_prompts`` (:meth:`Workload.with_num_prompts`); it is sent with
    ``--skip-chat-template`` (the prepared text is exactly what the server gets) and
    ``--no-oversample``.
    """
    if workload.seed is None:
        raise WorkloadError(f"workload {workload.name!r} has no seed; assign one with "
                            f"plan_seeds() so runs cannot share cache entries")
    for label, value in (("base_url", base_url), ("model", model),
                         ("result_dir", result_dir), ("result_filename", result_filename)):
        if not value or any(c in value for c in "\n\r\x00"):
            raise WorkloadError(f"{label} must be a non-empty single line, got {value!r}")
    if not re.match(r"^https?://", base_url):
        raise WorkloadError(f"base_url must start with http:// or https://, got {base_url!r}")
    if "/" in result_filename:
        raise WorkloadError(f"result_filename must be a file name, got {result_filename!r}")
    w = workload
    argv = [*executable, "bench", "serve",
            "--base-url", base_url,
            "--model", model]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    argv += _dataset_argv(w, dataset_path)
    if w.max_concurrency is not None:
        argv += ["--max-concurrency", str(w.max_concurrency)]
    if not math.isinf(w.request_rate):
        argv += ["--request-rate", _num(w.request_rate)]
    if w.burstiness != 1.0:
        argv += ["--burstiness", _num(w.burstiness)]
    if w.ignore_eos:
        argv.append("--ignore-eos")
    if w.disable_shuffle:
        argv.append("--disable-shuffle")
    if w.num_warmups:
        argv += ["--num-warmups", str(w.num_warmups)]
    if w.ready_check_timeout_sec is not None:
        argv += ["--ready-check-timeout-sec", str(w.ready_check_timeout_sec)]
    if w.percentile_metrics:
        argv += ["--percentile-metrics", w.percentile_metrics]
    if w.metric_percentiles:
        argv += ["--metric-percentiles", w.metric_percentiles]
    argv += ["--save-result", "--result-dir", result_dir, "--result-filename", result_filename]
    if w.save_detailed:
        argv.append("--save-detailed")
    if metadata:
        items = []
        for key, value in metadata.items():
            text = str(value)
            if not _METADATA_KEY.match(key) or any(c in text for c in "\n\r\x00"):
                raise WorkloadError(f"metadata {key!r}={text!r}: keys are identifiers, "
                                    f"values single lines")
            items.append(f"{key}={text}")
        # --metadata takes nargs='*': keep it last so it cannot swallow other flags.
        argv += ["--metadata", *items]
    return argv


# -- seeds ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SeedPlan:
    """Seed of each (workload, repetition); the same on every configuration."""

    seeds: Mapping[tuple[str, int], int]

    def seed(self, workload: str, repetition: int) -> int:
        try:
            return self.seeds[(workload, repetition)]
        except KeyError:
            raise KeyError(f"no seed planned for workload {workload!r} "
                           f"repetition {repetition}") from None

    def for_configuration(self, configuration: str) -> dict[tuple[str, str, int], int]:
        """Keys with the configuration spelled out (values do not depend on it)."""
        return {(configuration, w, r): s for (w, r), s in self.seeds.items()}

    def sequence(self, workloads: Sequence[Workload], repetitions: int) -> list[Workload]:
        """The server's run order (repetition by repetition), each with its seed."""
        return [w.with_seed(self.seed(w.name, rep))
                for rep in range(1, repetitions + 1) for w in workloads]


def plan_seeds(workloads: Sequence[Workload], repetitions: int, base_seed: int) -> SeedPlan:
    """Distinct seeds for every (workload, repetition) run on one server.

    Unseeded workloads get ``base_seed + k`` for the k-th unseeded run in server order
    (repetition 1 of every workload, then repetition 2, ...). A workload with a fixed
    ``seed`` keeps it for repetition 1 and uses ``seed + rep - 1`` after. Any collision
    (two runs, one seed) raises :class:`WorkloadError`: on a caching server the second
    run would be served from the first one's cache. The plan does not depend on the
    configuration, so the same workload and repetition is paired across configurations.
    """
    if repetitions < 1:
        raise WorkloadError(f"repetitions must be >= 1, got {repetitions}")
    names = [w.name for w in workloads]
    if len(set(names)) != len(names):
        raise WorkloadError("workload names must be unique")
    seeds: dict[tuple[str, int], int] = {}
    next_seed = base_seed
    for rep in range(1, repetitions + 1):
        for w in workloads:
            if w.seed is not None:
                seed = w.seed + rep - 1
            else:
                seed = next_seed
                next_seed += 1
            seeds[(w.name, rep)] = seed
    bad = [s for s in seeds.values() if not 0 <= s <= MAX_SEED]
    if bad:
        raise WorkloadError(f"seeds out of [0, 2**32): {bad[:3]}; lower base_seed")
    owners: dict[int, tuple[str, int]] = {}
    for key, seed in seeds.items():
        if seed in owners:
            raise WorkloadError(
                f"seed {seed} planned for both {owners[seed]} and {key}: the later run "
                f"would find the earlier one's prompts in the cache")
        owners[seed] = key
    return SeedPlan(seeds=seeds)


# -- isolation check ------------------------------------------------------------------------

@dataclass(frozen=True)
class CarryOver:
    """Hits of one run in a server sequence, against the same run on an empty cache."""

    workload: str
    seed: int
    hit_tokens: int
    hit_tokens_alone: int
    query_tokens: int

    @property
    def carried_over(self) -> int:
        """Hit tokens that exist only because of earlier runs (0 when isolated)."""
        return self.hit_tokens - self.hit_tokens_alone

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


def carry_over(
    sequence: Sequence[Workload],
    *,
    block_size: int,
    vocab_size: int,
    capacity_blocks: int | None = None,
) -> list[CarryOver]:
    """Replay a server's run sequence through the cache model, prompts regenerated as vLLM
    does (exact for tokenizers whose decode -> encode keeps the drawn ids, such as the
    simulated fleet's; the seed structure that causes carry-over is the same for any).

    Each workload must have a seed. Pre-requests (ready check, warmups) are included.
    """
    shared = PrefixCacheSim(block_size, capacity_blocks)
    out: list[CarryOver] = []
    for w in sequence:
        if w.seed is None:
            raise WorkloadError(f"workload {w.name!r} has no seed")
        if w.is_custom:
            raise WorkloadError(f"workload {w.name!r}: carry-over is modelled for "
                                f"prefix_repetition workloads only")
        prompts = [p.tokens for p in generate_prompts(
            w.seed, w.num_prompts, w.prefix_repetition_num_prefixes,
            prefix_len=w.prefix_repetition_prefix_len,
            suffix_len=w.prefix_repetition_suffix_len,
            vocab_size=vocab_size, shuffle=not w.disable_shuffle)]
        stream = [prompts[0]] * w.pre_requests + prompts
        together = shared.replay(stream)
        alone = PrefixCacheSim(block_size, capacity_blocks).replay(stream)
        out.append(CarryOver(workload=w.name, seed=w.seed,
                             hit_tokens=together.total_hit_tokens,
                             hit_tokens_alone=alone.total_hit_tokens,
                             query_tokens=together.query_tokens))
    return out
