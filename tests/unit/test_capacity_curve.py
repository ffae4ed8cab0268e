"""Hit ratio against KV capacity (prefixbench.predict.capacity_curve, prefixbench whatif
--capacity-curve): every point is the single prediction at that capacity."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_whatif_stream import mixed_file, workload
from tiny_tokenizer import write_tokenizer

from prefixbench.engines.workloads import tutorial_workloads
from prefixbench.frontend import cli
from prefixbench.predict import whatif
from prefixbench.predict.capacity_curve import CurveError, parse_capacities, predict_curve


def test_each_point_is_the_prediction_at_that_capacity_prefix_repetition() -> None:
    w = tutorial_workloads()[0].with_seed(0)  # high_overlap: 5 prefixes, 50 prompts
    caps = [40, 100, 200, 500, 530]
    curve = predict_curve(w, block_size=128, capacities=caps)
    assert [p.capacity_blocks for p in curve.points] == caps
    for point in curve.points:
        single = whatif.predict(w, block_size=128, capacity_blocks=point.capacity_blocks)
        assert point.ratio == single.ratio and point.evicted_blocks == single.evicted_blocks
    unbounded = whatif.predict(w, block_size=128)
    assert curve.unbounded.ratio == unbounded.ratio == pytest.approx(0.675)
    # 5 prefixes x 24 blocks + 50 suffixes x 8 blocks, never evicted when unbounded.
    assert curve.working_set_blocks == 5 * 24 + 50 * 8
    ratios = [p.ratio or 0.0 for p in curve.points]
    assert ratios == sorted(ratios) and ratios[0] < 0.2
    assert curve.fits_from == 500  # evicts 21 suffix blocks that are never asked again


def test_each_point_is_the_prediction_at_that_capacity_custom_prompts(tmp_path: Path) -> None:
    path = mixed_file(tmp_path / "p.jsonl")
    tokdir = write_tokenizer(tmp_path / "tok")
    w = workload(path, seed=3, num_warmups=1)
    caps = [12, 24, 60, 400]
    curve = predict_curve(w, block_size=16, capacities=caps, tokenizer_dir=tokdir, workers=2)
    for point in (*curve.points, curve.unbounded):
        single = whatif.predict(w, block_size=16, capacity_blocks=point.capacity_blocks,
                                tokenizer_dir=tokdir, workers=1)
        assert (point.ratio, point.hit_tokens, point.evicted_blocks, point.requests) == (
            single.ratio, single.hit_tokens, single.evicted_blocks, single.requests)
    assert curve.unbounded.evicted_blocks == 0 and curve.working_set_blocks == 58
    assert curve.fits_from == 60  # just above the working set
    assert (curve.points[0].ratio or 0) < (curve.points[1].ratio or 0) < (
        curve.unbounded.ratio or 0)


def test_a_capacity_too_small_for_a_request_is_refused_and_the_others_go_on() -> None:
    w = tutorial_workloads()[0].with_seed(0)
    curve = predict_curve(w, block_size=128, capacities=[2, 300])
    assert curve.points[0].ratio is None and "does not fit" in (curve.points[0].note or "")
    assert curve.points[1].ratio == whatif.predict(w, block_size=128, capacity_blocks=300).ratio


def test_bad_input_is_one_line() -> None:
    assert parse_capacities("256, 64,64,128") == [64, 128, 256]
    for text in ("", "0,5", "a,b"):
        with pytest.raises(CurveError):
            parse_capacities(text)
    custom = workload(Path("/nonexistent.jsonl"))
    with pytest.raises(CurveError, match="need --tokenizer"):
        predict_curve(custom, block_size=16, capacities=[8])


def test_the_whatif_command_prints_the_curve() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["whatif", "--platform", "cpu",
                     "--workload", "high_overlap", "--capacity-curve",
                     "530,100"], out=out, err=err) == 0
    lines = out.getvalue().splitlines()
    assert "  block size:             128 tokens [cpu platform's default" in lines[3]
    lines = lines[lines.index(next(x for x in lines if x.startswith("    capacity"))) - 1:]
    assert lines[1].split() == ["capacity", "hit", "ratio", "evicted", "blocks"]
    assert lines[2].split()[:2] == ["100", "30.38%"]
    assert lines[3].split() == ["530", "67.50%", "0"]
    assert lines[4].split()[:2] == ["unbounded", "67.50%"]
    assert lines[5] == ("working set:     520 blocks; the unbounded hit ratio from 530 "
                        "blocks (of those tried)")
    err = io.StringIO()
    assert cli.main(["whatif", "--platform", "cpu",
                     "--workload", "high_overlap", "--capacity-curve", "64",
                     "--capacity-blocks", "64"], out=io.StringIO(), err=err) == 2
    assert "not both" in err.getvalue() and err.getvalue().count("\n") == 1
