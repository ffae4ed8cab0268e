"""``prefixbench doctor``: is each host ready to serve, checked the way the server runs?

Before any long compile (gpt-oss-120b's first one takes hours on Trn2), the doctor runs a
probe on every host *inside the server unit's own sandbox*: the unit's user, environment
(its PATH above all), open-files limit, state and cache directories and every sandbox
directive (``vllm_service_sandbox``), through ``systemd-run`` (module
``prefixbench_doctor``). It checks that the venv's vLLM (and on Neuron ``vllm_neuron``
and the Neuron torch) import, that the graph compiler the server runs is on the unit's
PATH, that the service user opens the devices and ``neuron-ls`` agrees with the instance
catalogue, that the compile cache is writable, the open-files limit, the model and its
vocabulary, and it starts the runtime: on Neuron libnrt's ``nrt_init`` on one NeuronCore
(through the unit's LD_LIBRARY_PATH, capabilities and memlock limit; no model, no
compile), on cpu torch and vLLM's platform. A failing check the sandbox causes is tied
to the directive that causes it; a failure that does not repeat, or fails without any
directive, is never put on one (module_utils/prefixbench_doctor.diagnose).

This module is the controller's half: what to run (:func:`plan`) and one screen of
results (:func:`host_lines`, :func:`render`). Pure: nothing here touches a host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.config import modelfit
from prefixbench.hosts import efa, instances
from prefixbench.hosts.provision import device_problems
from prefixbench.servers import sandbox, server

PROBE_FILE: Final = Path(__file__).with_name("doctor_probe.py")

#: The checks in the order they print, each with what to do when it fails.
FIXES: Final = {
    "imports": "the venv cannot import the server's modules: rerun "
               "`ansible-playbook playbooks/provision.yml`, or check vllm_env_adopt_venv",
    "compiler": "the graph compiler is not on the unit's PATH: the venv's bin must hold "
                "it (provision installs neuronx-cc there)",
    "devices": "the service user cannot open the Neuron devices: check the driver "
               "(`lsmod | grep neuron`), the `neuron` group membership, or "
               "vllm_service_sandbox",
    "neuron_ls": "neuron-ls disagrees with the instance type: check "
                 "prefixbench_instance_type against the host, or NEURON_RT_VISIBLE_CORES",
    "cache": "the compile cache is not writable by the service user: check "
             "vllm_service_cache_root and its disk",
    "open_files": "raise the open-files limit (the unit sets LimitNOFILE; check "
                  "/etc/security/limits.conf and systemd's DefaultLimitNOFILE)",
    "model": "the model is not on the host yet: `ansible-playbook playbooks/provision.yml` "
             "downloads it (check model_cache_dir and its free space)",
    "vocabulary": "the tiktoken vocabulary is missing: provision copies it "
                  "(model_cache_tiktoken_dir)",
    "efa": "the host has no EFA and the unit does not skip EFA affinity: deploy again "
           "(the units set NEURON_SKIP_EFA_AFFINITY=1 where the host has none; "
           "vllm_service_efa: auto), or set vllm_service_efa: absent",
    "runtime": "the runtime does not start under the unit: the detail says how (libnrt "
               "not on LD_LIBRARY_PATH: check aws-neuronx-runtime-lib; an NRT status: "
               "stop any server holding the NeuronCores, `systemctl stop 'vllm-*'`, and "
               "read the runtime's log in the journal)",
}
#: The directive a failing check's fix names: how to get past it.
DIRECTIVE_FIX: Final = ("the sandbox directive {directive} breaks it: set "
                        "vllm_service_sandbox: {levels} and report it")
#: When no directive alone breaks it (the directives together do, or the first run's
#: failure did not repeat).
WHOLE_SANDBOX_FIX: Final = ("the sandbox breaks it, no one directive alone: set "
                            "vllm_service_sandbox: off and report it")
#: What module_utils/prefixbench_doctor.py records as the cause then.
WHOLE_SANDBOX: Final = "the sandbox as a whole"
#: Its cause for a failure that passed when run again under the same sandbox.
INTERMITTENT: Final = "intermittent"
INTERMITTENT_FIX: Final = ("it failed once and passed when run again under the same "
                           "sandbox: not a sandbox directive; run the doctor again (a "
                           "server or another process may have held the NeuronCores)")


@dataclass(frozen=True)
class Line:
    """One check on one host."""

    host: str
    check: str
    ok: bool
    detail: str
    fix: str = ""
    cause: str = ""

    def text(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'}  {self.host:<16} {self.check:<11} {self.detail}"
        if self.ok:
            return head
        return f"{head}\n      fix: {self.fix}"


def plan(settings: Mapping[str, Any], vllm_executable: str) -> dict[str, Any]:
    """What the doctor runs on a host: the probe's interpreter, configuration, the
    server unit's properties and its sandbox directives (exactly the cached unit's)."""
    platform = str(settings.get("prefixbench_platform", "neuron"))
    spec = server.unit_spec(settings, "cached", vllm_executable)
    user = str(settings.get("vllm_service_user") or "vllm")
    properties = [f"User={user}", f"Group={user}", f"LimitNOFILE={spec.limit_nofile}",
                  *spec.grants, f"EnvironmentFile=-{spec.environment_file}",
                  "StateDirectory=vllm-prefixbench", "CacheDirectory=vllm-prefixbench",
                  f"WorkingDirectory={server.STATE_DIR}",
                  *(f"Environment={line}" for line in spec.environment)]
    neuron = platform == "neuron"
    config = {
        "platform": platform,
        "imports": ["vllm", "vllm_neuron", "torch"] if neuron else ["vllm", "torch"],
        "distributions": ["libtorch-neuronx-lite", "neuronx-cc"] if neuron else [],
        # The plugin compiles with neuronx-cc as a subprocess; torch inductor (vLLM's
        # compile on CPU) runs the C++ compiler.
        "compiler": "neuronx-cc" if neuron else "g++",
        "devices": "/dev/neuron*" if neuron else "",
        "neuron_ls": f"{sandbox.NEURON_TOOLS_BIN}/neuron-ls",
        "cache_dir": str(settings.get("vllm_service_cache_root", server.DEFAULT_CACHE_ROOT)),
        "nofile": spec.limit_nofile,
        "model_dir": str(settings.get("model_cache_dir", "")),
        # The room the download needs where the model is absent (the profile's size).
        "model_bytes": int(modelfit.checkpoint_gib(settings) * 2**30),
        # The directory the unit reads (its TIKTOKEN_ENCODINGS_BASE, servers.server).
        "vocab_dir": (server.tiktoken_dir(settings)
                      if settings.get("model_cache_tiktoken") else ""),
        # EFA devices, or the unit's NEURON_SKIP_EFA_AFFINITY=1 (prefixbench.hosts.efa).
        "efa_dir": efa.SYSFS_DIR if neuron else "",
        # Start the platform's runtime (doctor_probe.NEURON_RUNTIME / CPU_RUNTIME).
        "runtime": platform,
    }
    return {
        "python": str(Path(vllm_executable).parent / "python"),
        "user": user, "config": config, "properties": properties,
        "directives": list(spec.hardening),
        # Written on the host when every check passes: what a strict deploy asks for.
        "proof": sandbox.proof_record(spec.sandbox_level, spec.sandbox_lines()),
        "proof_file": sandbox.PROOF_FILE,
    }


def host_lines(host: str, result: Mapping[str, Any], instance_type: str) -> list[Line]:
    """The doctor's lines for one host from the module's result."""
    error = str(result.get("error") or "")
    if error:
        return [Line(host, "probe", False, error, _probe_fix(error))]
    checks = result.get("checks") or {}
    causes = result.get("causes") or {}
    out = []
    for name, fix in FIXES.items():
        if name == "neuron_ls":
            listing = str(checks.get("neuron_ls") or "")
            if not listing:
                continue
            problems = device_problems(instance_type, listing)
            out.append(Line(host, "neuron_ls", not problems,
                            "; ".join(problems) or f"agrees with {instance_type} "
                            f"({_devices(instance_type)})", fix))
            continue
        r = checks.get(name)
        if not isinstance(r, Mapping):
            continue
        cause = str(causes.get(name) or "")
        line_fix = fix
        if cause == WHOLE_SANDBOX:
            line_fix = WHOLE_SANDBOX_FIX
        elif cause == INTERMITTENT:
            line_fix = INTERMITTENT_FIX
        elif cause and cause != "host" and cause in directives_of(result):
            first, *more = sandbox.levels_without(cause) or ["off"]
            levels = first + "".join(f" (or {m})" for m in more)
            line_fix = DIRECTIVE_FIX.format(directive=cause, levels=levels)
        out.append(Line(host, name, bool(r.get("ok")), str(r.get("detail", "")), line_fix,
                        cause))
    return out


def directives_of(result: Mapping[str, Any]) -> set[str]:
    """The sandbox directives the module ran under (what a cause may name)."""
    return {str(d) for d in result.get("directives") or []}


def _devices(instance_type: str) -> str:
    try:
        t = instances.lookup(instance_type)
    except instances.CatalogError:
        return "unknown type"
    return f"{t.devices} devices, {t.logical_cores()} NeuronCores"


def _probe_fix(error: str) -> str:
    if "does not exist yet" in error or "provision" in error:
        return "run the phase the message names, then the doctor again"
    return "read the host's journal (journalctl -u 'prefixbench-doctor-*')"


def render(lines: Sequence[Line], runs: int = 0) -> str:
    """One screen: a line per check per host, the fix under each failure, a total."""
    failed = [line for line in lines if not line.ok]
    hosts = sorted({line.host for line in lines})
    body = [line.text() for line in lines]
    tail = (f"doctor: {len(hosts)} host(s), {len(lines) - len(failed)} PASS, "
            f"{len(failed)} FAIL" + (f" ({runs} probe runs)" if runs else ""))
    return "\n".join([*body, tail])


def report(results: Mapping[str, Mapping[str, Any]], instance_types: Mapping[str, str]
           ) -> dict[str, Any]:
    """The doctor's screen and lines for ``{host: module result}``."""
    lines = [line for host in sorted(results)
             for line in host_lines(host, results[host], str(instance_types.get(host, "")))]
    runs = sum(int(r.get("runs") or 0) for r in results.values())
    return {"text": render(lines, runs), "failed": sum(not x.ok for x in lines),
            "lines": [{"host": x.host, "check": x.check, "ok": x.ok, "detail": x.detail,
                       "fix": x.fix, "cause": x.cause} for x in lines]}
