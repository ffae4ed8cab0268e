"""The run plan that preflight prints: what will run where, before anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixbench.bench import calibration, criteria, experiment
from prefixbench.config import modelfit
from prefixbench.config.settings import warnings_of
from prefixbench.config.workload_estimate import estimate, expected_lines, sends_line, sizing_of
from prefixbench.hosts import efa, releases
from prefixbench.servers import sandbox

#: The tutorial's workloads, in its order, used when the inventory names none.
TUTORIAL_WORKLOAD_NAMES = ("high_overlap", "no_overlap", "sustained_c4")


@dataclass(frozen=True)
class HostPlan:
    """What one host will do."""

    host: str
    instance_type: str
    platform: str
    configurations: tuple[str, ...]
    workloads: tuple[str, ...]
    repetitions: int
    #: Segment sizes of a sweep (empty: no sweep, one server pair).
    sweep: tuple[int, ...] = ()
    #: The model-weights fit check's line (empty where it does not apply).
    fit: str = ""
    #: KV capacities (blocks) of a capacity sweep: one cached server each.
    kv_sweep: tuple[int, ...] = ()
    #: Preflight's warnings about the host (no AWS recipe, a tight fit), one line each.
    warnings: tuple[str, ...] = ()
    #: The server unit's sandbox level on this host and why.
    sandbox: str = ""
    #: Which Neuron release the host will run, as far as the controller knows it.
    release: str = ""
    #: What an own venv gets of vLLM's GPU-only dependencies.
    gpu_only: str = ""
    #: Whether the host's EFA is read and what the units do without it.
    efa: str = ""
    #: The calibration bench's line (:mod:`prefixbench.bench.calibration`) and whether
    #: each baseline server runs it.
    calibration: str = ""
    calibrates: bool = False

    @property
    def benches(self) -> int:
        if self.kv_sweep:
            return len(self.kv_sweep) * len(self.workloads) * self.repetitions
        pairs = max(1, len(self.sweep))
        return pairs * (len(self.configurations) * len(self.workloads) * self.repetitions
                        + int(self.calibrates and "baseline" in self.configurations))


def host_plan(host: str, settings: Mapping[str, Any]) -> HostPlan:
    """Build one host's plan from its validated settings."""
    try:
        items = experiment.bench_items(settings)
        workloads = tuple(dict.fromkeys(i.workload.name for i in items))
    except (ValueError, KeyError, TypeError):
        workloads = ()
    return HostPlan(
        host=host,
        instance_type=str(settings.get("prefixbench_instance_type", "?")),
        platform=str(settings.get("prefixbench_platform", "?")),
        configurations=tuple(settings.get("prefixbench_configurations") or ()),
        workloads=workloads or TUTORIAL_WORKLOAD_NAMES,
        repetitions=int(settings.get("prefixbench_repetitions", 1)),
        sweep=tuple(int(v) for v in settings.get("prefixbench_sweep_segment_sizes") or ()),
        fit=modelfit.fit_line(settings) or "",
        kv_sweep=tuple(int(v) for v in settings.get("prefixbench_sweep_kv_blocks") or ()),
        warnings=tuple(warnings_of(settings)) if settings else (),
        sandbox=_sandbox_line(settings),
        release=release_line(settings) if settings else "",
        gpu_only=gpu_only_line(settings) if settings else "",
        efa=efa.plan_line(settings) if settings else "",
        **_calibration(settings),
    )


