"""Filters of the bundle: a name -> function map over the pure package, nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefixbench.bench import client_launch, experiment
from prefixbench.config import plan
from prefixbench.hosts import (
    collect,
    doctor,
    efa,
    host_read,
    provision,
    release_match,
    releases,
)
from prefixbench.measure.layout import RunLayout
from prefixbench.servers import compile_cache, sandbox, server, sweep, teardown


def prefixbench_plan(preflight_results: Sequence[Mapping[str, Any]],
                     hosts: Sequence[str]) -> list[str]:
    """Render the run plan from each host's registered preflight result."""
    lines = plan.render([plan.host_plan(h, r.get("settings", {}))
                         for h, r in zip(hosts, preflight_results, strict=True)])
    if preflight_results:
        lines += plan.workload_lines(preflight_results[0].get("settings", {}))
    return lines


def prefixbench_unit_spec(settings: Mapping[str, Any], configuration: str,
                          vllm_executable: str) -> dict[str, Any]:
    """Everything the unit template prints for one configuration."""
    if configuration not in server.CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}")
    conf: server.Configuration = "baseline" if configuration == "baseline" else "cached"
    return server.unit_spec(settings, conf, vllm_executable).as_dict()


def prefixbench_sandbox_proof_problem(settings: Mapping[str, Any], vllm_executable: str,
                                      proof_text: str = "") -> str:
    """Why the units' sandbox level may not be deployed on a host whose doctor proof is
    ``proof_text``; "" when it may (prefixbench.servers.sandbox.proof_problem)."""
    spec = server.unit_spec(settings, "cached", vllm_executable)
    return sandbox.proof_problem(spec.sandbox_level, spec.sandbox_lines(), proof_text or "")


def prefixbench_env_file(settings: Mapping[str, Any], api_key: str = "") -> str:
    """The root-only EnvironmentFile of both units (inventory environment, API key)."""
    return server.env_file_text(server.private_environment(settings, api_key or ""))


def prefixbench_api_key_ok(api_key: str) -> bool:
    """Whether an API key has the form the units and the bench can carry verbatim."""
    return bool(server.API_KEY_PATTERN.match(str(api_key)))


#: A release id, or a host's settings once its release is read (``releases.release_of``).
NameOrSettings = str | Mapping[str, Any]


def prefixbench_release(name: NameOrSettings, kernel: str = "") -> dict[str, Any]:
    """A release manifest as the neuron_sdk role uses it: pins, prerequisites, versions."""
    rel = releases.release_of(name)
    return {
        "release": rel.release,
        "apt_pins": rel.apt_pins(),
        "apt_packages": rel.known_apt(),
        "prerequisites": rel.prerequisites_for(kernel),
        "pip_packages": {k: v for k, v in rel.pip_packages.items() if v is not None},
        "pip_requirements": provision.pip_requirements(rel),
        "vllm": rel.vllm,
    }


