"""Deciding, poll after poll, whether a starting vLLM server is healthy, still
compiling, or broken; and the progress line an operator sees while waiting.

The tutorial's first start compiles for up to 20 minutes, so "not healthy yet" is normal
for a long time: a wait only gives up on a timeout, a failed unit, or a crash loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Verdict = Literal["healthy", "waiting", "failed"]

#: Restarts of the unit during one wait after which it is treated as a crash loop.
MAX_RESTARTS: Final = 3


@dataclass(frozen=True)
class Probe:
    """One observation of the server from its host."""

    http_status: int | None  # None: connection refused / no answer
    active_state: str  # systemd ActiveState: active, activating, failed, inactive...
    n_restarts: int
    last_log_line: str


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str


def decide(probe: Probe, elapsed: float, timeout: float, restarts_at_start: int) -> Decision:
    """What to do after ``probe``, ``elapsed`` seconds into a wait of ``timeout``."""
    if probe.http_status == 200 and probe.active_state == "active":
        return Decision("healthy", f"healthy after {elapsed:.0f} s")
    restarts = probe.n_restarts - restarts_at_start
    if probe.active_state == "failed":
        return Decision("failed", f"unit failed after {elapsed:.0f} s")
    if probe.active_state == "inactive" and elapsed > 0:
        return Decision("failed", f"unit stopped after {elapsed:.0f} s")
    if restarts >= MAX_RESTARTS:
        return Decision("failed", f"unit restarted {restarts} times in {elapsed:.0f} s "
                                  "(crash loop)")
    if elapsed >= timeout:
        return Decision("failed", f"not healthy within {timeout:.0f} s")
    return Decision("waiting", "")


def progress_line(host: str, unit: str, elapsed: float, probe: Probe) -> str:
    """One line of progress: host, unit, elapsed time, state and the last log line."""
    minutes, seconds = divmod(int(elapsed), 60)
    http = "no answer" if probe.http_status is None else f"HTTP {probe.http_status}"
    last = probe.last_log_line.strip()
    if len(last) > 140:
        last = last[:137] + "..."
    return (f"{host}: waiting for {unit}: {minutes}m{seconds:02d}s, {probe.active_state}, "
            f"{http}; last log: {last or '(none)'}")
