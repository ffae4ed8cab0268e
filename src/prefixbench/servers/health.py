"""Deciding, poll after poll, whether a starting vLLM server is healthy, still
compiling, or broken; and the progress line an operator sees while waiting.

The tutorial's first start compiles for up to 20 minutes, so "not healthy yet" is normal
for a long time: a wait only gives up on a timeout, a failed unit, or a crash loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

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


#: One round trip to the host: ``(journal_lines, wait_seconds) -> the probe module's
#: result`` (``http_status``, ``active_state``, ``n_restarts``, ``journal``).
ProbeFn = Callable[[int, int], Mapping[str, Any]]


@dataclass(frozen=True)
class WaitOutcome:
    """How a wait ended: healthy, or failed with the reason and the journal's tail."""

    healthy: bool
    elapsed: float
    reason: str
    last_log_line: str = ""
    journal: tuple[str, ...] = field(default_factory=tuple)


def _probe_of(raw: Mapping[str, Any]) -> Probe:
    return Probe(http_status=raw.get("http_status"),
                 active_state=str(raw.get("active_state", "unknown")),
                 n_restarts=int(raw.get("n_restarts", 0)),
                 last_log_line=(raw.get("journal") or [""])[-1])


def _since_start(raw: Mapping[str, Any]) -> float | None:
    since = raw.get("since_start_s")
    return float(since) if isinstance(since, int | float) and since >= 0 else None


def wait(probe: ProbeFn, *, host: str, unit: str, timeout: float, interval: int = 15,
         progress_every: float = 30, journal_lines: int = 200,
         progress: Callable[[str], None] = lambda line: None,
         clock: Callable[[], float] = time.monotonic,
         from_unit_start: bool = False) -> WaitOutcome:
    """Poll until :func:`decide` says healthy or failed. One probe covers up to
    ``interval`` s of waiting on the host (it returns at once when the server answers or
    the unit stops starting), so a healthy server costs one round trip; a progress line
    goes to ``progress`` every ``progress_every`` s.

    With ``from_unit_start`` (the caller started the unit itself, then did other work
    before waiting) time counts from the start of the unit's main process, which the
    probe reports on the host's clock (``since_start_s``): the elapsed time, the timeout
    and a healthy server's start-up are all the server's, not the wait's."""
    start = clock()
    raw = probe(1, 0)
    since = _since_start(raw) if from_unit_start else None
    if since is not None:
        start = min(start, clock() - since)
    restarts_at_start = int(raw.get("n_restarts", 0))
    last_progress = start
    while True:
        observed = _probe_of(raw)
        elapsed = clock() - start
        decision = decide(observed, elapsed, timeout, restarts_at_start)
        if decision.verdict == "healthy":
            exact = _since_start(raw) if since is not None else None
            if exact is not None:  # measured on the host at the look that saw it healthy
                return WaitOutcome(True, exact, f"healthy after {exact:.0f} s")
            return WaitOutcome(True, elapsed, decision.reason)
        if decision.verdict == "failed":
            journal = tuple(str(line) for line in probe(journal_lines, 0).get("journal") or ())
            return WaitOutcome(False, elapsed, decision.reason,
                               observed.last_log_line.strip(), journal)
        now = clock()
        if now - last_progress >= progress_every:
            progress(progress_line(host, unit, elapsed, observed))
            last_progress = now
        left = timeout - (clock() - start)
        raw = probe(1, max(1, min(interval, int(left) + 1)))
