"""Every outcome of every verdict, from records built from the recorded runs.

The records are the real vLLM runs in tests/fixtures/vllm-cpu-seed-procedure (through
report_runs.make_run), altered only where an outcome needs it; each case says how. The
recorded figures: high-overlap cached / baseline median TTFT 0.45; no-overlap 1.12
(interval straddling 1.10); hit ratios 67.50% high overlap (as expected) and 3.88%
no-overlap (0% expected: prompts carried over from the high-overlap run); the sustained
run at 2 req/s x 128 tokens served 255 of the 256 tok/s offered (rate-capped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from report_runs import BENCHES, make_run, scale_times

from prefixbench.measure.records import with_checksum
from prefixbench.report import build_summary
from prefixbench.report.model import Verdict
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, NOT_RUN, PASS

Bench = dict[str, Any]
WITH_BASELINE_LOAD = (*BENCHES, ("baseline", "sustained_c4"))


def _only(conf: str, wl: str, change: Callable[[Bench], Bench]
          ) -> Callable[[str, str, str, int, Bench], Bench]:
    def transform(host: str, c: str, w: str, rep: int, b: Bench) -> Bench:
        return change(b) if (c, w) == (conf, wl) else b
    return transform


def _jitter(b: Bench) -> Bench:
    """The same run, each request's TTFT 20% faster or slower in turn."""
    out = dict(b)
    out["ttfts"] = [x * (0.8 if i % 2 else 1.2) for i, x in enumerate(b["ttfts"])]
    return out


def _baseline_load(ttft: float, throughput: float = 1.0) -> Callable[[Bench], Bench]:
    """Baseline under load: TTFTs ``ttft`` x the cached run's, output throughput
    ``throughput`` x it."""
    def change(b: Bench) -> Bench:
        out = scale_times(b, ttft)
        out["output_throughput"] = b["output_throughput"] * throughput
        return out
    return change


def _keep_workloads(run: Path, names: Sequence[str]) -> None:
    data = json.loads((run / "run.json").read_text())
    data["workloads"] = [w for w in data["workloads"] if w["name"] in names]
    (run / "run.json").write_text(json.dumps(data))


def _set_rate(run: Path, workload: str, rate: float) -> None:
    """The run as if ``workload`` had been offered ``rate`` requests/s: in run.json and
    in each of its records (workload and bench), each record written with its checksum."""
    data = json.loads((run / "run.json").read_text())
    for w in data["workloads"]:
        if w["name"] == workload:
            w["request_rate"] = rate
    (run / "run.json").write_text(json.dumps(data))
    for path in run.glob(f"*/*/{workload}/rep*.json"):
        record = json.loads(path.read_text())
        record["workload"]["request_rate"] = rate
        record["bench"]["request_rate"] = rate
        path.write_text(json.dumps(with_checksum(record)))


def _verdict(run: Path, name: str) -> Verdict:
    return next(v for v in build_summary(run).host("host-a").verdicts if v.name == name)


# -- TTFT lower (high overlap) ----------------------------------------------------------

def test_ttft_lower_pass_fail_inconclusive_not_run(tmp_path: Path) -> None:
    name = "high_overlap_ttft_lower"
    v = _verdict(make_run(tmp_path / "as-recorded"), name)
    assert v.status == PASS and v.numbers["ratio_high"] <= 0.90, v.detail  # type: ignore[operator]
    # The cached server 3x slower than recorded: 1.36 x baseline.
    v = _verdict(make_run(tmp_path / "slow", transform=_only(
        "cached", "high_overlap", lambda b: scale_times(b, 3.0))), name)
    assert v.status == FAIL and v.numbers["ratio_low"] > 0.90, v.detail  # type: ignore[operator]
    # 2x slower: the ratio (0.91) at the threshold, its interval across it.
    v = _verdict(make_run(tmp_path / "edge", transform=_only(
        "cached", "high_overlap", lambda b: scale_times(b, 2.0))), name)
    assert v.status == INCONCLUSIVE, v.detail
    assert v.numbers["ratio_low"] <= 0.90 < v.numbers["ratio_high"]  # type: ignore[operator]
    assert "would decide it" in v.detail or "too close to the threshold" in v.detail
    run = make_run(tmp_path / "none")
    _keep_workloads(run, ["no_overlap", "sustained_c4"])
    assert _verdict(run, name).status == NOT_RUN


