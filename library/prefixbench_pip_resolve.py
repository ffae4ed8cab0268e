#!/usr/bin/python
"""Module: ask pip, without installing, whether a requirement set resolves."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_pip_resolve
short_description: Dry-run a pip install and name the clashing requirements if it fails
description:
  - Runs C(pip install --dry-run --report) for I(requirements) and I(requirements_file)
    with I(pip_args) (the index options the real install uses), in I(venv) when it
    exists, else in a throwaway virtualenv made from I(python) and removed afterwards.
  - Returns what pip would install; on a failure, one line that names the clashing
    requirements (from pip's "The conflict is caused by" block).
  - Changes nothing on the host; supports check mode. The logic that reads pip's output
    lives in module_utils/prefixbench_pip.py (plain Python, unit-tested).
options:
  venv:
    description: The virtualenv the install will go into.
    type: path
    required: true
  python:
    description: Interpreter for the throwaway virtualenv when I(venv) does not exist.
    type: path
    default: /usr/bin/python3
  requirements:
    description: Requirement specifiers (C(name==version)).
    type: list
    elements: str
    default: []
  requirements_file:
    description: A requirements file (path or URL); empty for none.
    type: str
    default: ""
  pip_args:
    description: Further pip options, e.g. C(--no-deps), C(--index-url URL).
    type: list
    elements: str
    default: []
  fail_on_conflict:
    description: Fail with the one-line summary when pip cannot resolve the set.
    type: bool
    default: true
  timeout:
    description: Seconds the dry run may take.
    type: int
    default: 900
author: prefixbench
"""

EXAMPLES = r"""
- name: Check the release's pip set resolves before installing anything
  prefixbench_pip_resolve:
    venv: /opt/vllm-prefixbench/venv
    requirements: [vllm==0.21.0, vllm-neuron==0.21.0.1.0.0]
    pip_args: [--extra-index-url, https://pip.repos.neuron.amazonaws.com]
"""

RETURN = r"""
resolvable:
  description: Whether pip resolved the set.
  type: bool
  returned: always
would_install:
  description: C(name==version) of every distribution pip would install or change.
  type: list
  elements: str
  returned: always
conflict:
  description: One line naming the clashing requirements; empty when it resolved.
  type: str
  returned: always
ran_in:
  description: The virtualenv the dry run used (I(venv), or "throwaway").
  type: str
  returned: always
"""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_pip import summarize_failure, would_install


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "requirements_file": {"type": "str", "default": ""},
            "pip_args": {"type": "list", "elements": "str", "default": []},
            "fail_on_conflict": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 900},
        },
        supports_check_mode=True,
    )
    p = module.params
    venv = Path(p["venv"])
    scratch = Path(tempfile.mkdtemp(prefix="prefixbench-pip-"))
    try:
        if (venv / "bin" / "python").exists():
            python, ran_in = venv / "bin" / "python", str(venv)
        else:
            made = subprocess.run([p["python"], "-m", "venv", str(scratch / "venv")],
                                  capture_output=True, text=True, check=False)
            if made.returncode != 0:
                module.fail_json(msg=f"cannot make a throwaway virtualenv with {p['python']}: "
                                     f"{(made.stderr or made.stdout).strip()[-400:]}")
            python, ran_in = scratch / "venv" / "bin" / "python", "throwaway"
        report_path = scratch / "report.json"
        argv = [str(python), "-m", "pip", "install", "--dry-run",
                "--disable-pip-version-check", "--report", str(report_path), *p["pip_args"]]
        if p["requirements_file"]:
            argv += ["-r", p["requirements_file"]]
        argv += p["requirements"]
        env = {**os.environ, "PIP_NO_INPUT": "1"}
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env,
                                  timeout=p["timeout"])
        except subprocess.TimeoutExpired:
            module.fail_json(msg=f"pip's dry run took longer than {p['timeout']} s")
        if proc.returncode != 0:
            conflict = summarize_failure(proc.stdout + "\n" + proc.stderr)
            result = {"resolvable": False, "would_install": [], "conflict": conflict,
                      "ran_in": ran_in, "stderr": proc.stderr[-4000:]}
            if p["fail_on_conflict"]:
                module.fail_json(msg=conflict, **result)
            module.exit_json(changed=False, **result)
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        module.exit_json(changed=False, resolvable=True, would_install=would_install(report),
                         conflict="", ran_in=ran_in)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
