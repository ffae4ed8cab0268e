"""Which scheduler a running server uses, read from its own command line.

The record's expectation is replayed through the engine model of the server that served
the bench: its KV-cache manager from the server's ``vllm:cache_config_info``
(:func:`prefixbench.predict.whatif.server_cache_model`), its scheduler from the argv of the
unit's main process (``/proc/<MainPID>/cmdline``, read by the bench's host step just
before the bench). When that argv cannot be read, the settings' rendered argv stands in
and the record says so.

* ``--scheduler-cls X``: vLLM builds ``X`` instead of its own scheduler
  (``SchedulerConfig.get_scheduler_cls``, vLLM 0.32). A class named ``Neuron...`` is the
  Neuron plugin's design (on the simulated fleet, the bundle's reference of it:
  :mod:`prefixbench_sim.neuron_scheduler`); ``...Async...`` schedules asynchronously.
* No ``--scheduler-cls`` on Neuron: the plugin installs its own scheduler, async when
  on-device sampling is configured and ``--no-async-scheduling`` is absent (aws-neuron-sdk
  ``vllm-neuron/docs/guides/reference-configuration.md``, the same rows at tags v2.31.1
  (c19b2e6) and v2.32.0 (a3247f5), read in those tags: "Scheduling options": async is on
  by default and "Requires on-device sampling"; "Sampling options":
  ``on_device_sampling_config`` is "Required for async scheduling").
* No ``--scheduler-cls`` elsewhere (vLLM on CPU): vLLM's own ``Scheduler``; the CPU
  platform turns async scheduling off.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["ServerScheduler", "parse_cmdline", "scheduler_of"]

SchedulerKind = Literal["neuron", "vllm"]

#: The flag that replaces the platform's scheduler (vLLM's ``EngineArgs.scheduler_cls``).
SCHEDULER_CLS_FLAG: Final = "--scheduler-cls"


@dataclass(frozen=True)
class ServerScheduler:
    """The scheduler a server runs and how that was learnt."""

    kind: SchedulerKind
    async_scheduling: bool
    #: Where it was read: the server's command line, or the settings standing in for it.
    source: str
    #: The ``--scheduler-cls`` given, if any.
    scheduler_cls: str | None = None


def parse_cmdline(raw: str | bytes) -> list[str]:
    """``/proc/<pid>/cmdline`` (NUL-separated, NUL-terminated) as an argv list."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return [part for part in text.split("\0") if part]


def _value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag v`` or ``--flag=v``); the last wins,
    as with argparse."""
    found = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def _on_device_sampling(argv: Sequence[str]) -> bool:
    """Whether ``--additional-config``'s ``neuron_config`` sets ``on_device_sampling_config``
    (anything but null)."""
    text = _value(argv, "--additional-config")
    if not text:
        return False
    try:
        config = json.loads(text)
    except ValueError:
        return False
    neuron = config.get("neuron_config") if isinstance(config, dict) else None
    return isinstance(neuron, dict) and neuron.get("on_device_sampling_config") is not None


def _async_flag(argv: Sequence[str]) -> bool | None:
    """``--async-scheduling`` / ``--no-async-scheduling`` as given (the last wins)."""
    said = None
    for arg in argv:
        if arg == "--async-scheduling":
            said = True
        elif arg == "--no-async-scheduling":
            said = False
    return said


def scheduler_of(argv: Sequence[str], platform: str, *, source: str) -> ServerScheduler:
    """The scheduler of a server started with ``argv`` on ``platform`` (see the module
    docstring); ``source`` says where ``argv`` came from."""
    cls = _value(argv, SCHEDULER_CLS_FLAG)
    flag = _async_flag(argv)
    if cls:
        name = cls.rsplit(".", 1)[-1]
        kind: SchedulerKind = "neuron" if name.startswith("Neuron") else "vllm"
        return ServerScheduler(kind, "Async" in name, f"{source}: {SCHEDULER_CLS_FLAG} {cls}",
                               scheduler_cls=cls)
    if platform == "neuron":
        sampling = _on_device_sampling(argv)
        asynchronous = sampling and flag is not False
        why = ("on-device sampling configured" if asynchronous else
               "--no-async-scheduling" if flag is False else "no on-device sampling")
        return ServerScheduler("neuron", asynchronous,
                               f"{source}: the Neuron plugin's scheduler ({why})")
    return ServerScheduler("vllm", False,
                           f"{source}: vLLM's own scheduler (async off on the {platform} "
                           f"platform)")
