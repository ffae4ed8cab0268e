"""Prometheus parsing and the step-9 signals, on real recorded /metrics pages."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from prefixbench.measure.metrics import (
    CounterReset,
    MetricsParseError,
    SignalsDelta,
    delta,
    extract_signals,
    parse_exposition,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-cpu-seed-procedure"


def _page(stem: str, when: str) -> str:
    return (FIX / f"metrics_{stem}_{when}.txt").read_text()


def _delta(stem: str) -> SignalsDelta:
    return delta(extract_signals(_page(stem, "before")), extract_signals(_page(stem, "after")))


def test_parser_handles_escapes_special_values_comments_and_timestamps() -> None:
    text = (
        "# HELP x_total A counter\n"
        "# TYPE x_total counter\n"
        "# just a comment\n"
        "\n"
        'x_total{a="q\\"uote",b="back\\\\slash",c="new\\nline", d = "sp" } 3 1700000000000\n'
        "y NaN\n"
        'z{le="+Inf"} +Inf\n'
        "w -Inf\n"
        "v 1.5e+06\n"
        'u{} 2\n'
        'x_total{a="other"} 4\n'
    )
    expo = parse_exposition(text)
    assert expo.types == {"x_total": "counter"}
    first = expo.samples[0]
    assert first.labels == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline", "d": "sp"}
    assert first.value == 3.0
    assert first.timestamp_ms == 1700000000000
    assert math.isnan(expo.samples[1].value)
    assert expo.samples[2].value == math.inf
    assert expo.samples[2].labels == {"le": "+Inf"}
    assert expo.samples[3].value == -math.inf
    assert expo.samples[4].value == 1.5e6
    assert expo.samples[5].labels == {}
    # Lookup with or without the _total suffix, summed over other labels.
    assert expo.total("x") == 7.0
    assert expo.total("x_total", a="other") == 4.0
    assert expo.total("missing") is None


@pytest.mark.parametrize(
    "line",
    ['m{a="x} 1', "m{a=x} 1", "m", "m 1 2 3", "m notanumber", '{a="b"} 1', 'm{a="1",a="2"} 1'],
)
def test_parser_rejects_malformed_lines_with_their_number(line: str) -> None:
    with pytest.raises(MetricsParseError, match="line 2"):
        parse_exposition("ok 1\n" + line + "\n")


def test_every_fixture_page_parses() -> None:
    pages = sorted(FIX.glob("metrics_*.txt"))
    assert len(pages) == 16
    for page in pages:
        expo = parse_exposition(page.read_text())
        assert len(expo.samples) > 300, page.name


def test_signals_of_a_real_snapshot() -> None:
    sig = extract_signals(_page("cached_high_overlap", "after"))
    assert sig.prefix_cache_queries == 204800
    assert sig.prefix_cache_hits == 138240
    assert sig.prompt_tokens_local_cache_hit == 138240
    assert sig.prompt_tokens_local_compute == 66560
    assert sig.prompt_tokens_external_kv_transfer == 0
    assert sig.num_preemptions == 0
    assert sig.request_success == 50  # summed over finished_reason labels
    assert sig.kv_cache_usage == 0.0
    assert sig.kv_block_evictions_sampled is None  # needs --kv-cache-metrics
    assert sig.cache_config is not None
    assert sig.cache_config.block_size == 128
    assert sig.cache_config.enable_prefix_caching is True
    assert sig.cache_config.num_gpu_blocks == 8192
    assert "engine" not in sig.cache_config.labels
    assert sig.process_start_time_seconds is not None


def test_baseline_server_reports_caching_off() -> None:
    sig = extract_signals(_page("baseline_high_overlap", "after"))
    assert sig.cache_config is not None
    assert sig.cache_config.enable_prefix_caching is False
    d = _delta("baseline_high_overlap")
    assert d.queries == 0
    assert d.hit_ratio_queries is None  # nothing queried: no ratio, not a fake 0
    assert d.hit_ratio_by_source == 0.0


@pytest.mark.parametrize(
    ("stem", "hits", "queries"),
    [
        ("cached_high_overlap", 138240, 204800),
        ("cached_no_overlap", 7936, 204800),
        ("cached_sustained_c4", 615040, 819200),
        ("contam_high_overlap", 138240, 204800),
        ("contam_no_overlap_seed12345", 0, 204800),
        ("contam_no_overlap_seed0", 7936, 204800),
    ],
)
def test_deltas_of_the_recorded_runs(stem: str, hits: int, queries: int) -> None:
    d = _delta(stem)
    assert d.hits == hits
    assert d.queries == queries
    # The fixtures' README: by-source hit equals the hits delta, hit+compute = queries.
    assert d.get("prompt_tokens_local_cache_hit") == hits
    comp = d.get("prompt_tokens_local_compute")
    assert comp is not None
    assert hits + comp == queries
    assert d.hit_ratio_queries == pytest.approx(hits / queries)
    assert d.hit_ratio_by_source == pytest.approx(hits / queries)


def test_high_overlap_ratio_is_the_tutorials_67_5_percent() -> None:
    assert _delta("cached_high_overlap").hit_ratio_queries == pytest.approx(0.675)


def test_delta_detects_a_restart_by_counter_going_back() -> None:
    before = extract_signals(_page("cached_no_overlap", "after"))
    after = extract_signals(_page("cached_high_overlap", "after"))  # fewer tokens
    with pytest.raises(CounterReset, match="went backwards"):
        delta(before, after)


def test_delta_detects_a_restart_by_process_start_time() -> None:
    # Same counters, another server process (contam_* ran on a second fresh server).
    before = extract_signals(_page("cached_high_overlap", "before"))
    after = extract_signals(_page("contam_high_overlap", "after"))
    assert before.process_start_time_seconds != after.process_start_time_seconds
    with pytest.raises(CounterReset, match="restarted"):
        delta(before, after)


def test_delta_round_trips_through_a_dict() -> None:
    d = _delta("cached_sustained_c4")
    again = SignalsDelta.from_dict(d.to_dict())
    assert again.counters == d.counters
    assert again.hit_ratio_by_source == d.hit_ratio_by_source
    assert again.cache_config is not None
    assert again.cache_config.block_size == 128


def test_measured_ratios_for_a_record() -> None:
    m = _delta("cached_no_overlap").measured()
    assert m["hit_ratio_queries"] == pytest.approx(7936 / 204800)
    assert (m["hit_tokens"], m["query_tokens"], m["preemptions"]) == (7936, 204800, 0)
