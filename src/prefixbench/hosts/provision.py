"""Pure checks of the provision phase: supported OS, package drift, devices seen."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prefixbench.hosts import instances
from prefixbench.hosts.releases import Release, upstream_version, version_matches


def os_refusal(release: Release, distribution: str, version: str,
               major_version: str = "") -> str | None:
    """None when the release supports this OS, else one sentence saying what to do.

    Ubuntu is matched by its full version ("24.04"), Debian by its major one ("12" for
    a 12.15 point release).
    """
    name = f"{distribution} {version}"
    if name in release.os_support or f"{distribution} {major_version}" in release.os_support:
        return None
    supported = ", ".join(sorted(release.os_support))
    return (f"{name} is not supported by Neuron SDK {release.release} in this bundle "
            f"(supported: {supported}); use one of those images, nothing was changed")


@dataclass(frozen=True)
class Drift:
    """A Neuron package installed at another version than the release pins."""

    package: str
    found: str
    wanted: str

    def line(self, host: str) -> str:
        return (f"{host}: {self.package} is {upstream_version(self.found)}, "
                f"Neuron SDK wants {self.wanted}")


def installed_versions(package_facts: Mapping[str, Sequence[Mapping[str, Any]]]
                       ) -> dict[str, str]:
    """``{name: version}`` from ``ansible_facts.packages`` (first entry of each name)."""
    out = {}
    for name, entries in package_facts.items():
        if entries:
            out[name] = str(entries[0].get("version", ""))
    return out


def drift(release: Release, installed: Mapping[str, str]) -> list[Drift]:
    """Pinned packages present at a different version (missing ones are not drift)."""
    out = []
    for name, wanted in release.known_apt().items():
        found = installed.get(name)
        if found is not None and not version_matches(found, wanted):
            out.append(Drift(name, found, wanted))
    return out


def missing(release: Release, installed: Mapping[str, str]) -> list[str]:
    """Pinned packages not installed at all."""
    return [name for name in release.known_apt() if name not in installed]


def not_held(packages: Sequence[str], selections: str) -> list[str]:
    """Which of ``packages`` dpkg does not yet hold, in their order.

    ``selections`` is ``dpkg-query --show --showformat='${Package} ${Status}\\n'``'s
    output: the first word of a Status is the package's selection (install, hold,
    deinstall, purge; dpkg-query(1)), so only a ``hold`` there is held. A package the
    query did not list is not held either.
    """
    held = set()
    for line in selections.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] == "hold":
            held.add(words[0].split(":", 1)[0])  # an architecture qualifier is not the name
    return [name for name in packages if name not in held]


#: How far a device's ``memory_size`` may be from the catalogue's HBM before it is a
#: different device. AWS's own ``neuron-ls -j`` of a trn2n.48xlarge gives 103079215104
#: bytes (96 GiB exactly) per device (aws-neuron/aws-neuron-sdk@v2.31.1 and @v2.32.0
#: tools/neuron-sys-tools/neuron-ls.rst, "Examples"); no Trn3 listing is published.
DEVICE_MEMORY_TOLERANCE: Final = 0.10


def _count(device: Mapping[str, Any], key: str) -> int | None:
    value = device.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def device_problems(instance_type: str, neuron_ls_json: str) -> list[str]:
    """Compare ``neuron-ls -j`` with what the instance type should have: the number of
    devices, the NeuronCores at the LNC in effect, each device's memory, and the
    instance type neuron-ls names (when it names one). One line per disagreement."""
    try:
        expected = instances.lookup(instance_type)
    except instances.CatalogError as exc:
        return [str(exc)]
    try:
        devices = json.loads(neuron_ls_json)
    except json.JSONDecodeError as exc:
        return [f"neuron-ls -j did not print JSON ({exc.msg})"]
    if not isinstance(devices, list):
        return ["neuron-ls -j did not print a list of devices"]
    if not all(isinstance(d, Mapping) for d in devices):
        return ["neuron-ls -j printed a device that is not a JSON object"]
    problems = []
    if len(devices) != expected.devices:
        problems.append(f"neuron-ls sees {len(devices)} Neuron devices, a {instance_type} "
                        f"has {expected.devices}")
    named = sorted({str(d["instance_type"]) for d in devices if d.get("instance_type")})
    if named and named != [instance_type]:
        problems.append(f"neuron-ls names the instance {', '.join(named)}, the inventory "
                        f"says {instance_type}")
    if not devices:
        return problems
    # nc_count counts logical NeuronCores at the LNC in effect: AWS's neuron-ls -j of a
    # trn2n.48xlarge (8 physical cores per device) at "logical_neuroncore_config": 2 gives
    # "nc_count": 4 per device and neuroncore_ids 0-63 over its 16 devices ("NEURON CORES /
    # nc_count: Number of NeuronCores present in the Neuron Device"; aws-neuron/
    # aws-neuron-sdk@v2.31.1 and @v2.32.0 tools/neuron-sys-tools/neuron-ls.rst). LNC 1 or
    # 2: about-neuron/arch/neuron-features/logical-neuroncore-config.rst at v2.31.0.
    counts = [_count(d, "nc_count") for d in devices]
    lncs = {_count(d, "logical_neuroncore_config") for d in devices} - {None}
    lnc = next(iter(lncs)) if len(lncs) == 1 else expected.default_lnc
    if None in counts:
        problems.append("neuron-ls -j gives a device without a whole nc_count")
    elif lnc not in (1, 2) or expected.physical_cores_per_device % lnc:
        problems.append(f"neuron-ls reports logical NeuronCore config {lnc}, a "
                        f"{instance_type} has {expected.physical_cores_per_device} "
                        f"NeuronCores per device (LNC 1 or 2)")
    elif (cores := sum(c or 0 for c in counts)) != expected.logical_cores(lnc):
        problems.append(f"neuron-ls sees {cores} NeuronCores, a {instance_type} has "
                        f"{expected.logical_cores(lnc)} at LNC={lnc}")
    want = expected.device_memory_gib * 1024**3
    for d in devices:
        size = _count(d, "memory_size")
        if "memory_size" in d and (size is None or abs(size - want) > (
                DEVICE_MEMORY_TOLERANCE * want)):
            shown = f"{size / 1024**3:.0f} GiB" if size is not None else repr(d["memory_size"])
            problems.append(f"neuron-ls gives device {d.get('neuron_device', '?')} "
                            f"{shown} of memory, a {instance_type} device has "
                            f"{expected.device_memory_gib} GiB")
            break
    return problems


def pip_requirements(release: Release) -> list[str]:
    """``name==version`` for every known pip package of the release (``name @ URL`` for
    one the release installs from source, as AWS's images install the plugin), and the
    bench client's own requirements (the manifest's ``bench_client.requirements``)."""
    pins = [f"vllm=={release.vllm}"] if release.vllm else []
    pins += [f"{n} @ {release.pip_sources[n]}" if n in release.pip_sources else f"{n}=={v}"
             for n, v in release.pip_packages.items() if v is not None]
    return pins + list(release.bench_requirements)


def venv_system_packages(packages: Sequence[str], python_version: str) -> list[str]:
    """The Debian packages of the environment for the interpreter that makes it.

    ``python3-venv`` brings ``venv`` for the distribution's default Python only (3.10 on
    Ubuntu 22.04): an interpreter of another minor version (``vllm_env_python`` at a
    3.11 on 22.04) needs its own ``python3.11-venv``. With no version known the list is
    returned as given.
    """
    minor = ".".join(python_version.strip().split(".")[:2])
    if not minor or minor.count(".") != 1:
        return list(packages)
    return [f"python{minor}-venv" if p == "python3-venv" else p for p in packages]


def public_version(version: str) -> str:
    """A PEP 440 version without its local label: ``0.21.0.1.0.0+794754d`` ->
    ``0.21.0.1.0.0``. AWS's wheels carry the commit they were built from as a local label
    (the DLAMI's plugin is ``vllm_neuron-0.21.0.1.0.0+794754d``: aws-neuron-sdk
    release-notes/releasecontent.rst at v2.31.1); a release pins the public part."""
    return version.strip().split("+", 1)[0]


def adoptable(release: Release, rc: Any, version_output: str) -> bool:
    """Whether a virtualenv whose vllm-neuron reported ``version_output`` can be adopted:
    its public version is the release's (a local label such as ``+794754d`` is the
    build's commit, not another version)."""
    wanted = release.pip_packages.get("vllm-neuron")
    return (rc == 0 and wanted is not None
            and public_version(version_output) == public_version(wanted))


