#!/usr/bin/python
"""Module: mirror an S3 prefix into a directory of the host, with boto3, on the host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_s3_sync
short_description: Mirror an S3 prefix into a local directory, downloading only what differs
description:
  - Lists every object under C(s3://bucket/prefix/) (all pages) and makes each one the
    file C(dest/<key without the prefix>). Runs on the host, so every host pulls from its
    region's mirror.
  - Downloads only files that are missing or differ from the object, as recorded in the
    local manifest C(dest/.prefixbench-s3-manifest.json) (size, ETag, sha256). A file
    already there without a manifest entry is adopted when its size and MD5 match a
    single-part ETag.
  - Each file is streamed into a temporary file beside it, checked (size, MD5 against a
    single-part ETag) and renamed into place, so the destination never holds a partial
    file; temporary files left by a killed run are removed by the next run. Downloads
    are conditional on the listed ETag, so an object replaced mid-sync fails instead of
    mixing versions. Transient errors are retried with backoff.
  - Local files that the mirror does not hold are kept unless I(delete_extra).
  - Check mode lists the bucket and compares, and reports what would be downloaded
    without writing anything.
  - The logic lives in module_utils/prefixbench_s3.py (names, client, local files) and
    module_utils/prefixbench_s3_transfer.py (the sync); plain Python, unit-tested.
requirements:
  - boto3 importable by the Python that runs the module (python3-boto3 on Debian/Ubuntu).
options:
  bucket:
    description: Bucket of the mirror. Give I(bucket) or I(uri).
    type: str
  prefix:
    description: Key prefix of the model in the bucket; empty for the whole bucket.
    type: str
    default: ""
  uri:
    description: C(s3://bucket/prefix), instead of I(bucket) and I(prefix).
    type: str
  dest:
    description: Directory that receives the files (created when missing).
    type: path
    required: true
  region:
    description: Region of the bucket; empty for boto3's default.
    type: str
    default: ""
  endpoint_url:
    description: Endpoint of an S3-compatible service; empty for AWS S3.
    type: str
    default: ""
  access_key_id:
    description:
      - Access key id. Empty to use boto3's credential chain (environment, config files,
        the EC2 instance profile). Never logged.
    type: str
    default: ""
  secret_access_key:
    description: Secret of I(access_key_id). Never logged.
    type: str
    default: ""
  delete_extra:
    description: Delete local files that the mirror does not hold.
    type: bool
    default: false
  verify:
    description: Re-hash every local file against its manifest sha256 (slow on a big model).
    type: bool
    default: false
  concurrency:
    description: Files downloaded at the same time.
    type: int
    default: 8
  retries:
    description: Further attempts for a transient error, per request and per file.
    type: int
    default: 5
  owner:
    description: Owner of the files and folders written; empty keeps the connecting user's.
    type: str
    default: ""
  group:
    description: Group of the files and folders written; empty keeps the connecting user's.
    type: str
    default: ""
notes:
  - Supports check mode.
author: prefixbench
"""

EXAMPLES = r"""
- name: Mirror the model from the region's bucket
  prefixbench_s3_sync:
    bucket: models-us-east-2
    prefix: gpt-oss-120b
    region: us-east-2
    dest: /opt/models/gpt-oss-120b

- name: Mirror from an S3-compatible endpoint with explicit keys
  prefixbench_s3_sync:
    uri: s3://models/tiny-llama
    endpoint_url: http://10.213.0.1:8081
    access_key_id: "{{ vault_s3_key_id }}"
    secret_access_key: "{{ vault_s3_secret }}"
    dest: /opt/models/tiny-llama
"""

RETURN = r"""
revision:
  description:
    - C(sha256:<hex>) over the sorted path, size and sha256 of every file of the mirror,
      as they are on disk after the sync; the same bytes give the same revision in every
      region. Null in check mode when files would be downloaded.
  type: str
  returned: always
downloaded:
  description: Files downloaded (in check mode, that would be).
  type: list
  elements: str
  returned: always
adopted:
  description: Files already on disk whose MD5 matched, recorded without a download.
  type: list
  elements: str
  returned: always
deleted:
  description: Local files deleted because the mirror does not hold them (delete_extra).
  type: list
  elements: str
  returned: always
extra:
  description: Local files the mirror does not hold, left alone.
  type: list
  elements: str
  returned: always
removed_parts:
  description: Temporary files of an interrupted earlier run, removed.
  type: list
  elements: str
  returned: always
bytes_downloaded:
  description: Bytes downloaded (in check mode, that would be).
  type: int
  returned: always
files:
  description: Files in the mirror.
  type: int
  returned: always
bytes_total:
  description: Bytes in the mirror.
  type: int
  returned: always
elapsed_s:
  description: Seconds the sync took.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.prefixbench_s3 import Owner, SyncError, make_client, parse_s3_uri
from ansible.module_utils.prefixbench_s3_transfer import Sync


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bucket": {"type": "str"},
            "prefix": {"type": "str", "default": ""},
            "uri": {"type": "str"},
            "dest": {"type": "path", "required": True},
            "region": {"type": "str", "default": ""},
            "endpoint_url": {"type": "str", "default": ""},
            "access_key_id": {"type": "str", "default": "", "no_log": True},
            "secret_access_key": {"type": "str", "default": "", "no_log": True},
            "delete_extra": {"type": "bool", "default": False},
            "verify": {"type": "bool", "default": False},
            "concurrency": {"type": "int", "default": 8},
            "retries": {"type": "int", "default": 5},
            "owner": {"type": "str", "default": ""},
            "group": {"type": "str", "default": ""},
        },
        required_one_of=[("bucket", "uri")],
        mutually_exclusive=[("bucket", "uri")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["uri"]:
            bucket, prefix = parse_s3_uri(p["uri"])
        else:
            bucket, prefix = p["bucket"], p["prefix"]
        client = make_client(region=p["region"], endpoint_url=p["endpoint_url"],
                             access_key_id=p["access_key_id"],
                             secret_access_key=p["secret_access_key"], retries=p["retries"])
        result = Sync(client=client, bucket=bucket, prefix=prefix, dest=p["dest"],
                      check_mode=module.check_mode, delete_extra=p["delete_extra"],
                      verify=p["verify"], concurrency=max(1, p["concurrency"]),
                      retries=max(0, p["retries"]),
                      owner=Owner.named(p["owner"], p["group"])).run()
    except SyncError as exc:
        module.fail_json(msg=f"s3 sync into {p['dest']}: {exc}")
    module.exit_json(**result.as_dict())


if __name__ == "__main__":
    main()