def prefixbench_venv_probe_args(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The prefixbench_neuron_venvs module's arguments: AWS's DLAMI venv globs (with
    ``vllm_env_adopt_venv: auto``), else the venv the setting names (none when empty)."""
    return host_read.probe_arguments(releases.load_all(),
                                     str(settings.get("vllm_env_adopt_venv", releases.AUTO)))


def prefixbench_host_release(settings: Mapping[str, Any], host: str,
                             packages: Mapping[str, Any],
                             venv_probe: Mapping[str, Any]) -> dict[str, Any]:
    """The host's Neuron release read from its debs and the vLLM Neuron venvs found on it
    (the prefixbench_neuron_venvs module's result): ``{release, how, venv, refusal, note,
    read, unchecked, settings}`` (``settings``: what to merge into
    ``prefixbench_settings``; empty when refused)."""
    facts = host_read.facts_from_probe(venv_probe)
    found = release_match.checked(host, release_match.resolve(
        host, str(settings["prefixbench_neuron_release"]),
        provision.installed_versions(packages), facts.venvs,
        allow_upgrade=bool(settings.get("neuron_sdk_allow_upgrade")), facts=facts),
        settings)
    return {**found.as_dict(), "settings": release_match.settings_update(settings, found)}


def prefixbench_neuron_package_names(settings: Mapping[str, Any]) -> list[str]:
    """Every Neuron deb any known release pins (what teardown releases or removes,
    whichever release the host was on)."""
    del settings  # the same for every host: the names, not a release's versions
    return sorted({n for rel in releases.load_all() for n in rel.apt_packages})


def prefixbench_adoptable(probe: Mapping[str, Any], name: NameOrSettings) -> bool:
    """Whether a probed virtualenv's vllm-neuron version is the release's."""
    return provision.adoptable(releases.release_of(name), probe.get("rc"),
                               str(probe.get("stdout", "")))


def prefixbench_adoption_note(probe: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """Why the DLAMI's virtualenv is or is not adopted (empty when there is none)."""
    return provision.adoption_note(
        releases.for_settings(settings),
        str(settings.get("vllm_env_adopt_venv") or ""), probe.get("rc"),
        str(probe.get("stdout", "")), str(settings.get("vllm_env_venv") or ""))


def prefixbench_venv_packages(packages: list[str], python_version: str) -> list[str]:
    """``python3-venv`` as the package of the environment interpreter's own version."""
    return provision.venv_system_packages(packages, python_version)


def prefixbench_doctor_plan(settings: Mapping[str, Any], vllm_executable: str
                            ) -> dict[str, Any]:
    """What ``prefixbench doctor`` runs on a host, with the probe's source."""
    return {**doctor.plan(settings, vllm_executable),
            "script": doctor.PROBE_FILE.read_text(encoding="utf-8")}


def prefixbench_doctor_report(hostvars: Mapping[str, Any], hosts: Sequence[str]
                              ) -> dict[str, Any]:
    """One screen of the doctor's results for ``hosts``: ``{"text", "failed", "lines"}``.

    A host of the play without a result (unreachable, or failed before the probe) is a
    FAIL line of its own."""
    results: dict[str, Any] = {}
    types: dict[str, str] = {}
    for host in hosts:
        hv = hostvars[host]
        result = hv.get("prefixbench_doctor_result")
        results[host] = (result if isinstance(result, Mapping) and "checks" in result else
                         {"error": "no result: the host was unreachable or failed before "
                                   "the probe (see the play's output)"})
        types[host] = str((hv.get("prefixbench_settings") or {}).get(
            "prefixbench_instance_type", ""))
    report = doctor.report(results, types)
    return report


def prefixbench_os_refusal(name: NameOrSettings, distribution: str, version: str,
                           major_version: str = "") -> str:
    """Empty when the release supports the OS, else the sentence that refuses it."""
    return provision.os_refusal(releases.release_of(name), distribution, version,
                                major_version) or ""


def prefixbench_drift(name: NameOrSettings, packages: Mapping[str, Any], host: str) -> list[str]:
    """One line per pinned Neuron package installed at another version."""
    installed = provision.installed_versions(packages)
    return [d.line(host) for d in provision.drift(releases.release_of(name), installed)]


def prefixbench_missing_packages(name: NameOrSettings, packages: Mapping[str, Any]) -> list[str]:
    """Pinned Neuron packages that are not installed."""
    return provision.missing(releases.release_of(name), provision.installed_versions(packages))


def prefixbench_not_held(packages: Sequence[str], selections: str) -> list[str]:
    """The packages dpkg-query's selections do not show held."""
    return provision.not_held(list(packages), selections)


def prefixbench_device_problems(neuron_ls_json: str, instance_type: str) -> list[str]:
    """What neuron-ls sees against what the instance type has."""
    return provision.device_problems(instance_type, neuron_ls_json)


def prefixbench_bench_items(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The benches of one server, in order, each with its seed and label."""
    return [item.as_dict() for item in experiment.bench_items(settings)]


def prefixbench_pip_args(settings: Mapping[str, Any], no_deps: bool = False) -> str:
    """pip's index options for the vLLM environment (each value is a validated URL/host)."""
    return " ".join(provision.pip_index_args(settings, no_deps=no_deps))


def prefixbench_pip_plan(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The one pip install of the vLLM environment: requirements, file and pip options."""
    return provision.pip_install_plan(releases.for_settings(settings), settings)


def prefixbench_python_problem(name: NameOrSettings, host: str, facts: Mapping[str, Any],
                               python: str, python_version: str) -> list[str]:
    """[] when the vLLM environment's interpreter can run the release's wheels, else one line."""
    line = provision.python_problem(releases.release_of(name), host, facts, python,
                                    python_version)
    return [line] if line else []


def prefixbench_tiktoken_downloads(settings: Mapping[str, Any]) -> list[dict[str, str]]:
    """The vocabulary files the server reads at start-up: name, URL, published sha256."""
    from prefixbench.engines import tokenizer_vocab  # noqa: PLC0415 - only this filter needs it

    files = tokenizer_vocab.expected_sha256(settings["model_cache_tiktoken_files"])
    base = str(settings["model_cache_tiktoken_base_url"])
    return [{"name": f, "url": tokenizer_vocab.download_url(base, f), "sha256": h}
            for f, h in files.items()]


def prefixbench_hf_download_argv(settings: Mapping[str, Any], hf: str) -> list[str]:
    """The model's ``hf download`` command: only the files vLLM loads."""
    return provision.hf_download_argv(settings, hf)


def prefixbench_gate(shown: Mapping[str, Any], fail_on: Sequence[str]) -> str:
    """Why the report phase must fail (prefixbench_fail_on), in one line; "" when not."""
    from prefixbench.report.phase import gate  # noqa: PLC0415 - the report phase only

    return gate(dict(shown), list(fail_on))


def prefixbench_teardown_paths(settings: Mapping[str, Any], role: str) -> list[str]:
    """The directories teardown removes for ``role`` (never a system directory): the
    vllm_service role's from prefixbench.servers.teardown, the others' from
    prefixbench.hosts.provision."""
    if role == "vllm_service":
        return teardown.paths(settings)
    return provision.teardown_paths(settings)[role]


def prefixbench_pending_items(settings: Mapping[str, Any], run_dir: str, host: str,
                              configuration: str) -> list[dict[str, Any]]:
    """The benches of one server not yet in the run directory (what a resume runs)."""
    return [item.as_dict() for item in
            experiment.pending_items(settings, Path(run_dir), host, configuration)]


def prefixbench_calibration_skipped(settings: Mapping[str, Any], run_dir: str, host: str,
                                    configuration: str) -> str:
    """The line when a resume leaves the calibration bench out ("" when it does not)."""
    return experiment.calibration_skip_line(settings, Path(run_dir), host, configuration)


def prefixbench_bench_client(vllm_executable: str, configuration: str) -> dict[str, str]:
    """The preloaded bench client of a configuration's server: unit, socket, script."""
    return client_launch.plan(vllm_executable, configuration)


def prefixbench_bench_client_plan(configuration: str) -> dict[str, str]:
    """The preloaded bench client's unit and socket alone (stopping needs no venv)."""
    return client_launch.plan("", configuration)


def prefixbench_unit_name(configuration: str) -> str:
    """The systemd unit of a configuration (``vllm-<configuration>.service``)."""
    if configuration not in server.CONFIGURATIONS:
        raise ValueError(f"unknown configuration {configuration!r}")
    return server.unit_name("baseline" if configuration == "baseline" else "cached")


def prefixbench_run_files(run_dir: str, host: str, configuration: str = "") -> dict[str, str]:
    """Where a host's tasks write into the run directory (its one owner: RunLayout)."""
    return RunLayout.of(run_dir).files(host, configuration)


def prefixbench_fingerprint(host: str, settings: Mapping[str, Any],
                            raw: Mapping[str, Any]) -> dict[str, Any]:
    """The host's fingerprint.json content from the raw facts the tasks read."""
    return collect.fingerprint(host, settings, raw)


def prefixbench_host_problems(name: NameOrSettings, host: str, facts: Mapping[str, Any],
                              packages: Mapping[str, Any], allow_upgrade: bool) -> list[str]:
    """What must stop provisioning on a host: unsupported OS, version drift."""
    return provision.host_problems(releases.release_of(name), host, facts, packages,
                                   bool(allow_upgrade))


def prefixbench_sweeping(settings: Mapping[str, Any]) -> bool:
    """Whether the settings run a sweep (segment sizes or KV capacities)."""
    return bool(settings.get("prefixbench_sweep_segment_sizes")
                or settings.get("prefixbench_sweep_kv_blocks"))


def prefixbench_sweep_points(settings: Mapping[str, Any], run_dir: str) -> list[dict[str, Any]]:
    """The segment-size sweep's points: name, size, run directory and settings."""
    return [point.as_dict(run_dir) for point in sweep.points(settings)]


def prefixbench_compile_key(fingerprint: Mapping[str, Any], venv_versions: str,
                            settings: Mapping[str, Any], configuration: str) -> dict[str, Any]:
    """The compile key of ``configuration`` on a host: ``{"key", "material", "dir"}``, or
    ``{"key": None, "why", "dir"}`` when the host cannot share (sharing off, or its
    fingerprint lacks what the key needs)."""
    directory = compile_cache.cache_dir(settings)
    if not settings.get("prefixbench_compile_cache", True):
        return {"key": None, "why": "prefixbench_compile_cache is off", "dir": directory}
    try:
        versions = json.loads(venv_versions or "{}")
        material = compile_cache.key_material(fingerprint, versions, settings, configuration)
    except (ValueError, TypeError) as exc:
        return {"key": None, "why": str(exc), "dir": directory}
    return {"key": compile_cache.compile_key(material), "material": material,
            "dir": directory}


def prefixbench_fingerprint_distributions(settings: Mapping[str, Any]) -> list[str]:
    """The venv distributions the fingerprint task reads: the compile key's on the
    host's release, and the fingerprint's own (compile_cache.read_distributions)."""
    return compile_cache.read_distributions(settings)


def prefixbench_compile_role(key: str | None, stored: bool, local: bool, won: bool, *,
                             cold: str = "wait") -> str:
    """A host's part in sharing one configuration's graphs: restore, leader, follower,
    self or off (prefixbench.servers.compile_cache.role)."""
    return compile_cache.role(key, stored=bool(stored), local=bool(local), won=bool(won),
                              cold=cold)


def prefixbench_compile_deadline(now: float, settings: Mapping[str, Any]) -> float:
    """When a follower stops waiting (prefixbench.servers.compile_cache.follower_deadline)."""
    return compile_cache.follower_deadline(float(now), settings)


def prefixbench_compile_store(settings: Mapping[str, Any], default_dir: str,
                              host_python: str = "/usr/bin/python3") -> dict[str, Any]:
    """Where the shared graphs live and how the hosts reach them
    (prefixbench.servers.compile_cache.store_of)."""
    return compile_cache.store_of(settings, default_dir, host_python)


def prefixbench_host_efa(settings: Mapping[str, Any], result: Mapping[str, Any]
                         ) -> dict[str, Any]:
    """The host's EFA as read (module prefixbench_host_efa): ``{settings, note}``, the
    settings to merge into ``prefixbench_settings`` (prefixbench.hosts.efa)."""
    update = efa.settings_update(settings, result or {})
    return {"settings": update, "note": efa.note({**settings, **update}, result or None)}


class FilterModule:
    """Expose the filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "prefixbench_plan": prefixbench_plan,
            "prefixbench_unit_spec": prefixbench_unit_spec,
            "prefixbench_host_efa": prefixbench_host_efa,
            "prefixbench_fingerprint_distributions": prefixbench_fingerprint_distributions,
            "prefixbench_env_file": prefixbench_env_file,
            "prefixbench_sandbox_proof_problem": prefixbench_sandbox_proof_problem,
            "prefixbench_api_key_ok": prefixbench_api_key_ok,
            "prefixbench_bench_items": prefixbench_bench_items,
            "prefixbench_pending_items": prefixbench_pending_items,
            "prefixbench_calibration_skipped": prefixbench_calibration_skipped,
            "prefixbench_sweep_points": prefixbench_sweep_points,
            "prefixbench_sweeping": prefixbench_sweeping,
            "prefixbench_fingerprint": prefixbench_fingerprint,
            "prefixbench_run_files": prefixbench_run_files,
            "prefixbench_unit_name": prefixbench_unit_name,
            "prefixbench_bench_client": prefixbench_bench_client,
            "prefixbench_bench_client_plan": prefixbench_bench_client_plan,
            "prefixbench_compile_key": prefixbench_compile_key,
            "prefixbench_compile_role": prefixbench_compile_role,
            "prefixbench_compile_deadline": prefixbench_compile_deadline,
            "prefixbench_compile_store": prefixbench_compile_store,
            "prefixbench_pip_args": prefixbench_pip_args,
            "prefixbench_pip_plan": prefixbench_pip_plan,
            "prefixbench_gate": prefixbench_gate,
            "prefixbench_teardown_paths": prefixbench_teardown_paths,
            "prefixbench_python_problem": prefixbench_python_problem,
            "prefixbench_hf_download_argv": prefixbench_hf_download_argv,
            "prefixbench_tiktoken_downloads": prefixbench_tiktoken_downloads,
            "prefixbench_release": prefixbench_release,
            "prefixbench_adoptable": prefixbench_adoptable,
            "prefixbench_venv_probe_args": prefixbench_venv_probe_args,
            "prefixbench_host_release": prefixbench_host_release,
            "prefixbench_neuron_package_names": prefixbench_neuron_package_names,
            "prefixbench_adoption_note": prefixbench_adoption_note,
            "prefixbench_doctor_plan": prefixbench_doctor_plan,
            "prefixbench_doctor_report": prefixbench_doctor_report,
            "prefixbench_venv_packages": prefixbench_venv_packages,
            "prefixbench_os_refusal": prefixbench_os_refusal,
            "prefixbench_drift": prefixbench_drift,
            "prefixbench_host_problems": prefixbench_host_problems,
            "prefixbench_missing_packages": prefixbench_missing_packages,
            "prefixbench_device_problems": prefixbench_device_problems,
            "prefixbench_not_held": prefixbench_not_held,
        }
