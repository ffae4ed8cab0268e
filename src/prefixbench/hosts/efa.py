"""Whether a Neuron host has EFA, read from the host, and what its server units do about it.

AWS's quickstart for the vLLM server on Neuron: "If EFA (Elastic Fabric Adapter) is not
installed on your host instance, the server will fail to start. To work around this,
prepend ``NEURON_SKIP_EFA_AFFINITY=1`` to the ``vllm serve`` command"
(aws-neuron/aws-neuron-sdk ``deploy/environments/quickstart-deploy-dlc.rst``, Step 3's
note, the same sentence at tags v2.31.1 (c19b2e6) and v2.32.0 (a3247f5), read in those
tags on 2026-12-05; 2.33 and 2.34 pages were not reachable here). A
trn2.3xlarge has no EFA interface, and a plain Ubuntu image has no EFA driver.

The host says which it is: an EFA interface the kernel drives appears as an RDMA device
in ``/sys/class/infiniband/<device>`` whose ``device/driver`` is the ``efa`` kernel
module (the Linux kernel's ``drivers/infiniband/hw/efa``, which registers itself as
``efa``). ``library/prefixbench_host_efa.py`` reads that before any unit is written
(``roles/vllm_env/tasks/select.yml``, which every phase runs first), and
:func:`settings_update` turns ``vllm_service_efa: auto`` into ``present`` or ``absent``
in that host's settings. Where it is ``absent`` both units set the variable
(:func:`environment`); where EFA is present nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: The variable AWS's quickstart prepends where the host has no EFA.
SKIP_VAR: Final = "NEURON_SKIP_EFA_AFFINITY"
SOURCE: Final = ("aws-neuron/aws-neuron-sdk deploy/environments/quickstart-deploy-dlc.rst "
                 "at v2.31.1 and v2.32.0: without EFA the server fails to start")
#: Where the kernel lists RDMA devices, and the driver name of an EFA device.
SYSFS_DIR: Final = "/sys/class/infiniband"
DRIVER: Final = "efa"
SETTING: Final = "vllm_service_efa"
AUTO: Final = "auto"
PRESENT: Final = "present"
ABSENT: Final = "absent"
CHOICES: Final = (AUTO, PRESENT, ABSENT)


def efa_devices(drivers: Mapping[str, str]) -> list[str]:
    """The RDMA devices bound to the efa driver, from ``{device: driver name}``."""
    return sorted(name for name, driver in drivers.items() if driver == DRIVER)


def settings_update(settings: Mapping[str, Any], result: Mapping[str, Any]) -> dict[str, Any]:
    """The host's ``vllm_service_efa`` as read (``result`` is the module's), unless the
    inventory named it; {} when nothing was read."""
    if str(settings.get(SETTING, AUTO)) != AUTO or not isinstance(result.get("drivers"), dict):
        return {}
    return {SETTING: PRESENT if efa_devices(result["drivers"]) else ABSENT}


def note(settings: Mapping[str, Any], result: Mapping[str, Any] | None = None) -> str:
    """One line: what the host has and what its units do about it."""
    state = str(settings.get(SETTING, AUTO))
    drivers = (result or {}).get("drivers")
    read = isinstance(drivers, dict)
    devices = efa_devices(drivers) if isinstance(drivers, dict) else []
    if state == PRESENT:
        found = f" ({', '.join(devices)})" if devices else " (vllm_service_efa: present)"
        return f"EFA: present{found}; the units run as AWS's images do"
    if state == ABSENT:
        how = (f"no device under {SYSFS_DIR} bound to the efa driver" if read
               else "vllm_service_efa: absent")
        return f"EFA: none on this host ({how}): the units set {SKIP_VAR}=1 ({SOURCE})"
    return "EFA: not read yet (roles/vllm_env tasks_from: select reads it)"


def environment(settings: Mapping[str, Any]) -> dict[str, str]:
    """What a Neuron unit's environment gets from the host's EFA."""
    if str(settings.get(SETTING, AUTO)) == ABSENT:
        return {SKIP_VAR: "1"}
    return {}


def plan_line(settings: Mapping[str, Any]) -> str:
    """The plan's line (controller only, before any host is read)."""
    if settings.get("prefixbench_platform", "neuron") != "neuron":
        return ""
    state = str(settings.get(SETTING, AUTO))
    if state == AUTO:
        return (f"EFA: read from the host before its units are written; where it has "
                f"none (trn2.3xlarge, or an image without the efa driver) the units set "
                f"{SKIP_VAR}=1 ({SOURCE})")
    return note(settings)