def _calibration(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The plan's calibration fields: its line, and whether it runs."""
    try:
        base = experiment.base_workloads(settings)
    except (ValueError, KeyError, TypeError):
        return {}
    return {"calibration": calibration.plan_line(settings, base),
            "calibrates": calibration.enabled(settings)}


def _sandbox_line(settings: Mapping[str, Any]) -> str:
    level = str(settings.get("vllm_service_sandbox") or sandbox.FIRST_START_LEVEL)
    if level not in sandbox.SANDBOX_LEVELS:
        return ""
    platform = str(settings.get("prefixbench_platform", "neuron"))
    name = str(settings.get("prefixbench_neuron_release", releases.AUTO))
    try:
        path = ("" if name == releases.AUTO or platform != "neuron" else
                sandbox.library_path(platform, releases.load_release(name).library_path))
    except (releases.ReleaseError, ValueError):
        path = ""  # the release line says what is wrong with the release
    return sandbox.level_line(level, platform, path)


def release_line(settings: Mapping[str, Any]) -> str:
    """The host's Neuron release as the plan knows it before any host is read."""
    name = str(settings.get("prefixbench_neuron_release", releases.AUTO))
    try:
        if name == releases.AUTO:
            rels = releases.load_all()
            rel = releases.newest(releases.installable(rels))
            later = "; ".join(f"{r.release} lacks published {', '.join(r.unknown())}"
                              for r in rels if r.order > rel.order)
            return (f"Neuron release: auto - read from the host (a host on a release "
                    f"newer than any this bundle knows is read from the host and used as "
                    f"it is; a bare host gets {rel.label()}, the newest the bundle can "
                    f"install from published facts{': ' + later if later else ''}); "
                    "never moved down")
        rel = releases.load_release(name)
    except releases.ReleaseError as exc:
        return f"Neuron release: {exc}"
    return (f"Neuron release: {rel.label()} on a bare host; a host on another release "
            "moves up to it only with neuron_sdk_allow_upgrade, never down")


def gpu_only_line(settings: Mapping[str, Any]) -> str:
    """What a host that builds its own vLLM venv on Neuron gets of vLLM's GPU-only
    dependencies (the release a bare host gets: the named one, or the newest)."""
    if (settings.get("prefixbench_platform", "neuron") != "neuron"
            or settings.get("vllm_env_requirements_url")):
        return ""
    name = str(settings.get("prefixbench_neuron_release", releases.AUTO))
    try:
        rel = (releases.newest(releases.installable(releases.load_all()))
               if name == releases.AUTO
               else releases.load_release(name))
    except releases.ReleaseError:
        return ""
    if not rel.gpu_only:
        return ""
    shown = ", ".join(f"{n} {v}" for n, v in sorted(rel.gpu_only.items()))
    what = (f"vLLM {rel.vllm}'s GPU-only dependencies ({len(rel.gpu_only)} distributions, "
            f"{rel.gpu_only_mb / 1000:.1f} GB to download: {shown})")
    if str(settings.get("vllm_env_gpu_wheels", "allow")) == "refuse":
        return (f"own venv on {rel.release}: {what} are refused (vllm_env_gpu_wheels: "
                "refuse): a host that builds its own venv stops before installing")
    return (f"own venv on {rel.release}: installs {what}, as AWS's image does "
            "(vllm_env_gpu_wheels: refuse to stop instead); an adopted DLAMI venv "
            "installs nothing")


def workload_lines(settings: Mapping[str, Any]) -> list[str]:
    """Per workload its shape and the tutorial's expected hit ratio; for prefix_repetition
    what the bench sends and the hit ratio the bundle's cache model expects of it on this
    server (:mod:`prefixbench.config.workload_estimate`); then which workload serves
    each of the tutorial's confirmation criteria. The warnings about the workloads are the
    host's (:mod:`prefixbench.config.rules_workload`)."""
    lines = []
    workloads = experiment.workloads_of(settings)
    sizing = sizing_of(settings)
    for w in workloads:
        rate = "inf" if w.request_rate == float("inf") else f"{w.request_rate:g}/s"
        if w.is_custom:
            out = "per line" if w.custom_output_len == -1 else str(w.custom_output_len)
            lines.append(
                f"workload {w.name}: your prompts from {w.dataset_path}, "
                f"{w.num_prompts or 'all'} prompts, out {out}, "
                f"c={w.max_concurrency or 'unbounded'}, rate {rate}; expected hit ratio "
                f"predicted after the run (prefixbench whatif)")
            continue
        lines += [
            f"workload {w.name}: prefix {w.prefix_repetition_prefix_len} + suffix "
            f"{w.prefix_repetition_suffix_len}, {w.prefix_repetition_num_prefixes} prefixes, "
            f"{w.num_prompts} prompts, out {w.prefix_repetition_output_len}, "
            f"c={w.max_concurrency or 'unbounded'}, rate {rate}; the tutorial's expected hit "
            f"ratio {w.tutorial_ratio() * 100:.1f}% (before block alignment)",
            sends_line(w), *expected_lines(w, sizing, estimate(w, sizing))]
    return lines + criteria.assign(workloads).lines()


def calibration_bench(p: HostPlan) -> str:
    """`` + calibration`` when the host's baseline servers run the calibration bench."""
    return " + calibration" if p.calibrates and "baseline" in p.configurations else ""


def render(plans: Sequence[HostPlan]) -> list[str]:
    """The plan as lines for the console: one per host (and its model-fit line and
    warnings), then the total."""
    if not plans:
        return ["plan: no hosts matched - check the inventory and --limit"]
    lines = []
    for p in sorted(plans, key=lambda p: p.host):
        sweep = (f"segment sizes [{', '.join(str(v) for v in p.sweep)}] x "
                 if p.sweep else "")
        configurations = ' -> '.join(p.configurations)
        if p.kv_sweep:
            sweep = f"KV blocks [{', '.join(str(v) for v in p.kv_sweep)}] x "
            configurations = "cached"
        lines.append(
            f"{p.host} ({p.instance_type}, {p.platform}): {sweep}"
            f"{configurations} x [{', '.join(p.workloads)}] "
            f"x {p.repetitions} rep{calibration_bench(p)} = {p.benches} benches")
        if p.fit:
            lines.append(f"  {p.fit}")
        lines.extend(f"  WARNING: {w}" for w in p.warnings)
        if p.sandbox:
            lines.append(f"  {p.sandbox}")
        if p.release:
            lines.append(f"  {p.release}")
        if p.gpu_only:
            lines.append(f"  {p.gpu_only}")
        if p.efa:
            lines.append(f"  {p.efa}")
        if p.calibration:
            lines.append(f"  {p.calibration}")
    total = sum(p.benches for p in plans)
    lines.append(f"total: {len(plans)} hosts, {total} benches")
    return lines
