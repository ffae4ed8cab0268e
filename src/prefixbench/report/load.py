"""Read a run directory: its run.json, result records, failure markers and fingerprints.

Input is the run directory contract of the benchmark phase (``run.json``,
``<host>/fingerprint.json``, ``<host>/<configuration>/<workload>/rep<k>[.failed].json``).
:func:`load_run` parses it into :class:`RunData` (unreadable files become warnings);
:func:`failure_info` and :func:`dropped_hosts` turn its failure markers, and the hosts
that left no result at all, into the :class:`~prefixbench.report.model.FailureInfo`
the report lists. Nothing here writes files; :mod:`prefixbench.report.write` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixbench.bench.calibration import is_calibration
from prefixbench.engines.workloads import Workload, WorkloadError
from prefixbench.hosts.fingerprint import Fingerprint, FingerprintError
from prefixbench.measure.bench_json import BenchResultError
from prefixbench.measure.layout import FINGERPRINT, RunLayout
from prefixbench.measure.records import NO_CHECKSUM, BenchmarkRecord, FailureRecord
from prefixbench.report.model import FailureInfo

__all__ = ["ReportInputError", "RunData", "dropped_hosts", "failure_info", "load_run"]



class ReportInputError(ValueError):
    """The run directory cannot be reported on; the message says why, in one line."""


@dataclass
class RunData:
    """What a run directory holds, parsed."""

    run_dir: Path
    run: dict[str, Any]
    records: list[BenchmarkRecord] = field(default_factory=list)
    failures: list[tuple[FailureRecord, Path]] = field(default_factory=list)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: Result files that exist but cannot be trusted (edited after they were written:
    #: checksum mismatch; no checksum; truncated; foreign): each is a bench without a
    #: result.
    rejected: list[FailureInfo] = field(default_factory=list)
    #: Results used without a checksum (``accept_unchecksummed``), relative paths: the
    #: report warns that their figures cannot be shown unedited.
    unchecksummed: list[str] = field(default_factory=list)
    #: The calibration benches' records (:mod:`prefixbench.bench.calibration`), kept out
    #: of ``records``: no table, verdict or fleet check counts them; the TTFT fit reads
    #: them. A calibration bench without a result is a warning, not a failure.
    calibration: list[BenchmarkRecord] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.run.get("run_id") or self.run_dir.name)

    @property
    def hosts(self) -> list[str]:
        named = [str(h) for h in self.run.get("hosts") or []]
        seen = {r.key.host for r in self.records} | {f.key.host for f, _ in self.failures}
        return named + sorted(seen - set(named))

    def workloads(self) -> dict[str, Workload]:
        out: dict[str, Workload] = {}
        for item in self.run.get("workloads") or []:
            try:
                w = Workload.from_dict(item)
            except (WorkloadError, TypeError, AttributeError):
                continue
            out[w.name] = w
        return out


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load_run(run_dir: str | Path, *, accept_unchecksummed: bool = False) -> RunData:
    """Parse a run directory; unreadable files become warnings, not errors. A result
    without a checksum is rejected unless ``accept_unchecksummed`` (a run of an older
    version, read knowingly): then it is used, and listed in ``unchecksummed``."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ReportInputError(f"{root}: not a directory (expected results/<run_id>)")
    run: dict[str, Any] = {}
    warnings: list[str] = []
    layout = RunLayout.of(root)
    run_json = layout.meta_path
    if run_json.exists():
        try:
            loaded = _read_json(run_json)
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"{run_json}: unreadable ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ReportInputError(f"{run_json}: not a JSON object")
        run = loaded
        if run.get("schema_version", 1) != 1:
            raise ReportInputError(
                f"{run_json}: schema_version {run.get('schema_version')!r} is not 1")
    data = RunData(run_dir=root, run=run, warnings=warnings)
    for key, failed, path in layout.scan():
        try:
            raw = _read_json(path)
            if failed:
                data.failures.append((FailureRecord.from_dict(raw, str(path)), path))
            else:
                rec = BenchmarkRecord.from_dict(raw, str(path),
                                                accept_unchecksummed=accept_unchecksummed)
                data.records.append(rec)
                if not rec.checksummed:
                    data.unchecksummed.append(str(path.relative_to(root)))
        except (OSError, json.JSONDecodeError, BenchResultError, ValueError) as exc:
            warnings.append(f"{path.relative_to(root)}: skipped, unreadable ({exc})")
            if not failed:
                data.rejected.append(_rejected(path, root, key.repetition, exc))
    if data.unchecksummed:
        warnings.append(f"{len(data.unchecksummed)} result(s) used without a checksum "
                        f"(--accept-unchecksummed): {', '.join(data.unchecksummed)}")
    _set_calibration_apart(data)
    done = {r.key for r in data.records}
    data.rejected = [f for f in data.rejected if not any(
        f.host == k.host and f.configuration == k.configuration and f.workload == k.workload
        and f.repetition == k.repetition for k in done)]
    data.failures = [(f, p) for f, p in data.failures if f.key not in done]
    for host_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        fp_path = host_dir / FINGERPRINT
        if not fp_path.exists():
            continue
        try:
            fp = Fingerprint.from_dict(_read_json(fp_path), str(fp_path))
        except (OSError, json.JSONDecodeError, FingerprintError) as exc:
            warnings.append(f"{fp_path.relative_to(root)}: skipped ({exc})")
            continue
        data.fingerprints[fp.host] = fp
    if not data.records and not data.failures and not run:
        raise ReportInputError(
            f"{root}: no run.json and no result files: is this a run directory "
            f"(results/<run_id>)?")
    if not run_json.exists():
        data.run = rebuild_run(root.name, data.records, data.failures)
        warnings.append(rebuilt_line(data.run, len(data.records), len(data.failures)))
    return data


