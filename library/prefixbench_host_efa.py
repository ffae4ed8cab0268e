#!/usr/bin/python
"""Module: read which RDMA devices a host has and the kernel driver of each (EFA or not)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_host_efa
short_description: Read a host's RDMA devices and their drivers (is there EFA?)
description:
  - Lists C(/sys/class/infiniband) and, for each device, the kernel driver its
    C(device/driver) link resolves to. An EFA interface the kernel drives is a device
    bound to the C(efa) driver; a host without EFA (a trn2.3xlarge, an image without the
    efa driver) has none. The controller decides what that means
    (prefixbench.hosts.efa).
  - Changes nothing; standard library only.
options:
  sysfs_dir:
    description: The directory the kernel lists RDMA devices in.
    type: path
    default: /sys/class/infiniband
author: prefixbench
"""

EXAMPLES = r"""
- name: Read whether this host has EFA
  prefixbench_host_efa:
  register: __efa
"""

RETURN = r"""
drivers:
  description: Device name -> the name of its kernel driver ("" when it has none).
  type: dict
  returned: always
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def read_drivers(sysfs_dir: str) -> dict[str, str]:
    """``{device: driver}`` for every entry of ``sysfs_dir`` (absent: no device)."""
    root = Path(sysfs_dir)
    if not root.is_dir():
        return {}
    drivers = {}
    for entry in sorted(root.iterdir()):
        link = entry / "device" / "driver"
        drivers[entry.name] = link.resolve().name if link.exists() else ""
    return drivers


def main() -> None:
    module = AnsibleModule(argument_spec={"sysfs_dir": {"type": "path",
                                                        "default": "/sys/class/infiniband"}},
                           supports_check_mode=True)
    try:
        drivers = read_drivers(module.params["sysfs_dir"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read {module.params['sysfs_dir']}: {exc}")
    module.exit_json(changed=False, drivers=drivers)


if __name__ == "__main__":
    main()
