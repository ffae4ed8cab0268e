"""Benchmark workloads: the model of one ``vllm bench serve`` run, and its parsing.

A :class:`Workload` holds one ``vllm bench serve`` run; every field is named after the
flag it sets, in snake_case (``prefix_repetition_prefix_len`` ->
``--prefix-repetition-prefix-len``). The tutorial's three workloads are data, in
``prefixbench/data/workloads/tutorial.yml`` (:func:`tutorial_workloads`);
:func:`load_workloads` reads and checks any list of them. The command line a workload
becomes is :func:`prefixbench.bench.bench_argv.bench_argv`; the seed each run gets, and the
check that no run finds another's prompts in the cache, are in :mod:`prefixbench.bench.seeds`.

Your own prompts (``dataset_name: custom``)
--------------------------------------------
A custom workload replays a JSONL file of the user's prompts with vLLM's ``custom``
dataset. Its keys: ``dataset_path`` (the file on the *controller*; a relative path is
resolved against the current directory when the workload is built, and kept absolute
from then on), ``num_prompts`` (0, the default: every line; more than the file holds is
refused by :func:`prefixbench.engines.custom.prepare`, since vLLM would oversample at random),
``custom_output_len`` (``--custom-output-len``, default 256 as in vLLM; -1 takes each
line's ``output_tokens``), and the shared keys. The ``prefix_repetition_*`` keys are
refused on a custom workload (and ``dataset_path`` / ``custom_output_len`` on a
``prefix_repetition`` one). :mod:`prefixbench.engines.custom` turns the file into what the
bench sends. The seed only orders the prompts, so a custom workload repeated on one
caching server finds its own prompts cached: seed isolation cannot apply to it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from prefixbench.measure.ratios import (
    ExpectedCache,
    block_aligned_expected,
    tutorial_expected_ratio,
)
from prefixbench.measure.yamlfile import YamlFileError, load_yaml_file

__all__ = [
    "Workload",
    "WorkloadError",
    "load_workloads",
    "tutorial_workloads",
]

#: numpy's legacy seeding (used by the dataset) accepts [0, 2**32).
MAX_SEED: Final = 2**32 - 1
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CUSTOM: Final = "custom"
RANDOM: Final = "random"
DATASETS: Final = ("prefix_repetition", CUSTOM, RANDOM)
_PREFIX_KEYS: Final = frozenset({
    "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len"})
_CUSTOM_KEYS: Final = frozenset({"dataset_path", "custom_output_len"})
_RANDOM_KEYS: Final = frozenset({"random_input_len", "random_output_len",
                                 "random_range_ratio"})
#: Values of :attr:`Workload.criterion` ("" = inferred; see prefixbench.bench.criteria).
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
    #: ``None``: assigned by :func:`prefixbench.bench.seeds.plan_seeds`. A fixed seed is used
    #: as given.
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
    #: (:mod:`prefixbench.bench.criteria`): ``high_overlap``, ``no_overlap``, ``sustained``,
    #: ``none``; empty: inferred from the workload's parameters, never from its name.
    criterion: str = ""
    #: random only (``--random-input-len``, ``--random-output-len``,
    #: ``--random-range-ratio``): lengths drawn uniformly from
    #: ``[len * (1 - ratio), len * (1 + ratio)]`` (vLLM's ``get_sampling_params``).
    random_input_len: int = 0
    random_output_len: int = 0
    random_range_ratio: float = 0.0

    def _foreign_keys(self) -> frozenset[str]:
        """The keys of the other dataset kinds (0 / unset on this one)."""
        return {CUSTOM: _PREFIX_KEYS | _RANDOM_KEYS, RANDOM: _PREFIX_KEYS | _CUSTOM_KEYS
                }.get(self.dataset_name, _CUSTOM_KEYS | _RANDOM_KEYS)

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not _NAME.match(self.name):
            raise WorkloadError(f"{where}: name must be letters, digits, '_.-' (max 64)")
        if self.dataset_name not in DATASETS:
            raise WorkloadError(f"{where}: dataset_name {self.dataset_name!r} is not "
                                f"supported (only {' or '.join(DATASETS)})")
        self._check_shared(where)
        if self.dataset_name != RANDOM and any(getattr(self, k) for k in _RANDOM_KEYS):
            raise WorkloadError(f"{where}: {', '.join(sorted(_RANDOM_KEYS))} apply to "
                                f"dataset_name random only")
        if self.dataset_name == CUSTOM:
            self._check_custom(where)
            return
        if self.dataset_name == RANDOM:
            self._check_random(where)
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

    def _check_random(self, where: str) -> None:
        for key in sorted(_PREFIX_KEYS):
            if getattr(self, key) != 0:
                raise WorkloadError(f"{where}: {key} does not apply to dataset_name random")
        if self.dataset_path is not None or self.custom_output_len != 256:
            raise WorkloadError(f"{where}: dataset_path and custom_output_len apply to "
                                f"dataset_name custom only")
        for key in ("random_input_len", "random_output_len", "num_prompts"):
            if getattr(self, key) < 1:
                raise WorkloadError(f"{where}: {key} must be >= 1")
        if not 0.0 <= self.random_range_ratio < 1.0:  # vLLM refuses the rest
            raise WorkloadError(f"{where}: random_range_ratio must be in [0, 1)")

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

    @property
    def is_random(self) -> bool:
        """vLLM's ``random`` dataset: the calibration bench's."""
        return self.dataset_name == RANDOM

    def _prefix_repetition_only(self, what: str) -> None:
        if self.dataset_name != "prefix_repetition":
            raise WorkloadError(
                f"workload {self.name!r}: {what} is defined for prefix_repetition "
                f"workloads only; predict a custom workload with prefixbench.predict.whatif")

    @property
    def prompts_per_prefix(self) -> int:
        self._prefix_repetition_only("prompts_per_prefix")
        return self.num_prompts // self.prefix_repetition_num_prefixes

    @property
    def requests_sent(self) -> int:
        """Measured requests vLLM actually sends (a remainder is dropped). For a custom
        workload: ``num_prompts`` (0 until resolved against its file); a random one's
        ``num_prompts``."""
        if self.is_custom or self.is_random:
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
        if self.is_random:
            return self.random_output_len
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
        for a custom or random workload (its prompts have no common length)."""
        if self.is_custom or self.is_random:
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
        for key in self._foreign_keys():
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
        foreign = sorted(set(data) & {CUSTOM: _PREFIX_KEYS | _RANDOM_KEYS,
                                      RANDOM: _PREFIX_KEYS | _CUSTOM_KEYS}.get(
                                          dataset, _CUSTOM_KEYS | _RANDOM_KEYS))
        if foreign:
            raise WorkloadError(
                f"workload {name!r}: key(s) {', '.join(foreign)} do not apply to "
                f"dataset_name {dataset}")
        required = {CUSTOM: _REQUIRED_CUSTOM, RANDOM: _REQUIRED_RANDOM}.get(dataset, _REQUIRED)
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
_REQUIRED_RANDOM: Final = frozenset({"name", "random_input_len", "random_output_len",
                                     "num_prompts"})
_INT: Final = frozenset({
    "prefix_repetition_prefix_len", "prefix_repetition_suffix_len",
    "prefix_repetition_num_prefixes", "prefix_repetition_output_len", "num_prompts",
    "num_warmups", "custom_output_len", "random_input_len", "random_output_len"})
_OPT_INT: Final = frozenset({"max_concurrency", "seed", "ready_check_timeout_sec"})
_FLOAT: Final = frozenset({"request_rate", "burstiness", "random_range_ratio"})
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
        try:
            loaded = load_yaml_file(source)
        except YamlFileError as exc:
            raise WorkloadError(str(exc)) from None
        items = loaded.get("workloads") if isinstance(loaded, dict) else None
        if not isinstance(items, list):
            raise WorkloadError(f"{source}: expected a mapping with a 'workloads' list")
    else:
        items = list(source)
    out: list[Workload] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise WorkloadError(f"each workload must be a mapping, got {item!r}")
        workload = Workload.from_dict(item)
        if workload.is_random:
            raise WorkloadError(f"workload {workload.name!r}: dataset_name random is the "
                                f"calibration bench's (prefixbench_calibration); declare "
                                f"prefix_repetition or custom")
        out.append(workload)
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
