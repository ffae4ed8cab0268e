"""The timed client in front of the scheduler model, and the range of hits over arrival
timings (vLLM's own Scheduler under the same timed clients:
``tests/integration/test_schedsim_vs_vllm.py``)."""

from __future__ import annotations

import math

import pytest
from test_schedsim import _workload

from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.schedclient import send_timed
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedhybrid import scheduler_sim_for
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.predict.arrivals import JITTER_SEEDS, JITTER_SPANS, arrival_band, timings


def test_untimed_replay_is_the_send_loop() -> None:
    """No timing given: the same hits, preemptions and steps as sending each request
    with the concurrency cap and draining (the model's own client)."""
    prompts = _workload(7, 300, 4, 16, 12)
    outs = [1 + (5 * i) % 12 for i in range(len(prompts))]
    for conc in (1, 4, 9):
        want = SchedulerSim(4, 40, max_num_seqs=4, max_num_batched_tokens=24)
        idx = [want.send(p, o, concurrency=conc) for p, o in zip(prompts, outs, strict=True)]
        want.drain()
        got = SchedulerSim(4, 40, max_num_seqs=4, max_num_batched_tokens=24
                           ).replay(prompts, outs, concurrency=conc)
        assert got.hit_tokens == [want.hit_tokens(i) for i in idx]
        assert got.steps == want.steps
        assert sum(got.preemptions) > 0 or conc == 1


def test_a_late_request_reaches_the_engine_after_a_later_one() -> None:
    """Request 0 three steps late: request 1 (sharing its 8-token prefix) is admitted
    first and misses; request 0 then hits request 1's blocks. Results stay in the
    prompts' order."""
    a, b = (*range(1, 9), 100, 101), (*range(1, 9), 200, 201)
    sim = SchedulerSim(4, None)
    got = sim.replay([a, b], 2, concurrency=2, release=[0, 0], lag=[3, 0])
    assert got.hit_tokens == [8, 0]
    on_time = SchedulerSim(4, None).replay([a, b], 2, concurrency=2)
    assert on_time.hit_tokens == [0, 8]


def test_a_timing_must_cover_every_request() -> None:
    with pytest.raises(ValueError, match="as many outputs, releases and lags"):
        send_timed(SchedulerSim(4), [(1, 2)], [1], concurrency=1, release=[0, 1], lag=[0])


def _band_workload() -> tuple[list[tuple[int, ...]], list[int]]:
    prompts = _workload(11, 80, 16, 12, 8)
    return prompts, [8] * len(prompts)


def test_the_band_holds_the_point_and_names_its_ends() -> None:
    prompts, outs = _band_workload()

    def new_sim() -> SchedulerSim:
        return scheduler_sim_for("hybrid", 16, 60, sliding_window=128, max_num_seqs=4,
                                 max_num_batched_tokens=64)

    point = new_sim().replay(prompts, outs, concurrency=4)
    band = arrival_band(prompts, outs, new_sim=new_sim, serving=Serving(concurrency=4))
    assert band.variants == 1 + len(JITTER_SPANS) * JITTER_SEEDS
    assert band.lo_hit_tokens <= point.total_hit_tokens <= band.hi_hit_tokens
    assert band.lo_hit_tokens < band.hi_hit_tokens, "timing moves this workload's hits"
    assert band.query_tokens == point.query_tokens
    assert "jitter" in band.lo_timing or "jitter" in band.hi_timing
    assert f"{band.lo:.2%} to {band.hi:.2%}" in band.describe()


def test_paced_traffic_spans_one_at_a_time_to_all_at_once() -> None:
    """A finite rate: its limits are in the band, the one-at-a-time replay's hits among
    them (requests never overlap), as is the point (all at once)."""
    prompts, outs = _band_workload()

    def new_sim() -> SchedulerSim:
        return SchedulerSim(16, 30, max_num_seqs=4, max_num_batched_tokens=64)

    serial = PrefixCacheSim(16, 30).replay(prompts, outs[0])
    band = arrival_band(prompts, outs, new_sim=new_sim, serving=Serving(concurrency=4),
                        request_rate=5.0)
    assert band.lo_hit_tokens <= serial.total_hit_tokens <= band.hi_hit_tokens
    names = [t.name for t in timings(len(prompts), request_rate=5.0)]
    assert names[:2] == ["as soon as the client may send", "one at a time"]
    assert any("steps of 1000 ms" in n for n in names)
    # the one-at-a-time timing alone: requests never overlap
    one = next(t for t in timings(len(prompts), request_rate=5.0,
                                  serial_gap=16 * 12 + 9) if t.name == "one at a time")
    sim = new_sim()
    got = sim.replay(prompts, outs, concurrency=4, release=one.release, lag=one.lag)
    assert got.hit_tokens == serial.hit_tokens


def test_a_large_workload_gets_fewer_seeds() -> None:
    prompts = [(i, i + 1) for i in range(60_000)]
    band = arrival_band(prompts, [1] * len(prompts), new_sim=lambda: SchedulerSim(16),
                        serving=Serving(concurrency=2))
    assert 1 < band.variants < 1 + len(JITTER_SPANS) * JITTER_SEEDS
    assert math.isclose(band.lo, band.hi)  # nothing shared: nothing to move
