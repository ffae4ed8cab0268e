"""The experiment of one host, as data: which benches run, in which order, with which seed.

Per configuration, the server runs every workload once per repetition, repetition by
repetition. Seeds come from :func:`prefixbench.bench.seeds.plan_seeds`: distinct for every
(workload, repetition) on one server, so no run can be served from cache entries left
by an earlier one (the isolation method), and the same on both configurations, so the
baseline and cached runs of a workload see identical prompts (paired). The baseline
server then runs the calibration bench (:mod:`prefixbench.bench.calibration`), unless
``prefixbench_calibration`` is false: :func:`server_items`. On resume it runs only beside
a tutorial bench of that server: the baseline server is never started for it alone
(:func:`pending_items`, :func:`calibration_skip_line`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixbench.bench import calibration, goodput
from prefixbench.bench.seeds import plan_seeds
from prefixbench.engines.workloads import Workload, load_workloads, tutorial_workloads
from prefixbench.measure.layout import RunLayout
from prefixbench.measure.records import ResultKey


def base_workloads(settings: Mapping[str, Any]) -> list[Workload]:
    """The inventory's workloads, or the tutorial's three."""
    declared = settings.get("prefixbench_workloads") or []
    return load_workloads(declared) if declared else tutorial_workloads()


def ladder_of(settings: Mapping[str, Any]) -> goodput.Ladder | None:
    """The run's goodput ladder (:mod:`prefixbench.bench.goodput`), ``None`` when off."""
    return goodput.ladder_of(settings, base_workloads(settings))


def workloads_of(settings: Mapping[str, Any]) -> list[Workload]:
    """The workloads a host runs: :func:`base_workloads`, then the goodput ladder's rungs
    when it is on."""
    base = base_workloads(settings)
    ladder = goodput.ladder_of(settings, base)
    return base if ladder is None else [*base, *goodput.rungs(ladder, base)]


@dataclass(frozen=True)
class BenchItem:
    """One bench of a server: the workload (with its seed), its repetition, its place."""

    workload: Workload
    repetition: int
    index: int
    total: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.total} {self.workload.name} rep{self.repetition}"

    def as_dict(self) -> dict[str, Any]:
        """What the role's loop needs: the workload's name (the bench action resolves it
        from the settings again), repetition, seed and label."""
        return {"name": self.workload.name, "repetition": self.repetition,
                "seed": self.workload.seed, "index": self.index, "total": self.total,
                "label": self.label}


def bench_items(settings: Mapping[str, Any]) -> list[BenchItem]:
    """The benches of one server, in order; identical for both configurations."""
    workloads = workloads_of(settings)
    reps = int(settings.get("prefixbench_repetitions", 1))
    plan = plan_seeds(workloads, reps, int(settings.get("prefixbench_base_seed", 1000)))
    sequence = plan.sequence(workloads, reps)
    total = len(sequence)
    out = []
    for i, workload in enumerate(sequence, start=1):
        rep = (i - 1) // len(workloads) + 1
        out.append(BenchItem(workload=workload, repetition=rep, index=i, total=total))
    return out


def server_items(settings: Mapping[str, Any], configuration: str) -> list[BenchItem]:
    """The benches of ``configuration``'s server, in order: :func:`bench_items`, then on
    the baseline server the calibration bench when it is on (last: after the tutorial's
    benches, before the servers switch)."""
    items = bench_items(settings)
    if configuration != "baseline" or not calibration.enabled(settings):
        return items
    total = len(items) + 1
    renumbered = [BenchItem(i.workload, i.repetition, i.index, total) for i in items]
    workload = calibration.calibration_workload(settings, base_workloads(settings))
    return [*renumbered, BenchItem(workload=workload, repetition=1, index=total,
                                   total=total)]


def _without_result(settings: Mapping[str, Any], run_dir: Path, host: str,
                    configuration: str) -> list[BenchItem]:
    layout = RunLayout.of(run_dir)
    return [item for item in server_items(settings, configuration)
            if not layout.is_completed(ResultKey(
                host=host, configuration=configuration, workload=item.workload.name,
                repetition=item.repetition))]


def _calibration_alone(items: list[BenchItem]) -> bool:
    """Whether the calibration bench is all a server has left to run."""
    return len(items) == 1 and calibration.is_calibration(items[0].workload.name)


def pending_items(settings: Mapping[str, Any], run_dir: Path, host: str,
                  configuration: str) -> list[BenchItem]:
    """The benches of one server that have no result in the run directory yet (resume).
    Reads only this server's own result files, so a fleet's hosts asking at once cost
    hosts x benches reads, not hosts x the whole run.

    The calibration bench runs only while its baseline server has a tutorial bench left:
    that server starts anyway, and the bench costs it seconds. When it is all that is left
    (a run begun before the bench existed, resumed, or one whose calibration bench alone
    has no result), the server is not started for it: nothing is pending, and
    :func:`calibration_skip_line` says so."""
    items = _without_result(settings, run_dir, host, configuration)
    return [] if _calibration_alone(items) else items


def calibration_skip_line(settings: Mapping[str, Any], run_dir: Path, host: str,
                          configuration: str) -> str:
    """The one line when :func:`pending_items` leaves the calibration bench out of this
    server's resume; "" when it does not."""
    if _calibration_alone(_without_result(settings, run_dir, host, configuration)):
        return calibration.skipped_line(host)
    return ""


def find_item(settings: Mapping[str, Any], workload: str, repetition: int,
              configuration: str = "cached") -> BenchItem:
    """The bench ``workload`` / ``repetition`` of ``configuration``'s server in the
    settings' plan (with its seed); ``ValueError`` names what the settings do define."""
    items = server_items(settings, configuration)
    for item in items:
        if item.workload.name == workload and item.repetition == repetition:
            return item
    names = sorted({i.workload.name for i in items})
    reps = max((i.repetition for i in items), default=0)
    raise ValueError(f"no bench {workload!r} rep{repetition} in this host's settings "
                     f"(workloads {', '.join(names) or 'none'}; repetitions 1-{reps})")