# -- No regression (no overlap) ---------------------------------------------------------

def test_no_regression_pass_fail_inconclusive_not_run(tmp_path: Path) -> None:
    name = "no_overlap_no_regression"
    v = _verdict(make_run(tmp_path / "as-recorded"), name)
    assert v.status == INCONCLUSIVE, v.detail  # 1.12, interval straddles 1.10
    # The cached run 10% faster than recorded: 1.01 x baseline.
    v = _verdict(make_run(tmp_path / "even", transform=_only(
        "cached", "no_overlap", lambda b: scale_times(b, 0.9))), name)
    assert v.status == PASS and v.numbers["ratio_high"] <= 1.10, v.detail  # type: ignore[operator]
    # 30% slower than recorded: 1.46 x baseline, a regression.
    v = _verdict(make_run(tmp_path / "slow", transform=_only(
        "cached", "no_overlap", lambda b: scale_times(b, 1.3))), name)
    assert v.status == FAIL and v.numbers["ratio_low"] > 1.10, v.detail  # type: ignore[operator]
    run = make_run(tmp_path / "none")
    _keep_workloads(run, ["high_overlap", "sustained_c4"])
    assert _verdict(run, name).status == NOT_RUN


# -- Hit rate as expected ---------------------------------------------------------------

def test_hit_rate_pass_fail_inconclusive_not_run(tmp_path: Path) -> None:
    name = "hit_rate_matches_expected"
    v = _verdict(make_run(tmp_path / "as-recorded"), name)
    assert v.status == FAIL, v.detail  # 3.88% no-overlap hits where 0% is expected
    assert "no_overlap queries 3.88% vs expected 0.00% (+3.88 pp)" in v.detail

    # The served tokens' expectation knows the 31 prompt blocks carried over (7936 / 128).
    def served(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"served_ratio": 7936 / 204800} if (conf, wl) == ("cached", "no_overlap") \
            else {}

    v = _verdict(make_run(tmp_path / "served", expected=served), name)
    assert v.status == PASS, v.detail
    # The cached no-overlap result missing: the criterion cannot be judged in full.
    v = _verdict(make_run(tmp_path / "missing", benches=[
        b for b in BENCHES if b != ("cached", "no_overlap")], expected=served), name)
    assert v.status == INCONCLUSIVE and "no_overlap: no result" in v.detail, v.detail
    run = make_run(tmp_path / "none")
    _keep_workloads(run, ["sustained_c4"])
    assert _verdict(run, name).status == NOT_RUN


# -- Benefit under load: the latency half -----------------------------------------------

def test_sustained_latency_pass_fail_inconclusive_not_run(tmp_path: Path) -> None:
    name = "sustained_benefit_preserved"
    # Baseline under load 1.6x slower than the cached run: caching still lowers TTFT.
    v = _verdict(make_run(tmp_path / "pass", benches=WITH_BASELINE_LOAD, transform=_only(
        "baseline", "sustained_c4", _baseline_load(1.6))), name)
    assert v.status == PASS and v.numbers["ratio_high"] <= 1.0, v.detail  # type: ignore[operator]
    # Baseline twice as fast: caching made TTFT under load worse.
    v = _verdict(make_run(tmp_path / "fail", benches=WITH_BASELINE_LOAD, transform=_only(
        "baseline", "sustained_c4", _baseline_load(0.5))), name)
    assert v.status == FAIL and v.numbers["ratio_low"] > 1.0, v.detail  # type: ignore[operator]
    # Baseline the same run with each request 20% faster or slower: no difference shown.
    v = _verdict(make_run(tmp_path / "even", benches=WITH_BASELINE_LOAD, transform=_only(
        "baseline", "sustained_c4", _jitter)), name)
    assert v.status == INCONCLUSIVE, v.detail
    assert v.numbers["ratio_low"] <= 1.0 < v.numbers["ratio_high"]  # type: ignore[operator]
    run = make_run(tmp_path / "none")
    _keep_workloads(run, ["high_overlap", "no_overlap"])
    assert _verdict(run, name).status == NOT_RUN