def _set_calibration_apart(data: RunData) -> None:
    """Move the calibration benches out of the records, failures and rejected results
    (a failed or rejected one becomes one warning line)."""
    data.calibration = [r for r in data.records if is_calibration(r.key.workload)]
    data.records = [r for r in data.records if not is_calibration(r.key.workload)]
    done = {r.key for r in data.calibration}
    missing = [(f.key.host, f.error) for f, _ in data.failures
               if is_calibration(f.key.workload) and f.key not in done]
    missing += [(f.host, f.error) for f in data.rejected
                if is_calibration(f.workload) and f.host not in {k.host for k in done}]
    data.failures = [(f, p) for f, p in data.failures if not is_calibration(f.key.workload)]
    data.rejected = [f for f in data.rejected if not is_calibration(f.workload)]
    data.warnings += [f"{host}: the calibration bench has no result ({error}); the TTFT fit "
                      f"uses the tutorial's benches alone; a rerun with the same run id "
                      f"runs it again only beside a baseline bench left to run, a new run "
                      f"always" for host, error in missing]


def rebuild_run(run_id: str, records: list[BenchmarkRecord],
                failures: list[tuple[FailureRecord, Path]]) -> dict[str, Any]:
    """What the report needs of a missing ``run.json``, rebuilt from the records: the
    hosts, configurations and repetitions their keys name, and each workload's parameters
    from the first record that carries them (every record keeps its workload's
    ``Workload.to_dict``). The times and the inventory are unknown and stay absent."""
    keys = [r.key for r in records] + [f.key for f, _ in failures]
    workloads: dict[str, dict[str, Any]] = {}
    for rec in sorted(records, key=lambda r: (r.key.workload, r.key.host, r.key.repetition)):
        if rec.key.workload not in workloads and rec.workload:
            workloads[rec.key.workload] = dict(rec.workload)
    return {"schema_version": 1, "run_id": run_id, "rebuilt_from_records": True,
            "hosts": sorted({k.host for k in keys}),
            "configurations": sorted({k.configuration for k in keys}),
            "workloads": list(workloads.values()),
            "repetitions": max((k.repetition for k in keys), default=1)}


def rebuilt_line(run: dict[str, Any], records: int, failures: int) -> str:
    """The warning that says what a missing ``run.json`` was rebuilt from."""
    names = [str(w.get("name")) for w in run.get("workloads") or []]
    return (f"run.json is missing: rebuilt from {records} result record(s) and "
            f"{failures} failure marker(s): hosts {', '.join(run['hosts']) or 'none'}; "
            f"workloads {', '.join(names) or 'none'} (their parameters as each record "
            f"kept them); configurations {', '.join(run['configurations']) or 'none'}; "
            f"{run['repetitions']} repetition(s); start and end times unknown")


# -- failures ------------------------------------------------------------------------------

def failure_info(rec: FailureRecord, path: Path, root: Path) -> FailureInfo:
    """One failure marker as the report lists it: its error, and the last 20 lines of
    its stderr and journal tail."""
    tail = rec.journal_tail or ""
    extra_tail = rec.extra.get("journal_tail") if rec.extra else None
    if not tail and isinstance(extra_tail, list):
        tail = "\n".join(str(x) for x in extra_tail)
    elif not tail and isinstance(extra_tail, str):
        tail = extra_tail
    if rec.stderr:
        tail = (rec.stderr.strip() + ("\n" + tail if tail else "")).strip()
    lines = tail.splitlines()[-20:]
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    return FailureInfo(host=rec.key.host, configuration=rec.key.configuration,
                       workload=rec.key.workload, repetition=rec.key.repetition,
                       error=rec.error, returncode=rec.returncode, path=rel,
                       log_tail="\n".join(lines))


def _rejected(path: Path, root: Path, repetition: int, exc: Exception) -> FailureInfo:
    """A result file that is there but not trusted, as a failure of its bench."""
    workload_dir = path.parent
    if "checksum mismatch" in str(exc):
        reason = "checksum mismatch: edited after it was written"
    elif f": {NO_CHECKSUM}:" in str(exc):
        reason = (f"{NO_CHECKSUM}: it cannot be shown unedited (a run of an older version "
                  f"is read with --accept-unchecksummed)")
    else:
        reason = f"unreadable ({type(exc).__name__})"
    return FailureInfo(
        host=workload_dir.parent.parent.name, configuration=workload_dir.parent.name,
        workload=workload_dir.name, repetition=repetition,
        error=f"result rejected, {reason}; a rerun with the same run id measures it again",
        returncode=None, path=str(path.relative_to(root)), log_tail=str(exc)[-2000:])


def dropped_hosts(data: RunData) -> list[FailureInfo]:
    """A host the run started with that has neither a result nor a failure marker once
    the run has ended: it dropped out (unreachable, or failed before its first bench)."""
    if not data.run.get("ended_at"):
        return []  # still running: its benches may simply not have come yet
    seen = ({r.key.host for r in data.records} | {f.key.host for f, _ in data.failures}
            | {f.host for f in data.rejected})
    return [FailureInfo(host=h, configuration="-", workload="-", repetition=0,
                        error="no result at all from this host: it dropped out "
                              "(unreachable, or failed before its first bench)",
                        returncode=None, path="run.json", log_tail="")
            for h in (str(x) for x in data.run.get("hosts") or []) if h not in seen]
