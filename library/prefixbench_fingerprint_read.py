#!/usr/bin/python
"""Module: read on a host, in one round trip, everything its fingerprint is made of."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_fingerprint_read
short_description: Read what a host's fingerprint is made of, in one round trip
description:
  - Returns the same raw data that setup (min), package_facts, a command, slurp and stat
    tasks would, in the shapes the prefixbench_fingerprint filter takes, so that a host's
    fingerprint costs one module round trip instead of eight.
  - The distribution and kernel come from ansible-core's own fact collectors (the values
    setup gives); packages from dpkg-query, every installed package with its version.
  - The instance type as the host reports it, from EC2's instance metadata (IMDSv2: a
    token, then C(latest/meta-data/instance-type); one second per request, nothing off
    EC2), and C(neuron-ls -j)'s output when the tool is installed.
  - Changes nothing.
options:
  python:
    description: The vLLM environment's interpreter, asked for its distributions' versions.
    type: path
    required: true
  distributions:
    description: The distributions whose versions the interpreter reports (null when absent).
    type: list
    elements: str
    required: true
  driver_files:
    description: Files that may hold the Neuron driver version; the first readable one wins.
    type: list
    elements: path
    default: []
  units:
    description: Unit files to checksum (sha256).
    type: list
    elements: path
    default: []
  model_record:
    description: The model's record file, returned as its content.
    type: path
    required: true
  imds_url:
    description: The base of EC2's instance metadata service.
    type: str
    default: http://169.254.169.254
  neuron_ls:
    description: The neuron-ls executable; its C(-j) output is returned when it exists.
    type: path
    default: /opt/aws/neuron/bin/neuron-ls
author: prefixbench
"""

EXAMPLES = r"""
- name: Read the fingerprint's data
  prefixbench_fingerprint_read:
    python: /opt/vllm-prefixbench/venv/bin/python
    distributions: [vllm, vllm-neuron]
    driver_files: [/sys/module/neuron/version]
    units: [/etc/systemd/system/vllm-baseline.service]
    model_record: /var/lib/models/gpt-oss/.prefixbench-model.json
"""

RETURN = r"""
facts:
  description: distribution, distribution_version and kernel, as setup reports them.
  type: dict
  returned: always
packages:
  description: Installed packages as package_facts gives them (name -> [{version}]).
  type: dict
  returned: always
venv_versions:
  description: JSON of the environment's distribution versions (empty when it failed).
  type: str
  returned: always
driver:
  description: One slurp-like result per driver file (content base64, or failed).
  type: list
  elements: dict
  returned: always
units:
  description: One stat-like result per unit (stat.exists, stat.path, stat.checksum).
  type: list
  elements: dict
  returned: always
model:
  description: One slurp-like result for the model record.
  type: list
  elements: dict
  returned: always
imds:
  description: instance_type as the metadata service gave it (null off EC2), msg why not.
  type: dict
  returned: always
neuron_ls:
  description: rc, stdout and stderr of C(neuron-ls -j) (rc null when the tool is absent).
  type: dict
  returned: always
"""

import base64
import hashlib
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

_VERSIONS = """
import importlib.metadata as m, json, sys
def v(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({n: v(n) for n in sys.argv[1:]}))
"""


def _slurp(path: str) -> dict[str, Any]:
    try:
        return {"source": path,
                "content": base64.b64encode(Path(path).read_bytes()).decode()}
    except OSError as exc:
        return {"source": path, "failed": True, "msg": str(exc)}


def _stat(path: str) -> dict[str, Any]:
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return {"item": path, "stat": {"exists": False, "path": path}}
    return {"item": path, "stat": {"exists": True, "path": path, "checksum": digest}}


_IMDS_TIMEOUT = 1.0


def _imds(base: str) -> dict[str, Any]:
    """The instance type from IMDSv2; no proxy (the service is link-local)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    base = base.rstrip("/")
    try:
        token_req = urllib.request.Request(  # noqa: S310 (main allows http(s) only)
            f"{base}/latest/api/token", method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with opener.open(token_req, timeout=_IMDS_TIMEOUT) as resp:
            token = resp.read().decode()
        type_req = urllib.request.Request(  # noqa: S310 (main allows http(s) only)
            f"{base}/latest/meta-data/instance-type",
            headers={"X-aws-ec2-metadata-token": token})
        with opener.open(type_req, timeout=_IMDS_TIMEOUT) as resp:
            value = resp.read().decode().strip()
    except (OSError, ValueError) as exc:  # URLError, HTTPError and timeouts are OSErrors
        return {"instance_type": None, "msg": f"{base}: {exc}"}
    return {"instance_type": value or None, "msg": "" if value else f"{base}: empty answer"}


def _neuron_ls(module: AnsibleModule, path: str) -> dict[str, Any]:
    if not os.access(path, os.X_OK):
        return {"rc": None, "stdout": "", "stderr": f"{path} is not installed"}
    rc, out, err = module.run_command([path, "-j"])
    return {"rc": rc, "stdout": out, "stderr": err}


def _facts(module: AnsibleModule) -> dict[str, Any]:
    from ansible.module_utils.facts.system.distribution import (  # noqa: PLC0415
        DistributionFactCollector,
    )
    from ansible.module_utils.facts.system.platform import (  # noqa: PLC0415
        PlatformFactCollector,
    )

    got: dict[str, Any] = {}
    for collector in (DistributionFactCollector(), PlatformFactCollector()):
        got.update(collector.collect(module=module))
    return {k: got.get(k) for k in ("distribution", "distribution_version",
                                    "distribution_major_version", "kernel")}


def _packages(module: AnsibleModule) -> dict[str, list[dict[str, str]]]:
    rc, out, err = module.run_command(
        ["dpkg-query", "--show", "--showformat=${Package}\t${Version}\t${Status}\n"])
    if rc != 0:
        module.fail_json(msg=f"dpkg-query failed: {err.strip() or out.strip()}")
    packages: dict[str, list[dict[str, str]]] = {}
    for line in out.splitlines():
        name, _, rest = line.partition("\t")
        version, _, status = rest.partition("\t")
        if name and status.endswith(" installed"):  # not removed-with-config-left
            packages.setdefault(name, []).append({"version": version, "source": "apt"})
    return packages


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "distributions": {"type": "list", "elements": "str", "required": True},
            "driver_files": {"type": "list", "elements": "path", "default": []},
            "units": {"type": "list", "elements": "path", "default": []},
            "model_record": {"type": "path", "required": True},
            "imds_url": {"type": "str", "default": "http://169.254.169.254"},
            "neuron_ls": {"type": "path", "default": "/opt/aws/neuron/bin/neuron-ls"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if urllib.parse.urlsplit(params["imds_url"]).scheme not in ("http", "https"):
        module.fail_json(msg=f"imds_url must be an http(s) URL, got {params['imds_url']!r}")
    rc, out, _ = module.run_command(
        [params["python"], "-c", _VERSIONS, *params["distributions"]])
    venv_versions = out.strip() if rc == 0 else ""
    module.exit_json(
        changed=False, facts=_facts(module), packages=_packages(module),
        venv_versions=venv_versions,
        driver=[_slurp(p) for p in params["driver_files"]],
        units=[_stat(p) for p in params["units"]],
        model=[_slurp(params["model_record"])],
        imds=_imds(params["imds_url"]),
        neuron_ls=_neuron_ls(module, params["neuron_ls"]))


if __name__ == "__main__":
    main()
