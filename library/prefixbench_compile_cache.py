#!/usr/bin/python
"""Module: the shared compile cache's steps, on a host (scan, pack, restore) or on the
controller (lookup, publish)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_compile_cache
short_description: Scan, pack, restore, look up and publish compiled-graph archives
description:
  - C(scan) counts the files of a server's compile-cache directory (a start that adds
    files compiled something).
  - C(pack) writes the directory's files into a gzipped tar (temporary name, then
    renamed) and returns its sha256.
  - C(restore) checks an archive's sha256, then unpacks it into the cache directory
    without replacing files already there; a corrupt or mismatched archive changes
    nothing and is reported as one warning, so the server compiles as usual.
  - C(lookup) and C(publish) run on the controller against the store directory; the
    first publisher of a key wins, and a key is visible only once its archive is whole.
  - The logic lives in module_utils/prefixbench_compile_cache.py (plain Python,
    unit-tested).
options:
  state:
    description: The step.
    type: str
    required: true
    choices: [scan, pack, restore, lookup, publish]
  path:
    description: The compile-cache directory (scan, pack, restore).
    type: path
  archive:
    description: The archive (pack writes it; restore and publish read it).
    type: path
  sha256:
    description: The archive's expected sha256 (restore, publish).
    type: str
  key:
    description: The compile key (restore, lookup, publish; pack and scan, optional, mark
      or look for the key's marker in the cache).
    type: str
  store:
    description: The store directory on the controller (lookup, publish).
    type: path
  details:
    description: What the manifest records besides the archive (publish).
    type: dict
    default: {}
author: prefixbench
"""

EXAMPLES = r"""
- name: Restore the fleet's compiled graphs before the server starts
  prefixbench_compile_cache:
    state: restore
    path: /var/cache/vllm-prefixbench/inductor
    archive: /var/tmp/prefixbench-compile.tar.gz
    sha256: "{{ manifest.sha256 }}"
    key: "{{ compile_key }}"
"""

RETURN = r"""
files:
  description: Files in the cache (scan), or packed (pack).
  type: int
  returned: scan, pack
sha256:
  description: The packed archive's sha256.
  type: str
  returned: pack
restored:
  description: Files restored (restore).
  type: int
  returned: restore
manifest:
  description: The store's manifest of the key, or null when the store lacks it.
  type: dict
  returned: lookup, publish
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_compile_cache import (
    CompileCacheError,
    has_marker,
    lookup,
    pack,
    publish,
    restore,
    scan,
    write_marker,
)

REQUIRED = {"scan": ["path"], "pack": ["path", "archive"],
            "restore": ["path", "archive", "sha256", "key"], "lookup": ["store", "key"],
            "publish": ["archive", "sha256", "store", "key"]}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": list(REQUIRED)},
            "path": {"type": "path"},
            "archive": {"type": "path"},
            "sha256": {"type": "str"},
            "key": {"type": "str"},
            "store": {"type": "path"},
            "details": {"type": "dict", "default": {}},
        },
        required_if=[("state", state, needs) for state, needs in REQUIRED.items()],
        supports_check_mode=False,
    )
    p = module.params
    state = p["state"]
    try:
        if state == "scan":
            module.exit_json(changed=False, marker=bool(p["key"]) and has_marker(
                p["path"], p["key"]), **scan(p["path"]))
        if state == "pack":
            packed = pack(p["path"], p["archive"])
            if p["key"]:  # the packing host holds the key's graphs: its next start skips the copy
                write_marker(p["path"], p["key"])
            module.exit_json(changed=True, **packed)
        if state == "lookup":
            module.exit_json(changed=False, manifest=lookup(p["store"], p["key"]))
        if state == "publish":
            published, manifest = publish(p["archive"], p["sha256"], p["store"], p["key"],
                                          p["details"])
            module.exit_json(changed=published, manifest=manifest)
        try:
            result = restore(p["archive"], p["sha256"], p["path"], p["key"])
        except CompileCacheError as exc:
            module.warn(f"compile cache: key {p['key'][:16]} not restored ({exc}); the "
                        f"server compiles instead")
            module.exit_json(changed=False, restored=0, corrupt=str(exc))
        module.exit_json(changed=result["restored"] > 0, **result)
    except (CompileCacheError, OSError) as exc:
        module.fail_json(msg=f"compile cache {state}: {exc}")


if __name__ == "__main__":
    main()
