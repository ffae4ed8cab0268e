"""The run directory: where every file of a run lives (its one owner).

Layout (one file per benchmark, written atomically)::

    <root>/<run_id>/run.json                                           the run
    <root>/<run_id>/<host>/fingerprint.json                            what the host ran
    <root>/<run_id>/<host>/<configuration>/startup.json                a server's start
    <root>/<run_id>/<host>/<configuration>/compile.json                how it got its graphs
    <root>/<run_id>/<host>/<configuration>/<workload>/rep<k>.json         a result
    <root>/<run_id>/<host>/<configuration>/<workload>/rep<k>.failed.json  a failure
    <root>/<run_id>/<host>/baseline/calibration/rep1.json             the calibration bench
    <root>/<run_id>/tokenizer/, prompts/                               shared inputs
    <root>/<run_id>/summary.json, report.md, report.html, results.csv  the report

A rerun with the same run id asks :meth:`RunLayout.is_completed` / :meth:`completed`
what is done and runs only the rest; writing a result removes a failure marker of the
same benchmark. Files are replaced with :func:`write_json_atomic`, so a reader sees
either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.measure.atomic import write_text_atomic
from prefixbench.measure.records import (
    BenchmarkRecord,
    FailureRecord,
    ResultKey,
    json_safe,
    with_checksum,
)


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, mode: int = 0o644) -> Path:
    """Write ``obj`` as JSON to ``path`` so that readers never see a partial file.

    Indented, key-sorted JSON through :func:`prefixbench.measure.atomic.write_text_atomic` (temp
    file in the same directory, fsync, rename, fsync of the directory). Non-finite floats
    are refused (they are not JSON). Missing parent directories are created.
    """
    target = Path(path)
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    write_text_atomic(target, text, mode)
    return target


# -- run directory --------------------------------------------------------------------------

#: Names of the run directory's files and folders (paths come from :class:`RunLayout`).
RUN_META: Final = "run.json"
FINGERPRINT: Final = "fingerprint.json"
STARTUP: Final = "startup.json"
STARTUP_JOURNAL: Final = "startup-journal.log"
RESTART_JOURNAL: Final = "restart-journal.log"
COMPILE: Final = "compile.json"
TOKENIZER_DIR: Final = "tokenizer"
PROMPTS_DIR: Final = "prompts"
SUMMARY: Final = "summary.json"
#: The compiled-graph store's default place: beside the runs, shared by all of them.
COMPILE_STORE_DIR: Final = ".compile-cache"

_COMPONENT: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
_REP_FILE: Final = re.compile(r"^rep([0-9]+)(\.failed)?\.json$")


def _component(kind: str, value: str) -> str:
    if not _COMPONENT.match(value) or ".." in value:
        raise ValueError(
            f"{kind} {value!r} cannot be a path component (letters, digits, '._@+-', "
            f"not starting with '.' or '-', no '..', at most 128 characters)")
    return value


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run: ``<root>/<run_id>/<host>/<configuration>/<workload>/rep<k>``."""

    root: Path
    run_id: str

    def __post_init__(self) -> None:
        _component("run_id", self.run_id)

    @classmethod
    def of(cls, run_dir: str | os.PathLike[str]) -> RunLayout:
        """The layout of an existing run directory path (``<root>/<run_id>``)."""
        path = Path(run_dir)
        return cls(path.parent, path.name)

    @property
    def run_dir(self) -> Path:
        return Path(self.root) / self.run_id

    # -- the run's own files ------------------------------------------------------------

    @property
    def meta_path(self) -> Path:
        """``run.json``: the run's identity (:mod:`prefixbench.bench.runmeta`)."""
        return self.run_dir / RUN_META

    @property
    def tokenizer_dir(self) -> Path:
        """The host's tokenizer files, fetched for custom workloads and the what-if."""
        return self.run_dir / TOKENIZER_DIR

    def prompts_path(self, workload: str) -> Path:
        """A custom workload's prepared prompts (the exact text the server gets)."""
        return self.run_dir / PROMPTS_DIR / f"{_component('workload', workload)}.jsonl"

    @property
    def summary_path(self) -> Path:
        """The report's ``summary.json``."""
        return self.run_dir / SUMMARY

    @property
    def compile_store(self) -> Path:
        """The default compiled-graph store: ``<root>/.compile-cache``, beside the runs."""
        return Path(self.root) / COMPILE_STORE_DIR

    # -- per host and server ------------------------------------------------------------

    def host_dir(self, host: str) -> Path:
        return self.run_dir / _component("host", host)

    def fingerprint_path(self, host: str) -> Path:
        """What ``host`` ran (:mod:`prefixbench.hosts.fingerprint`)."""
        return self.host_dir(host) / FINGERPRINT

    def server_dir(self, host: str, configuration: str) -> Path:
        return self.host_dir(host) / _component("configuration", configuration)

    def files(self, host: str, configuration: str = "") -> dict[str, str]:
        """The run directory's paths a host's tasks write, by name: the host's folder,
        fingerprint, the shared tokenizer folder and compiled-graph store, and with
        ``configuration`` its server's start record, journals and compile record."""
        out = {"host_dir": str(self.host_dir(host)),
               "fingerprint": str(self.fingerprint_path(host)),
               "tokenizer_dir": str(self.tokenizer_dir),
               "compile_store": str(self.compile_store)}
        if configuration:
            base = self.server_dir(host, configuration)
            out |= {"server_dir": str(base), "startup": str(base / STARTUP),
                    "startup_journal": str(base / STARTUP_JOURNAL),
                    "restart_journal": str(base / RESTART_JOURNAL),
                    "compile": str(base / COMPILE)}
        return out

    def server_records(self, host: str, name: str) -> dict[str, Path]:
        """``name`` (:data:`STARTUP` or :data:`COMPILE`) of each of ``host``'s servers,
        by configuration."""
        host_dir = self.host_dir(host)
        return {path.parent.name: path for path in sorted(host_dir.glob(f"*/{name}"))}

    # -- benches ------------------------------------------------------------------------

    def bench_dir(self, host: str, configuration: str, workload: str) -> Path:
        return self.server_dir(host, configuration) / _component("workload", workload)

    def result_path(self, key: ResultKey) -> Path:
        if key.repetition < 1:
            raise ValueError(f"repetitions count from 1, got {key.repetition}")
        return self.bench_dir(key.host, key.configuration, key.workload) / (
            f"rep{key.repetition}.json")

    def failed_path(self, key: ResultKey) -> Path:
        return self.result_path(key).with_name(f"rep{key.repetition}.failed.json")

    def write_result(self, record: BenchmarkRecord) -> Path:
        """Write a result (with the checksum of its content) and drop an older failure
        marker of the same benchmark."""
        path = write_json_atomic(self.result_path(record.key),
                                 with_checksum(json_safe(record.to_dict())))
        with contextlib.suppress(FileNotFoundError):
            self.failed_path(record.key).unlink()
        return path

    def write_failure(self, record: FailureRecord) -> Path:
        """Write a failure marker; never touches an existing result of that benchmark."""
        if self.is_completed(record.key):  # a tampered or unreadable one is not finished
            raise FileExistsError(
                f"{self.result_path(record.key)} exists: a finished result is never "
                f"replaced by a failure")
        return write_json_atomic(self.failed_path(record.key), json_safe(record.to_dict()))

    def scan(self) -> Iterable[tuple[ResultKey, bool, Path]]:
        """Every bench file of the run, in path order: its key, whether it is a failure
        marker, its path (nothing is read)."""
        run = self.run_dir
        if not run.is_dir():
            return
        for path in sorted(run.glob("*/*/*/rep*.json")):
            m = _REP_FILE.match(path.name)
            if not m:
                continue
            workload_dir = path.parent
            key = ResultKey(host=workload_dir.parent.parent.name,
                            configuration=workload_dir.parent.name,
                            workload=workload_dir.name, repetition=int(m.group(1)))
            yield key, m.group(2) is not None, path

    def _records(self) -> Iterable[BenchmarkRecord]:
        for _key, failed, path in self.scan():
            if failed:
                continue
            try:
                yield BenchmarkRecord.from_dict(
                    json.loads(path.read_text(encoding="utf-8")), str(path))
            except (OSError, ValueError):
                continue  # unreadable or foreign: not done, a rerun rewrites it

    def is_completed(self, key: ResultKey) -> bool:
        """Whether ``key`` has a readable result file of this schema: :meth:`completed`
        for one benchmark, reading that one file only (not the whole run)."""
        path = self.result_path(key)
        try:
            BenchmarkRecord.from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))
        except (OSError, ValueError):
            return False
        return True

    def completed(self) -> set[ResultKey]:
        """Benchmarks with a readable result file of this schema (what a rerun skips)."""
        return {rec.key for rec in self._records()}

    def failures(self) -> dict[ResultKey, Path]:
        """Failure markers of benchmarks that have no result."""
        done = self.completed()
        return {key: path for key, failed, path in self.scan() if failed and key not in done}

    def missing(self, planned: Sequence[ResultKey]) -> list[ResultKey]:
        """The planned benchmarks still to run, in plan order."""
        done = self.completed()
        return [k for k in planned if k not in done]

    def load_results(self) -> list[BenchmarkRecord]:
        """Every readable result of the run, in path order (unreadable ones are missing)."""
        return list(self._records())

    def stale_temp_files(self) -> list[Path]:
        """Temporary files left by writes interrupted by a crash (safe to delete)."""
        run = self.run_dir
        return sorted(run.rglob(".*.tmp")) if run.is_dir() else []
