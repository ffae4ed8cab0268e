#!/usr/bin/python
"""Module: the Hub commit a model directory holds, read on the host without the Hub."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_hf_revision
short_description: Read which Hub commit a model directory downloaded with hf download holds
description:
  - Reads the metadata that C(hf download --local-dir) keeps for every file
    (C(<local_dir>/.cache/huggingface/download/**.metadata), first line the commit) and
    returns the one commit they name, that is the revision the requested branch or tag
    resolved to. No Hub request, no token.
  - Also returns the bundle's model record (C(.prefixbench-model.json)) and whether it is
    current, i.e. whether a download can be skipped.
  - Changes nothing; supports check mode.
  - The logic lives in module_utils/prefixbench_hf.py (plain Python, unit-tested).
options:
  local_dir:
    description: The model directory.
    type: path
    required: true
  repo_id:
    description: Hub repository the directory should hold.
    type: str
    required: true
  requested_revision:
    description: The revision asked for (branch, tag or commit).
    type: str
    required: true
  require:
    description: Fail unless the directory names exactly one commit.
    type: bool
    default: false
author: prefixbench
"""

EXAMPLES = r"""
- name: Read the commit the download resolved to
  prefixbench_hf_revision:
    local_dir: /opt/models/gpt-oss-120b
    repo_id: openai/gpt-oss-120b
    requested_revision: main
    require: true
  register: hf_revision
"""

RETURN = r"""
commit:
  description: The commit the files are of; null when it cannot be told.
  type: str
  returned: always
current:
  description: The record names this repository, requested revision and commit.
  type: bool
  returned: always
record:
  description: The bundle's model record, or null.
  type: dict
  returned: always
problem:
  description: Why no commit could be told (empty when one was).
  type: str
  returned: always
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_hf import inspect


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "local_dir": {"type": "path", "required": True},
            "repo_id": {"type": "str", "required": True},
            "requested_revision": {"type": "str", "required": True},
            "require": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    found = inspect(Path(p["local_dir"]), p["repo_id"], p["requested_revision"])
    if p["require"] and found["commit"] is None:
        module.fail_json(msg=f"{p['local_dir']}: no single Hub commit: {found['problem']}",
                         **found)
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
