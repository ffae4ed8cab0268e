"""Health-wait decisions and the progress line."""

from __future__ import annotations

from prefixbench.servers.health import Probe, decide, progress_line, wait


def probe(http: int | None = None, state: str = "active", restarts: int = 0,
          line: str = "") -> Probe:
    return Probe(http_status=http, active_state=state, n_restarts=restarts,
                 last_log_line=line)


def test_healthy_needs_a_200_from_an_active_unit() -> None:
    assert decide(probe(200), 42, 1800, 0).verdict == "healthy"
    assert decide(probe(200, state="deactivating"), 42, 1800, 0).verdict == "waiting"


def test_a_long_compilation_is_waited_for() -> None:
    assert decide(probe(None), 1199, 1800, 0).verdict == "waiting"
    assert decide(probe(503), 1700, 1800, 0).verdict == "waiting"


def test_timeout_failure_and_crash_loop_end_the_wait() -> None:
    assert decide(probe(None), 1800, 1800, 0).reason == "not healthy within 1800 s"
    assert decide(probe(None, state="failed"), 10, 1800, 0).verdict == "failed"
    assert decide(probe(None, state="inactive"), 10, 1800, 0).verdict == "failed"
    looped = decide(probe(None, restarts=5), 60, 1800, 2)
    assert looped.verdict == "failed"
    assert "crash loop" in looped.reason
    assert decide(probe(None, restarts=4), 60, 1800, 2).verdict == "waiting"


def test_progress_line_shows_elapsed_state_and_last_log() -> None:
    line = progress_line("h1", "vllm-cached.service", 754,
                         probe(None, state="active", line="Compiling graph 3/9\n"))
    assert line == ("h1: waiting for vllm-cached.service: 12m34s, active, no answer; "
                    "last log: Compiling graph 3/9")
    long = progress_line("h1", "u", 1, probe(503, line="x" * 500))
    assert long.endswith("...") and len(long) < 250


class _Clock:
    """A test double of the controller's monotonic clock, moved by the probes."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_wait_begun_after_the_start_counts_from_the_units_start() -> None:
    clock = _Clock()
    # The unit started 7 s before the wait: the first look answers 503, the second,
    # 5 s later, 200; the host says then that the unit started 12.3 s ago.
    looks = iter([{"http_status": 503, "active_state": "active", "since_start_s": 7.0},
                  {"http_status": 200, "active_state": "active", "since_start_s": 12.3}])

    def probe(lines: int, wait_s: int) -> dict[str, object]:
        del lines
        clock.now += wait_s and 5
        return next(looks)

    got = wait(probe, host="h", unit="u", timeout=1800, clock=clock, from_unit_start=True)
    assert (got.healthy, got.elapsed, got.reason) == (True, 12.3, "healthy after 12 s")
    looks = iter([{"http_status": 503, "active_state": "active", "since_start_s": 7.0},
                  {"http_status": 200, "active_state": "active", "since_start_s": 12.3}])
    plain = wait(probe, host="h", unit="u", timeout=1800, clock=clock)
    assert plain.elapsed == 5  # without it: the wait's own time
    # The timeout counts from the unit's start too: 1801 s in, the first look is past it.
    looks = iter([{"http_status": None, "active_state": "active", "since_start_s": 1801.0},
                  {"journal": ["still loading"]}])
    late = wait(probe, host="h", unit="u", timeout=1800, clock=clock, journal_lines=1,
                from_unit_start=True)
    assert not late.healthy and late.reason == "not healthy within 1800 s"
