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
  - C(lookup) and C(publish) run on the controller against a store directory, or on the
    host against an C(s3://bucket/prefix) store (boto3 on the host); the first publisher
    of a key wins, and a key is visible only once its archive is whole.
  - With an S3 store, C(restore) looks the key up, downloads its archive beside the
    cache and unpacks it, in one step (no O(archive) given).
  - The logic lives in module_utils/prefixbench_compile_cache.py and
    module_utils/prefixbench_compile_store_s3.py (plain Python, unit-tested).
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
    description: The archive (pack writes it; restore and publish read it; restore from
      an S3 store downloads its own).
    type: path
  sha256:
    description: The archive's expected sha256 (restore, publish).
    type: str
  key:
    description: The compile key (restore, lookup, publish; pack and scan, optional, mark
      or look for the key's marker in the cache).
    type: str
  store:
    description: The store, a directory on the controller or C(s3://bucket/prefix)
      (lookup, publish; restore from S3).
    type: str
  region:
    description: The S3 store's region. Empty, boto3's default.
    type: str
    default: ""
  endpoint_url:
    description: An S3-compatible endpoint instead of AWS's.
    type: str
    default: ""
  access_key_id:
    description: Access key of the S3 store. Empty, boto3's credential chain (the
      instance profile on EC2).
    type: str
    default: ""
  secret_access_key:
    description: Secret key that goes with O(access_key_id); never logged.
    type: str
    default: ""
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

from pathlib import Path
from typing import Any

from ansible.module_utils import prefixbench_compile_store_s3 as s3store
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
from ansible.module_utils.prefixbench_s3 import SyncError, make_client

REQUIRED = {"scan": ["path"], "pack": ["path", "archive"],
            "restore": ["path", "key"], "lookup": ["store", "key"],
            "publish": ["archive", "sha256", "store", "key"]}


def _client(p: dict[str, Any]) -> Any:
    try:
        return make_client(p["region"], p["endpoint_url"], p["access_key_id"],
                           p["secret_access_key"])
    except SyncError as exc:
        raise CompileCacheError(str(exc)) from None


def _restore_from_s3(module: AnsibleModule, p: dict[str, Any]) -> None:
    """Look up, download beside the cache, check and unpack: one step on the host."""
    client = _client(p)
    manifest = s3store.lookup(client, p["store"], p["key"])
    if manifest is None:
        module.exit_json(changed=False, restored=0, kept=0, missing=True)
    archive = s3store.fetch(client, p["store"], manifest, str(Path(p["path"]).parent))
    try:
        result = restore(archive, str(manifest["sha256"]), p["path"], p["key"])
    except CompileCacheError as exc:
        module.warn(f"compile cache: key {p['key'][:16]} not restored ({exc}); the "
                    f"server compiles instead")
        module.exit_json(changed=False, restored=0, corrupt=str(exc))
    finally:
        Path(archive).unlink(missing_ok=True)
    module.exit_json(changed=result["restored"] > 0, **result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": list(REQUIRED)},
            "path": {"type": "path"},
            "archive": {"type": "path"},
            "sha256": {"type": "str"},
            "key": {"type": "str"},
            "store": {"type": "str"},
            "region": {"type": "str", "default": ""},
            "endpoint_url": {"type": "str", "default": ""},
            "access_key_id": {"type": "str", "default": "", "no_log": True},
            "secret_access_key": {"type": "str", "default": "", "no_log": True},
            "details": {"type": "dict", "default": {}},
        },
        required_if=[("state", state, needs) for state, needs in REQUIRED.items()],
        supports_check_mode=False,
    )
    p = module.params
    state = p["state"]
    remote = bool(p["store"]) and s3store.is_s3(p["store"])
    if p["store"] and not remote:
        p["store"] = str(Path(p["store"]).expanduser())
    if state == "restore" and not remote and not (p["archive"] and p["sha256"]):
        module.fail_json(msg="compile cache restore: give archive and sha256, or an "
                             "s3:// store")
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
            found = s3store.lookup(_client(p), p["store"], p["key"]) if remote \
                else lookup(p["store"], p["key"])
            module.exit_json(changed=False, manifest=found)
        if state == "publish":
            if remote:
                published, manifest = s3store.publish(
                    _client(p), p["archive"], p["sha256"], p["store"], p["key"],
                    details=p["details"])
            else:
                published, manifest = publish(p["archive"], p["sha256"], p["store"],
                                              p["key"], p["details"])
            module.exit_json(changed=published, manifest=manifest)
        if remote:
            _restore_from_s3(module, p)
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
