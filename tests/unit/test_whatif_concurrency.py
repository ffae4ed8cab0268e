"""The what-if at concurrency: ``prefixbench whatif --concurrency N`` and
``whatif.predict(serving=...)`` replay through the scheduler model
(prefixbench.engines.schedsim), phases and all."""

from __future__ import annotations

import io
import json
import random
from array import array
from pathlib import Path

import pytest
from test_whatif_stream import mixed_file, workload
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer as tk
from prefixbench.engines.cachemodel import CacheModel
from prefixbench.engines.schedasync import AsyncSchedulerSim
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedhybrid import AsyncHybridSchedulerSim, HybridSchedulerSim
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.frontend import cli
from prefixbench.predict import whatif


def sustained_c4() -> Workload:
    return {w.name: w for w in tutorial_workloads()}["sustained_c4"]


def test_prefix_repetition_at_concurrency_is_the_scheduler_replay() -> None:
    w = sustained_c4()
    pred = whatif.predict(w, block_size=128, capacity_blocks=200, serving=Serving(4))
    prompts = whatif.prefix_repetition_tokens(w)
    want = SchedulerSim(128, 200).replay(prompts, w.prefix_repetition_output_len,
                                         concurrency=4)
    assert (pred.hit_tokens, pred.query_tokens, pred.requests, pred.evicted_blocks) == (
        want.total_hit_tokens, want.query_tokens, 200, want.evicted_blocks)
    assert pred.method.endswith("vLLM scheduler model at concurrency 4 (max_num_seqs 4, "
                                "max_num_batched_tokens 1024)")
    assert pred.note == ("the workload paces requests at 2/s, but the predicted ratio has "
                         "each request sent as soon as one of the 4 in flight finishes; the "
                         "timing range spans the paced arrivals")
    # The range over arrival timings: the bench's paced arrivals, the point among them.
    assert pred.band is not None and pred.band_note is not None
    assert pred.band[0] <= pred.ratio <= pred.band[1]  # type: ignore[operator]
    assert "over 23 arrival timings" in pred.band_note and "2/s, steps of" in pred.band_note
    # Four requests holding their blocks at once evict more than one at a time.
    serial = whatif.predict(w, block_size=128, capacity_blocks=200)
    assert pred.ratio is not None and serial.ratio is not None
    assert pred.ratio < serial.ratio
    # Concurrency 1 is today's prediction, note and all.
    assert whatif.predict(w, block_size=128, capacity_blocks=200, serving=Serving(1)
                          ) == serial


def test_the_ready_check_runs_alone_and_the_warmups_before_the_prompts() -> None:
    w = Workload.from_dict({**sustained_c4().to_dict(), "num_prompts": 40, "seed": 3,
                            "ready_check_timeout_sec": 5, "num_warmups": 3,
                            "request_rate": "inf"})
    serving = Serving(4, max_num_seqs=3, max_num_batched_tokens=512)
    pred = whatif.predict(w, block_size=128, capacity_blocks=150, serving=serving)
    prompts = whatif.prefix_repetition_tokens(w)
    sim = SchedulerSim(128, 150, max_num_seqs=3, max_num_batched_tokens=512)
    out = w.prefix_repetition_output_len
    sim.send(prompts[0], out)
    sim.drain()
    for tokens in prompts[1:4]:
        sim.send(tokens, out, concurrency=4)
    sim.drain()
    for tokens in prompts[4:]:
        sim.send(tokens, out, concurrency=4)
    sim.drain()
    assert pred.requests == 44
    assert (pred.hit_tokens, pred.evicted_blocks) == (sim.hit_tokens_total,
                                                      sim.evicted_blocks)
    assert pred.note is None  # the workload's own concurrency, all at once


