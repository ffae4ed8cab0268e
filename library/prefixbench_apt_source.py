#!/usr/bin/python
"""Module: list a repository in apt's sources unless the host already lists it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_apt_source
short_description: Add an apt repository entry unless one for the same URI exists
description:
  - Reads C(/etc/apt/sources.list) and every C(*.list) and C(*.sources) file in
    C(/etc/apt/sources.list.d) and finds the enabled C(deb) entries of I(uri).
  - When there is one (for example the C(neuron.list) that AWS's Neuron setup guide
    writes without C(signed-by)), it is adopted and nothing is written, because a second
    entry with another C(Signed-By) makes apt refuse every source list.
  - Otherwise writes I(path) with one entry signed by I(keyring) only, atomically.
  - Supports check mode (says what it would write). The logic lives in
    module_utils/prefixbench_apt.py (plain Python, unit-tested).
options:
  uri:
    description: Repository base URI.
    type: str
    required: true
  suite:
    description: Suite (the distribution codename).
    type: str
    required: true
  components:
    description: Components.
    type: list
    elements: str
    default: [main]
  keyring:
    description: Keyring file the bundle's own entry is signed by.
    type: path
    required: true
  path:
    description: The bundle's own source file.
    type: path
    required: true
  sources_dir:
    description: Directory of the source files (tests point it elsewhere).
    type: path
    default: /etc/apt/sources.list.d
  sources_list:
    description: The main source list.
    type: path
    default: /etc/apt/sources.list
author: prefixbench
"""

EXAMPLES = r"""
- name: List the Neuron repository unless the host already does
  prefixbench_apt_source:
    uri: https://apt.repos.neuron.amazonaws.com
    suite: noble
    keyring: /etc/apt/keyrings/neuron.asc
    path: /etc/apt/sources.list.d/prefixbench-neuron.list
  register: neuron_source
"""

RETURN = r"""
adopted:
  description: Files that already list the repository (left as they are).
  type: list
  elements: str
  returned: always
entries:
  description: The repository's entries found, each with its path and signed_by.
  type: list
  elements: dict
  returned: always
written:
  description: Whether the bundle's own file was (or in check mode would be) written.
  type: bool
  returned: always
"""

import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_apt import entries_for, is_source_file, render_own_file


def read_sources(sources_list: Path, sources_dir: Path) -> dict[str, str]:
    files = {}
    if sources_list.is_file():
        files[str(sources_list)] = sources_list.read_text(errors="replace")
    if sources_dir.is_dir():
        for path in sorted(sources_dir.iterdir()):
            if path.is_file() and is_source_file(path.name):
                files[str(path)] = path.read_text(errors="replace")
    return files


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uri": {"type": "str", "required": True},
            "suite": {"type": "str", "required": True},
            "components": {"type": "list", "elements": "str", "default": ["main"]},
            "keyring": {"type": "path", "required": True},
            "path": {"type": "path", "required": True},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
        },
        supports_check_mode=True,
    )
    p = module.params
    own = Path(p["path"])
    files = read_sources(Path(p["sources_list"]), Path(p["sources_dir"]))
    wanted = render_own_file(p["uri"], p["suite"], p["components"], p["keyring"])
    found = entries_for(p["uri"], files)
    others = [e for e in found if e.path != str(own)]
    result = {"entries": [e.as_dict() for e in found],
              "adopted": sorted({e.path for e in others}), "written": False}
    if others:
        # Another file lists the repository: ours would clash with it. Drop a stale own
        # file too (a host set up by the bundle first, by AWS's guide later).
        if own.exists():
            result["written"] = True
            if not module.check_mode:
                own.unlink()
        module.exit_json(changed=result["written"], **result)
    current = own.read_text() if own.is_file() else None
    if current == wanted:
        module.exit_json(changed=False, **result)
    result["written"] = True
    if not module.check_mode:
        own.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{own.name}.", dir=own.parent)
        tmp = Path(name)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(wanted)
            tmp.chmod(0o644)
            tmp.replace(own)
        finally:
            tmp.unlink(missing_ok=True)
    module.exit_json(changed=True, diff={"before": current or "", "after": wanted}, **result)


if __name__ == "__main__":
    main()
