#!/usr/bin/python
"""Module: find the vLLM Neuron virtualenvs on a host and read what they hold."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_neuron_venvs
short_description: Find vLLM Neuron virtualenvs on a host and read their versions
description:
  - Globs I(patterns) (AWS's DLAMI vLLM venvs, whatever the version in their name) and
    adds I(paths) (a venv the inventory names); each directory with C(bin/python) is asked,
    by its own interpreter, for the versions of I(distributions) (importlib.metadata) and
    which of I(environment_names) the installed code of I(scan) names.
  - Also reports which of I(directories) exist.
  - Changes nothing. Runs on Python 3.8 and later, standard library only.
options:
  patterns:
    description: Globs of venv directories.
    type: list
    elements: str
    default: []
  paths:
    description: Venv directories to ask whether or not a pattern matches them.
    type: list
    elements: str
    default: []
  distributions:
    description: Distributions whose versions to read in each venv.
    type: list
    elements: str
    default: [vllm, vllm-neuron]
  environment_names:
    description: Environment variable names to look for in the code of I(scan).
    type: list
    elements: str
    default: []
  scan:
    description: Distributions whose installed Python files are searched for the names.
    type: list
    elements: str
    default: [vllm-neuron]
  directories:
    description: Directories whose existence to report.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds each venv's interpreter may take.
    type: int
    default: 120
author: prefixbench
"""

EXAMPLES = r"""
- name: Find the vLLM Neuron venvs
  prefixbench_neuron_venvs:
    patterns: [/opt/aws_neuronx_venv_pytorch_inference_vllm*]
"""

RETURN = r"""
venvs:
  description: >-
    One entry per venv directory found: path, rc (0 when its interpreter answered),
    python (its version), distributions ({name: version or null}), environment_names
    (the names its scanned code holds, or null when it was not read), error.
  type: list
  elements: dict
  returned: always
directories:
  description: "{directory: whether it exists}"
  type: dict
  returned: always
"""

import json
import os
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

# Run by each venv's own interpreter: argv[1] is the JSON request.
_READ = r"""
import json, sys
import importlib.metadata as m
req = json.loads(sys.argv[1])
out = {"python": "%d.%d.%d" % sys.version_info[:3], "distributions": {},
       "environment_names": None}
for name in req["distributions"]:
    try:
        out["distributions"][name] = m.version(name)
    except m.PackageNotFoundError:
        out["distributions"][name] = None
found = set()
read = False
for name in req["scan"]:
    try:
        files = m.distribution(name).files or []
    except m.PackageNotFoundError:
        continue
    for f in files:
        if str(f).endswith(".py"):
            try:
                text = f.locate().read_text(errors="replace")
            except OSError:
                continue
            read = True
            found.update(n for n in req["environment_names"] if n in text)
if read:
    out["environment_names"] = sorted(found)
print(json.dumps(out))
"""


def _ask(path, request, timeout):
    python = str(Path(path) / "bin" / "python")
    entry = {"path": path, "rc": 1, "python": "", "distributions": {},
             "environment_names": None, "error": ""}
    try:
        done = subprocess.run([python, "-c", _READ, json.dumps(request)],
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        entry["error"] = str(exc)
        return entry
    entry["rc"] = done.returncode
    if done.returncode != 0:
        entry["error"] = done.stderr.decode(errors="replace").strip()[-400:]
        return entry
    try:
        entry.update(json.loads(done.stdout.decode(errors="replace").strip().splitlines()[-1]))
    except (ValueError, IndexError):
        entry.update(rc=1, error="unreadable answer")
    return entry


def main():
    module = AnsibleModule(argument_spec={
        "patterns": {"type": "list", "elements": "str", "default": []},
        "paths": {"type": "list", "elements": "str", "default": []},
        "distributions": {"type": "list", "elements": "str",
                          "default": ["vllm", "vllm-neuron"]},
        "environment_names": {"type": "list", "elements": "str", "default": []},
        "scan": {"type": "list", "elements": "str", "default": ["vllm-neuron"]},
        "directories": {"type": "list", "elements": "str", "default": []},
        "timeout": {"type": "int", "default": 120},
    }, supports_check_mode=True)
    p = module.params
    found = []
    for pattern in p["patterns"]:
        where = Path(pattern)
        found.extend(sorted(str(d) for d in Path(where.anchor or ".").glob(
            str(where.relative_to(where.anchor)) if where.anchor else pattern)))
    found.extend(p["paths"])
    request = {k: p[k] for k in ("distributions", "environment_names", "scan")}
    venvs = [_ask(path, request, p["timeout"])
             for path in dict.fromkeys(os.path.normpath(f) for f in found)
             if (Path(path) / "bin" / "python").is_file()]
    module.exit_json(changed=False, venvs=venvs,
                     directories={d: Path(d).is_dir() for d in p["directories"]})


if __name__ == "__main__":
    main()