def test_custom_prompts_at_concurrency_for_any_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mixed_file(tmp_path / "p.jsonl")
    tokdir = write_tokenizer(tmp_path / "tok")
    tok = tk.load(tokdir)
    w = workload(path, seed=5, num_warmups=2, max_concurrency=3)
    serving = Serving(3, max_num_seqs=2, max_num_batched_tokens=32)
    preds = [whatif.predict(w, block_size=16, capacity_blocks=14, tokenizer_dir=tokdir,
                            workers=n, serving=serving) for n in (1, 3)]
    assert preds[0] == preds[1]
    # The reference: every line in memory, vLLM's order, warmups then the prompts.
    with path.open(encoding="utf-8") as handle:
        items = [json.loads(line) for line in handle if line.strip()]
    texts = [item["prompt"] if "prompt" in item else tok.render_chat(item["messages"])
             for item in items]
    outs = [9] * len(items)  # the workload's custom_output_len, as vLLM sends it
    order = list(range(len(items)))
    random.Random(5).shuffle(order)  # noqa: S311 - vLLM's shuffle
    sim = SchedulerSim(16, 14, max_num_seqs=2, max_num_batched_tokens=32)
    for phase in ([order[0]] * 2, order):
        for i in phase:
            sim.send(array("I", tok.encode(texts[i])), outs[i], concurrency=3)
        sim.drain()
    pred = preds[0]
    assert (pred.hit_tokens, pred.query_tokens, pred.requests, pred.evicted_blocks) == (
        sim.hit_tokens_total, sim.query_tokens_total, 62, sim.evicted_blocks)
    assert pred.hit_tokens > 0 and pred.evicted_blocks > 0
    # Two requests running at once in 14 blocks evict more than one at a time.
    serial = whatif.predict(w, block_size=16, capacity_blocks=14, tokenizer_dir=tokdir)
    assert serial.evicted_blocks < pred.evicted_blocks
    # The range over arrival timings of the same encoded requests, the point inside it;
    # none one at a time.
    assert pred.band is not None and pred.band_note is not None
    assert pred.band[0] <= sim.hit_tokens_total / sim.query_tokens_total <= pred.band[1]
    assert "over 33 arrival timings" in pred.band_note
    assert serial.band is None and serial.band_note is None
    # Past the tokens the replay may keep for it: said, not computed.
    monkeypatch.setattr(whatif, "BAND_MAX_TOKENS", 100)
    big = whatif.predict(w, block_size=16, capacity_blocks=14, tokenizer_dir=tokdir,
                         serving=serving)
    assert big.band is None and big.ratio == pred.ratio
    assert big.band_note == "not computed: more than 100 prompt tokens"


def test_the_hybrid_model_at_concurrency_is_the_hybrid_scheduler_replay() -> None:
    w = sustained_c4()
    pred = whatif.predict(w, block_size=128, capacity_blocks=150,
                          cache_model=CacheModel("hybrid"), serving=Serving(4))
    want = HybridSchedulerSim(128, 150, sliding_window=128).replay(
        whatif.prefix_repetition_tokens(w), w.prefix_repetition_output_len, concurrency=4)
    assert (pred.hit_tokens, pred.evicted_blocks) == (want.total_hit_tokens,
                                                      want.evicted_blocks)
    assert pred.method.endswith("vLLM scheduler model at concurrency 4 (max_num_seqs 4, "
                                "max_num_batched_tokens 1024), hybrid (sliding window 128 + "
                                "full attention, one shared block pool) KV-cache model")
    full = whatif.predict(w, block_size=128, capacity_blocks=150, serving=Serving(4))
    assert full.evicted_blocks != pred.evicted_blocks


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["whatif", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_the_whatif_command_says_which_model_it_replayed() -> None:
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "4")
    assert code == 0
    assert ("replayed:        vLLM scheduler model at concurrency 4 (max_num_seqs 4, "
            "max_num_batched_tokens 1024)") in out.splitlines()
    pred = whatif.predict(sustained_c4(), block_size=128, capacity_blocks=200,
                          serving=Serving(4))
    assert f"predicted ratio: {pred.ratio:.4%}" in out
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "8", "--max-num-seqs", "8",
                       "--max-num-batched-tokens", "2048")
    assert code == 0
    assert ("replayed:        vLLM scheduler model at concurrency 8 (max_num_seqs 8, "
            "max_num_batched_tokens 2048)") in out
    assert "note:            Replayed at concurrency 8, while the workload runs at 4." in out
    code, out, _ = run("--platform", "cpu", "--workload", "high_overlap")
    assert code == 0 and "replayed:        one request at a time (concurrency 1)" in out
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "150",
                       "--concurrency", "4", "--kv-cache", "hybrid")
    assert code == 0
    assert "hybrid (sliding window 128 + full attention, one shared block pool)" in out
    assert "replayed:        vLLM scheduler model at concurrency 4" in out