def adoption_note(release: Release, venv: str, rc: Any, version_output: str,
                  own_venv: str) -> str:
    """One line saying why the DLAMI's virtualenv at ``venv`` is or is not adopted
    (empty when there is no such virtualenv): never a silent second venv."""
    if rc != 0 and not version_output.strip():
        return ""
    wanted = release.pip_packages.get("vllm-neuron") or "unknown"
    found = version_output.strip() or "no vllm-neuron"
    if adoptable(release, rc, version_output):
        return (f"adopting {venv} (vllm-neuron {found}, Neuron SDK {release.release} wants "
                f"{wanted}); nothing is installed into it")
    return (f"not adopting {venv}: its vllm-neuron is {found}, Neuron SDK "
            f"{release.release} wants {wanted}; building the bundle's own virtualenv at "
            f"{own_venv} (set vllm_env_adopt_venv: '' to silence this, or pick the "
            f"release that DLAMI carries with prefixbench_neuron_release)")


def pip_index_args(settings: Mapping[str, Any], *, no_deps: bool) -> list[str]:
    """pip's index options for the vLLM environment, from the validated settings."""
    args = ["--no-deps"] if no_deps else []
    args += ["--index-url", str(settings["vllm_env_index_url"])]
    for url in settings.get("vllm_env_extra_index_urls") or []:
        args += ["--extra-index-url", str(url)]
    for host in settings.get("vllm_env_trusted_hosts") or []:
        args += ["--trusted-host", str(host)]
    return args