# -- Benefit under load: the throughput half --------------------------------------------

def test_sustained_throughput_is_judged_when_the_rate_does_not_cap_it(tmp_path: Path
                                                                      ) -> None:
    name = "sustained_benefit_preserved"
    faster_ttft_more_tokens = _only("baseline", "sustained_c4", _baseline_load(1.6, 1.5))
    # As recorded, the rate (256 tok/s offered) caps both servers: throughput is not
    # judged, and the verdict says so.
    v = _verdict(make_run(tmp_path / "capped", benches=WITH_BASELINE_LOAD,
                          transform=faster_ttft_more_tokens), name)
    assert v.status == PASS, v.detail
    assert "which caps throughput: it cannot show caching's benefit here" in v.detail
    # The same figures offered 8 req/s (1024 tok/s): neither server reaches it.
    # Cached throughput 1.6x the baseline's: the throughput half passes.
    run = make_run(tmp_path / "uncapped-pass", benches=WITH_BASELINE_LOAD,
                   transform=_only("baseline", "sustained_c4", _baseline_load(1.6, 1 / 1.6)))
    _set_rate(run, "sustained_c4", 8.0)
    v = _verdict(run, name)
    assert v.status == PASS and "caps" not in v.detail, v.detail
    assert v.numbers["throughput_ratio"] == pytest.approx(1.6)
    # Cached 0.67x the baseline's throughput (TTFT still lower), one repetition: a drop
    # not decided by one run.
    run = make_run(tmp_path / "uncapped-drop", benches=WITH_BASELINE_LOAD,
                   transform=faster_ttft_more_tokens)
    _set_rate(run, "sustained_c4", 8.0)
    v = _verdict(run, name)
    assert v.status == INCONCLUSIVE, v.detail
    assert "(0.67x) < 0.95x" in v.detail
    # The same drop in every one of 3 repetitions: FAIL, though TTFT passes.
    run = make_run(tmp_path / "uncapped-drop-3", benches=WITH_BASELINE_LOAD,
                   transform=faster_ttft_more_tokens, repetitions=3)
    _set_rate(run, "sustained_c4", 8.0)
    v = _verdict(run, name)
    assert v.status == FAIL, v.detail
    assert v.numbers["ratio_high"] <= 1.0  # type: ignore[operator]


# -- Every rule guarded: the cases a mutation of each rule breaks -----------------------

def _set_measured(run: Path, conf: str, workload: str, ratio: float) -> None:
    """Both hit-ratio signals of ``conf/workload`` measured at ``ratio`` (each record
    written with its checksum, as the bench writes it)."""
    for path in run.glob(f"*/{conf}/{workload}/rep*.json"):
        record = json.loads(path.read_text())
        record["measured"].update(hit_ratio_queries=ratio, hit_ratio_by_source=ratio)
        path.write_text(json.dumps(with_checksum(record)))


def test_a_cache_that_quietly_stopped_hitting_fails(tmp_path: Path) -> None:
    """Far BELOW its expectation is as much a FAIL as above it: 10% measured where the
    served tokens give 67.5% (the no-overlap run held to its served expectation)."""
    def served(host: str, conf: str, wl: str, rep: int) -> dict[str, Any]:
        return {"served_ratio": 7936 / 204800} if (conf, wl) == ("cached", "no_overlap") \
            else {}

    run = make_run(tmp_path / "quiet", expected=served)
    assert _verdict(run, "hit_rate_matches_expected").status == PASS
    _set_measured(run, "cached", "high_overlap", 0.10)
    v = _verdict(run, "hit_rate_matches_expected")
    assert v.status == FAIL, v.detail
    assert "high_overlap queries 10.00% vs expected 67.50% (-57.50 pp)" in v.detail
    # Just inside the tolerance either way still passes; just outside below fails.
    for ratio, status in ((0.675 - 0.0099, PASS), (0.675 + 0.0099, PASS),
                          (0.675 - 0.0101, FAIL)):
        _set_measured(run, "cached", "high_overlap", ratio)
        assert _verdict(run, "hit_rate_matches_expected").status == status, ratio