def test_the_whatif_command_gives_the_range_over_arrival_timings() -> None:
    """The workload's own paced arrivals (2/s), or --request-rate's: all at once gives
    the jitter variants instead. One request at a time has no range."""
    w = sustained_c4()
    paced = whatif.predict(w, block_size=128, capacity_blocks=200, serving=Serving(4))
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "4")
    assert paced.band is not None and paced.band_note is not None
    timings = paced.band_note.partition(" over ")[2]
    assert code == 0 and (f"timing range:    {paced.band[0]:.4%} to {paced.band[1]:.4%} "
                          f"over {timings}") in out.splitlines()
    assert "over 23 arrival timings" in out
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "4", "--request-rate", "inf")
    assert code == 0 and "over 33 arrival timings" in out and "jitter 0-" in out
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "4", "--request-rate", "50", "--burstiness", "0.5")
    assert code == 0 and "50/s, steps of" in out
    code, out, _ = run("--platform", "cpu", "--workload", "high_overlap")
    assert code == 0 and "timing range" not in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
    (["--concurrency", "2", "--max-num-seqs", "0"], "--max-num-seqs must be >= 1"),
])
def test_the_whatif_command_refuses_what_it_cannot_replay(argv: list[str], message: str
                                                          ) -> None:
    code, _, err = run("--workload", "high_overlap", *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_an_unbounded_replay_at_concurrency_reports_no_working_set() -> None:
    """Its cached blocks count generated tokens' blocks and copies: not the working set
    a one-at-a-time replay reports; the hits are the same."""
    w = sustained_c4()
    serial = whatif.predict(w, block_size=128)
    pred = whatif.predict(w, block_size=128, serving=Serving(4))
    assert serial.cached_blocks == 5 * 24 + 200 * 8 and pred.cached_blocks is None
    assert pred.hit_tokens == serial.hit_tokens


def test_the_capacity_curve_at_concurrency_is_the_scheduler_replay() -> None:
    """``--capacity-curve`` with ``--concurrency``: each capacity replayed through the
    scheduler model as one prediction at that capacity is, the working set not counted."""
    code, out, err = run("--platform", "cpu",
                         "--workload", "sustained_c4", "--capacity-curve", "150,400",
                         "--concurrency", "4")
    assert code == 0, err
    lines = out.splitlines()
    assert ("replayed:        vLLM scheduler model at concurrency 4 (max_num_seqs 4, "
            "max_num_batched_tokens 1024)") in lines
    w = sustained_c4()
    for cap in (150, 400):
        pred = whatif.predict(w, block_size=128, capacity_blocks=cap, serving=Serving(4))
        assert pred.ratio is not None
        assert f"{cap:>12,}  {pred.ratio:>9.2%}  {pred.evicted_blocks:>14,}" in lines
    serial = whatif.predict(w, block_size=128, capacity_blocks=150)
    assert f"{150:>12,}  {serial.ratio:>9.2%}" not in out  # not one at a time
    assert any(line.startswith("working set:     not counted at concurrency 4")
               for line in lines)


def test_async_scheduling_is_the_async_scheduler_replay() -> None:
    w = sustained_c4()
    serving = Serving(4, async_scheduling=True)
    pred = whatif.predict(w, block_size=128, capacity_blocks=150, serving=serving)
    want = AsyncSchedulerSim(128, 150).replay(whatif.prefix_repetition_tokens(w),
                                              w.prefix_repetition_output_len,
                                              concurrency=4)
    assert (pred.hit_tokens, pred.evicted_blocks) == (want.total_hit_tokens,
                                                      want.evicted_blocks)
    assert "vLLM async scheduler model at concurrency 4" in pred.method
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "150",
                       "--concurrency", "4", "--async-scheduling")
    assert code == 0 and f"predicted ratio: {pred.ratio:.4%}" in out
    assert "replayed:        vLLM async scheduler model at concurrency 4" in out


def test_the_hybrid_manager_under_async_scheduling_one_at_a_time_is_the_async_model() -> None:
    """Concurrency 1 with the hybrid manager goes through the async scheduler model: its
    admission cap (two batches in flight) and sliding-window frees (a step later) differ
    from the one-at-a-time hybrid model's."""
    w = sustained_c4()
    hybrid = CacheModel("hybrid")
    pred = whatif.predict(w, block_size=128, capacity_blocks=100, cache_model=hybrid,
                          serving=Serving(1, async_scheduling=True))
    want = AsyncHybridSchedulerSim(128, 100, sliding_window=128).replay(
        whatif.prefix_repetition_tokens(w), w.prefix_repetition_output_len)
    assert (pred.hit_tokens, pred.evicted_blocks) == (want.total_hit_tokens,
                                                      want.evicted_blocks)
    serial = whatif.predict(w, block_size=128, capacity_blocks=100, cache_model=hybrid)
    assert serial.hit_tokens != pred.hit_tokens