def pip_install_plan(release: Release, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What goes into the vLLM environment, as one ``pip install``.

    A pinned requirements file (``vllm_env_requirements_url``, every dependency listed)
    is installed with ``--no-deps``; otherwise the release's pip set is resolved with its
    dependencies against the configured indexes. The resolution check and the install use
    exactly this, so that the check sees what the install would do.
    """
    lock = str(settings.get("vllm_env_requirements_url") or "")
    neuron = str(settings.get("prefixbench_platform", "neuron")) == "neuron"
    # vLLM's GPU-only dependencies are its own pins: installed as AWS's images install
    # them unless vllm_env_gpu_wheels says refuse.
    refuse = neuron and str(settings.get("vllm_env_gpu_wheels") or "allow") == "refuse"
    return {
        "requirements": [] if lock else pip_requirements(release),
        "requirements_file": lock,
        "pip_args": pip_index_args(settings, no_deps=bool(lock)),
        "gpu_wheels": "refuse" if refuse else "allow",
    }


def python_problem(release: Release, host: str, facts: Mapping[str, Any],
                   python: str, python_version: str) -> str | None:
    """One line when the vLLM environment's interpreter cannot run the release's wheels.

    ``python_version`` is what ``python`` (``vllm_env_python``) reports on the host. On
    Ubuntu 22.04 the system Python is 3.10, which Neuron dropped in 2.30: the line says
    to point ``vllm_env_python`` at a 3.11/3.12 interpreter or to use Ubuntu 24.04.
    """
    refusal = release.python_refusal(python_version) if python_version else None
    if refusal is None:
        return None
    system = f"{facts.get('distribution', '')} {facts.get('distribution_version', '')}".strip()
    wanted = " or ".join(release.python_supported)
    return (f"{host}: {refusal}, and {python} on this {system} host is Python "
            f"{python_version}; set vllm_env_python to a Python {wanted} interpreter or "
            f"use Ubuntu 24.04 (the vLLM DLAMI's system); nothing was changed")


def hf_download_argv(settings: Mapping[str, Any], hf: str) -> list[str]:
    """``hf download`` of the model: only the files vLLM loads.

    The include and exclude patterns are matched with fnmatch, where ``*`` also crosses
    ``/``: ``*.safetensors`` alone would pull gpt-oss's ``original/`` checkpoint too, so
    the default excludes ``original/*`` and ``metal/*`` explicitly (vLLM 0.21 ignores
    ``original/**/*``: ``vllm/config/load.py``).
    """
    argv = [hf, "download", str(settings["model_cache_repo_id"]),
            "--revision", str(settings["model_cache_revision"]),
            "--local-dir", str(settings["model_cache_dir"])]
    for flag, key in (("--include", "model_cache_hf_include"),
                      ("--exclude", "model_cache_hf_exclude")):
        patterns = [str(p) for p in settings.get(key) or []]
        if patterns:
            argv += [flag, *patterns]
    return argv


def host_problems(release: Release, host: str, facts: Mapping[str, Any],
                  packages: Mapping[str, Sequence[Mapping[str, Any]]],
                  allow_upgrade: bool) -> list[str]:
    """Everything that must stop provisioning on ``host``, one line each.

    An OS the release does not support; pinned packages at other versions, unless
    upgrades are allowed (then the install moves them).
    """
    problems = []
    refusal = os_refusal(release, str(facts.get("distribution", "")),
                         str(facts.get("distribution_version", "")),
                         str(facts.get("distribution_major_version", "")))
    if refusal:
        problems.append(f"{host}: {refusal}")
    if not allow_upgrade:
        problems += [d.line(host) for d in drift(release, installed_versions(packages))]
    return problems


#: Directories teardown never removes, whatever a setting points at (names, not uses:
#: nothing is created in them here).
_SYSTEM_DIRS: Final = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt",
    "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",  # noqa: S108
    "/var",
    "/usr/bin", "/usr/lib", "/usr/local", "/usr/share", "/var/lib", "/var/cache",
    "/var/log", "/var/tmp", "/opt/aws", "/opt/aws/neuron"})  # noqa: S108


def removable(path: str) -> bool:
    """Whether teardown may delete ``path``: absolute, normalised, not a system directory
    (a setting pointed at ``/opt`` must not take ``/opt`` with it)."""
    import posixpath  # noqa: PLC0415

    if not path.startswith("/") or ".." in path.split("/"):
        return False
    norm = posixpath.normpath(path)
    return norm not in _SYSTEM_DIRS and norm.count("/") >= 2


def teardown_paths(settings: Mapping[str, Any]) -> dict[str, list[str]]:
    """What teardown deletes, by role; every path checked with :func:`removable`.

    The bundle's venv (its parent too when it is the default's ``/opt/vllm-prefixbench``),
    never the adopted DLAMI venv; the model and vocabulary directories when
    ``prefixbench_teardown_model`` and the model was not a directory the user brought
    (source ``local``).
    """
    venv = str(settings["vllm_env_venv"])
    env = [venv]
    if venv == "/opt/vllm-prefixbench/venv":
        env.append("/opt/vllm-prefixbench")
    if venv == str(settings.get("vllm_env_adopt_venv") or ""):
        env = []
    model: list[str] = []
    if settings.get("prefixbench_teardown_model") and settings.get("model_cache_source") != "local":
        model = [str(settings["model_cache_dir"]), str(settings["model_cache_tiktoken_dir"])]
    return {"vllm_env": [p for p in env if removable(p)],
            "model_cache": [p for p in model if removable(p)]}
