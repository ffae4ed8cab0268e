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
  - Changes nothing on the host but its own stamp; supports check mode. When a dry run in
    I(venv) resolved with nothing to install, a stamp in the venv
    (C(.prefixbench-resolved.json)) records the question and the venv's installed
    distributions; the same question about an unchanged venv is then answered from it
    (C(from_stamp)) without running pip. Check mode reads the stamp, never writes it.
  - The logic that reads pip's output and keys the stamp lives in
    module_utils/prefixbench_pip.py (plain Python, unit-tested).
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
  gpu_wheels:
    description:
      - C(refuse) turns a set that would install CUDA/GPU distributions (nvidia-*,
        cuda-*, flashinfer*, triton, a torch built for CUDA) into a failure naming them,
        before anything is installed. C(allow) installs them.
    type: str
    choices: [allow, refuse]
    default: allow
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
from_stamp:
  description: Whether the answer came from the venv's stamp (pip did not run).
  type: bool
  returned: always
"""

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_pip import (
    STAMP_NAME,
    gpu_refusal,
    gpu_wheels,
    installed_key,
    request_key,
    stamp,
    stamp_answers,
    summarize_failure,
    would_install,
)

#: pip's configuration files (global, user, the venv's own): part of the question.
_PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf", "~/.config/pip/pip.conf",
                "~/.pip/pip.conf")


def _requirements_text(source: str) -> str | None:
    """The requirement file's text ("" for none); None when it cannot be read here."""
    if not source:
        return ""
    try:
        if "://" in source:
            with urllib.request.urlopen(source, timeout=15) as response:  # noqa: S310
                return response.read().decode("utf-8", "replace")
        return Path(source).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _interpreter(venv: Path) -> str:
    """The venv's interpreter and pip's configuration, as text."""
    parts = []
    for path in (venv / "pyvenv.cfg", venv / "pip.conf", *map(Path, _PIP_CONFIGS)):
        try:
            parts.append(f"{path}:{path.expanduser().read_text(errors='replace')}")
        except OSError:
            continue
    parts += sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("PIP_"))
    return "\n".join(parts)


def _installed(venv: Path) -> str:
    return installed_key([d.name for pattern in ("*.dist-info", "*.egg-info")
                          for d in venv.glob(f"lib/python*/site-packages/{pattern}")])


def _read_stamp(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_stamp(path: Path, content: dict[str, object]) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(content) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a stamp is a shortcut; pip runs next time


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "python": {"type": "path", "default": "/usr/bin/python3"},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "requirements_file": {"type": "str", "default": ""},
            "pip_args": {"type": "list", "elements": "str", "default": []},
            "fail_on_conflict": {"type": "bool", "default": True},
            "gpu_wheels": {"type": "str", "default": "allow", "choices": ["allow", "refuse"]},
            "timeout": {"type": "int", "default": 900},
        },
        supports_check_mode=True,
    )
    p = module.params
    venv = Path(p["venv"])
    in_venv = (venv / "bin" / "python").exists()
    request = (request_key(p["requirements"], _requirements_text(p["requirements_file"]),
                           p["pip_args"], _interpreter(venv)) if in_venv else None)
    stamp_path = venv / STAMP_NAME
    if in_venv and stamp_answers(_read_stamp(stamp_path), request, _installed(venv)):
        module.exit_json(changed=False, resolvable=True, would_install=[], conflict="",
                         ran_in=str(venv), from_stamp=True)
    scratch = Path(tempfile.mkdtemp(prefix="prefixbench-pip-"))
    try:
        if in_venv:
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
                      "ran_in": ran_in, "from_stamp": False, "stderr": proc.stderr[-4000:]}
            if p["fail_on_conflict"]:
                module.fail_json(msg=conflict, **result)
            module.exit_json(changed=False, **result)
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        wanted = would_install(report)
        refusal = gpu_refusal(gpu_wheels(report)) if p["gpu_wheels"] == "refuse" else ""
        if refusal:
            result = {"resolvable": False, "would_install": wanted, "conflict": refusal,
                      "ran_in": ran_in, "from_stamp": False}
            if p["fail_on_conflict"]:
                module.fail_json(msg=refusal, **result)
            module.exit_json(changed=False, **result)
        if in_venv and not wanted and request is not None and not module.check_mode:
            _write_stamp(stamp_path, stamp(request, _installed(venv)))
        module.exit_json(changed=False, resolvable=True, would_install=wanted,
                         conflict="", ran_in=ran_in, from_stamp=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
