#!/usr/bin/python
"""Module: the shared compile cache's steps, on a host (scan, pack, restore) or on the
controller (lookup, publish, and the per-key claim: claim, release, wait)."""

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
  - C(claim) takes the claim of a key the store lacks for O(host) unless another host
    holds it (the first to ask compiles); C(release) removes the holder's claim
    (C(published)) or marks it C(failed); C(wait) polls the store for up to O(slice) seconds for the
    holder's publish and says C(published), C(failed) (nothing left to wait for) or
    C(waiting). Claims are kept per O(scope), the playbook's invocation.
  - The logic lives in module_utils/prefixbench_compile_cache.py,
    module_utils/prefixbench_compile_claim.py and
    module_utils/prefixbench_compile_store_s3.py (plain Python, unit-tested).
options:
  state:
    description: The step.
    type: str
    required: true
    choices: [scan, pack, restore, lookup, publish, claim, release, wait]
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
  scope:
    description: The claims' scope, the playbook's invocation (claim, release, wait).
    type: str
  host:
    description: The host that claims or releases.
    type: str
  outcome:
    description: How the holder is done with its claim (release).
    type: str
    choices: [published, failed]
  why:
    description: A line saying why, kept in the claim (release).
    type: str
    default: ""
  slice:
    description: Seconds one C(wait) call polls before it answers C(waiting).
    type: float
    default: 60
  deadline:
    description: When (seconds since the epoch) waiting ends; past it C(wait) answers
      C(timeout). 0, no deadline.
    type: float
    default: 0
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
  returned: lookup, publish, wait
won:
  description: Whether this host holds the claim.
  type: bool
  returned: claim
holder:
  description: The claim as it stands (host, outcome, why), or null when nobody holds it.
  type: dict
  returned: claim, release, wait
waited:
  description: C(published), C(failed), C(waiting) or C(timeout).
  type: str
  returned: wait
"""

import time
from pathlib import Path
from typing import Any

from ansible.module_utils import prefixbench_compile_claim as claims
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
from ansible.module_utils.prefixbench_s3 import (
    SyncError,
    conflict,
    describe,
    make_client,
    not_found,
    precondition_failed,
)

REQUIRED = {"scan": ["path"], "pack": ["path", "archive"],
            "restore": ["path", "key"], "lookup": ["store", "key"],
            "publish": ["archive", "sha256", "store", "key"],
            "claim": ["store", "key", "scope", "host"],
            "release": ["store", "key", "scope", "host", "outcome"],
            "wait": ["store", "key", "scope"]}
#: Seconds between two looks at the store while waiting.
POLL_S = 2.0


def _lost(exc: BaseException) -> bool:
    return precondition_failed(exc) or conflict(exc)


def _claim_step(p: dict[str, Any], remote: bool) -> dict[str, Any]:
    """claim, release or wait, against either kind of store."""
    state, store, key = p["state"], p["store"], p["key"]
    book: claims.DirClaims | claims.S3Claims
    if remote:
        client = _client(p)
        bucket, prefix = s3store.location(store)
        book = claims.S3Claims(client, bucket, prefix, p["scope"], lost=_lost,
                               not_found=not_found)

        def look() -> dict[str, Any] | None:
            return s3store.lookup(client, store, key)
    else:
        book = claims.DirClaims(store, p["scope"])

        def look() -> dict[str, Any] | None:
            return lookup(store, key)
    if state == "claim":
        won, found = book.claim(key, p["host"])
        return {"changed": won, "won": won, "holder": found}
    if state == "release":
        return {"changed": True,
                "holder": book.release(key, p["host"], p["outcome"], p["why"])}
    left = float(p["deadline"]) - time.time() if p["deadline"] else float(p["slice"])
    out = claims.wait(look, lambda: book.holder(key),
                      slice_s=max(0.0, min(float(p["slice"]), left)), poll_s=POLL_S)
    waited = out["state"]
    if waited == "waiting" and p["deadline"] and time.time() >= float(p["deadline"]):
        waited = "timeout"
    return {"changed": False, "waited": waited, "manifest": out["manifest"],
            "holder": out["holder"]}


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
            "scope": {"type": "str"},
            "host": {"type": "str"},
            "outcome": {"type": "str", "choices": ["published", "failed"]},
            "why": {"type": "str", "default": ""},
            "slice": {"type": "float", "default": 60},
            "deadline": {"type": "float", "default": 0},
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
        if state in ("claim", "release", "wait"):
            try:
                done = _claim_step(p, remote)
            except (CompileCacheError, OSError, ValueError):
                raise
            except Exception as exc:  # noqa: BLE001 - botocore's, as one line
                raise CompileCacheError(describe(exc)) from None
            module.exit_json(**done)
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
    except (CompileCacheError, OSError, ValueError) as exc:
        module.fail_json(msg=f"compile cache {state}: {exc}")


if __name__ == "__main__":
    main()
