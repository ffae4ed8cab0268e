#!/usr/bin/python
"""Module: run prefixbench doctor's probe inside the server unit's sandbox."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_doctor
short_description: Check a host can run the vLLM server, inside the unit's own sandbox
description:
  - Writes the probe (I(script)) and its configuration under C(/run), runs it with
    I(python) in a transient unit (C(systemd-run)) holding the server unit's
    I(properties) (user, environment, limits, directories) and sandbox I(directives).
  - A check that fails is run again without any directive and then with each directive
    alone, to name the directive that breaks it (C(causes)). Read-only apart from the
    unit's own state and cache directories, which systemd creates as the server would,
    and I(proof_file), written when every check passes.
  - The logic lives in module_utils/prefixbench_doctor.py (plain Python, unit-tested).
options:
  python:
    description: The vLLM environment's interpreter.
    type: path
    required: true
  script:
    description: The probe's source.
    type: str
    required: true
  config:
    description: The probe's configuration (see prefixbench/hosts/doctor_probe.py).
    type: dict
    required: true
  user:
    description: The service user the server runs as.
    type: str
    required: true
  properties:
    description: The unit's properties other than its sandbox (C(Key=value)).
    type: list
    elements: str
    default: []
  directives:
    description: The unit's sandbox directives (C(Key=value)).
    type: list
    elements: str
    default: []
  proof:
    description: >-
      The record written to I(proof_file) when every check the sandbox can break passes
      under the full sandbox (what a deploy at a stricter level asks for).
    type: dict
    default: {}
  proof_file:
    description: Where the proof goes on the host (its directory is created, root only).
    type: path
    default: ""
  timeout:
    description: Seconds one probe run may take.
    type: int
    default: 300
author: prefixbench
"""

EXAMPLES = r"""
- name: Check the host under the server's sandbox
  prefixbench_doctor:
    python: /opt/vllm-prefixbench/venv/bin/python
    script: "{{ lookup('file', 'doctor_probe.py') }}"
    config: {platform: cpu, imports: [vllm]}
    user: vllm
    directives: [ProtectSystem=strict]
"""

RETURN = r"""
checks:
  description: "{check: {ok, detail}} from the run under the full sandbox."
  type: dict
  returned: always
causes:
  description: >-
    {check: directive} for each failing check the sandbox breaks; 'host' when it
    fails without any.
  type: dict
  returned: always
error:
  description: Why the probe did not run at all (empty when it ran).
  type: str
  returned: always
directives:
  description: The sandbox directives the probe ran under (what a cause may name).
  type: list
  elements: str
  returned: always
proven:
  description: Whether every check the sandbox can break passed (the proof was written).
  type: bool
  returned: always
"""

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_doctor import (
    Probe,
    diagnose,
    parse_output,
    proven,
    systemd_run_argv,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "script": {"type": "str", "required": True},
            "config": {"type": "dict", "required": True},
            "user": {"type": "str", "required": True},
            "properties": {"type": "list", "elements": "str", "default": []},
            "directives": {"type": "list", "elements": "str", "default": []},
            "proof": {"type": "dict", "default": {}},
            "proof_file": {"type": "path", "default": ""},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        pwd.getpwnam(p["user"])
    except KeyError:
        module.exit_json(changed=False, checks={}, causes={}, runs=0, proven=False,
                         directives=[], error=(
            f"the service user {p['user']} does not exist yet: the deploy phase creates it "
            "(ansible-playbook playbooks/deploy.yml)"))
    if not os.access(p["python"], os.X_OK):
        module.exit_json(changed=False, checks={}, causes={}, runs=0, proven=False,
                         directives=[], error=(
            f"{p['python']} does not exist: provision the vLLM environment first "
            "(ansible-playbook playbooks/provision.yml) or adopt the DLAMI's"))
    # Under /run, not /tmp: the unit has a /tmp of its own (PrivateTmp). Readable by the
    # service user, as the venv's files are.
    work = Path(tempfile.mkdtemp(prefix="prefixbench-doctor-", dir="/run"))
    work.chmod(0o755)
    serial = [0]
    try:
        script = work / "probe.py"
        script.write_text(p["script"], encoding="utf-8")
        script.chmod(0o644)

        def run(properties: Sequence[str], only: Sequence[str] | None) -> Probe:
            serial[0] += 1
            cfg = dict(p["config"], only=list(only) if only is not None else None)
            # The configuration goes in a file: systemd would expand a "$" or "%" in an
            # argument of the command.
            cfg_path = work / f"config-{serial[0]}.json"
            cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
            cfg_path.chmod(0o644)
            unit = f"prefixbench-doctor-{os.getpid()}-{serial[0]}"
            argv = systemd_run_argv(unit, properties,
                                    [p["python"], str(script), str(cfg_path)])
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                                      timeout=p["timeout"])
            except subprocess.TimeoutExpired:
                subprocess.run(["systemctl", "stop", unit], capture_output=True, check=False)
                return Probe(None, f"the probe took longer than {p['timeout']} s")
            return parse_output(proc.returncode, proc.stdout, proc.stderr)

        result = diagnose(p["properties"], p["directives"], run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = proven(result)
    changed = False
    if ok and p["proof"] and p["proof_file"]:
        changed = _write_proof(Path(p["proof_file"]), p["proof"], module.check_mode)
    module.exit_json(changed=changed, proven=ok, **result)


def _write_proof(path: Path, proof: dict, check_mode: bool) -> bool:
    """Write the proof (root-only directory, world-readable file); whether it changed."""
    text = json.dumps(proof, indent=1, sort_keys=True) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except OSError:
        pass
    if not check_mode:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(path)
    return True


if __name__ == "__main__":
    main()
