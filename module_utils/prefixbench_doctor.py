"""Run ``prefixbench doctor``'s probe inside the server unit's sandbox, and name the
directive a failing check comes from. The logic of the prefixbench_doctor module; plain
Python, no Ansible imports.

The probe (``prefixbench/hosts/doctor_probe.py``) runs in a transient unit made with
``systemd-run`` from the server unit's own properties: its user, environment, limits,
grants, state and cache directories and every sandbox directive. A check that fails
there is run again under the full sandbox (a failure that does not repeat is nobody's),
then with no sandbox directive: if it passes, the sandbox is the cause, and each
directive is tried alone, then relaxed alone, to find which one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: The line the probe prints its JSON on (anything else is the interpreter's noise).
MARK = "PREFIXBENCH-DOCTOR "
#: Checks whose failure is not a property of the host's software (the model is absent
#: before provisioning, in or out of a sandbox): never searched for a directive.
NOT_SANDBOXED = frozenset({"model"})
#: The cause of a failure no single directive reproduces.
WHOLE_SANDBOX = "the sandbox as a whole"
#: The cause of a failure that did not repeat: not the sandbox's (nor any directive's).
INTERMITTENT = "intermittent"

Runner = Callable[[Sequence[str], Sequence[str]], "Probe"]


class Probe:
    """One run of the probe: its checks, or why it did not run."""

    def __init__(self, checks: Mapping[str, Any] | None, error: str = "") -> None:
        self.checks: dict[str, Any] = dict(checks or {})
        self.error = error

    def failed(self) -> list[str]:
        return [name for name, r in self.checks.items()
                if isinstance(r, Mapping) and not r.get("ok")]


def parse_output(rc: int, stdout: str, stderr: str) -> Probe:
    """The probe's result from the transient unit's output."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK):])
            except ValueError:
                break
            return Probe(data if isinstance(data, Mapping) else {})
    tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
    return Probe(None, f"the probe did not run (exit {rc}): {' | '.join(tail)[:600]}")


def systemd_run_argv(unit: str, properties: Sequence[str], command: Sequence[str]
                     ) -> list[str]:
    """``systemd-run`` of ``command`` as a transient service with ``properties``."""
    argv = ["systemd-run", "--wait", "--pipe", "--collect", "--quiet",
            "--service-type=exec", f"--unit={unit}"]
    argv += [f"--property={p}" for p in properties]
    return [*argv, "--", *command]


def diagnose(base: Sequence[str], directives: Sequence[str],
             run: Callable[[Sequence[str], Sequence[str] | None], Probe]
             ) -> dict[str, Any]:
    """Run the probe under ``base`` + ``directives``; for each check that fails, what it
    comes from.

    ``run(properties, only)`` runs the probe (``only``: the checks to run, None for all).
    Returns ``{"checks": ..., "error": ..., "causes": {check: cause}, "runs": n}``. A
    directive is named only when every step agrees: the failure repeats under the full
    sandbox, passes with no directive, fails with that directive alone, and passes with
    the full sandbox less that directive. Otherwise the cause is :data:`INTERMITTENT`
    (it did not fail again), "host" (it fails without any directive too) or
    :data:`WHOLE_SANDBOX` (the sandbox breaks it, no one directive shown to).
    """
    full = run([*base, *directives], None)
    runs = 1
    causes: dict[str, str] = {}
    failing = [c for c in full.failed() if c not in NOT_SANDBOXED]
    if full.error or not failing or not directives:
        return _result(full, causes, runs, directives)

    def fails(properties: Sequence[str], checks: Sequence[str]) -> set[str] | None:
        nonlocal runs
        runs += 1
        probe = run(list(properties), list(checks))
        return None if probe.error else set(probe.failed()) & set(checks)

    again = fails([*base, *directives], failing)
    if again is None:
        return _result(full, causes, runs, directives)
    for name in failing:
        if name not in again:
            causes[name] = INTERMITTENT
    suspects = [c for c in failing if c in again]
    bare = fails(base, suspects) if suspects else set()
    if bare is None:
        return _result(full, causes, runs, directives)
    for name in suspects:
        if name in bare:
            causes[name] = "host"
    suspects = [c for c in suspects if c not in causes]
    candidate: dict[str, str] = {}
    for directive in directives:
        left = [c for c in suspects if c not in candidate]
        if not left:
            break
        for name in fails([*base, directive], left) or set():
            candidate[name] = directive
    for directive in dict.fromkeys(candidate.values()):
        mine = [c for c, d in candidate.items() if d == directive]
        still = fails([*base, *(d for d in directives if d != directive)], mine)
        for name in mine:
            if still is not None and name not in still:
                causes[name] = directive
    for name in suspects:  # only the directives together break it, or no one alone
        causes.setdefault(name, WHOLE_SANDBOX)
    return _result(full, causes, runs, directives)


def _result(full: Probe, causes: Mapping[str, str], runs: int, directives: Sequence[str]
            ) -> dict[str, Any]:
    return {"checks": full.checks, "error": full.error, "causes": dict(causes),
            "runs": runs, "directives": list(directives)}


def proven(result: Mapping[str, Any]) -> bool:
    """Whether a diagnosis proves the sandbox on the host: the probe ran and every check
    the sandbox can break passed under it."""
    checks = result.get("checks") or {}
    runs = [r for name, r in checks.items()
            if name not in NOT_SANDBOXED and isinstance(r, Mapping)]
    return not result.get("error") and bool(runs) and all(r.get("ok") for r in runs)
