"""What the what-if assumed, and where each assumption came from: the same model however
the tokenizer is named, the bench's output-length rule, every assumption printed with its
source (a flag, the model's files, the platform's default)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from test_whatif_stream import mixed_file
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer as tk
from prefixbench.engines.cachemodel import CacheModel, from_model_dir
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.schedsim import SchedulerSim
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.frontend import cli
from prefixbench.predict import whatif
from prefixbench_sim import tinygptoss


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["whatif", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def gptoss_dir(tmp_path: Path) -> Path:
    """A tokenizer directory with a gpt-oss ``config.json`` beside it (window 16)."""
    directory = write_tokenizer(tmp_path / "tok")
    (directory / "config.json").write_text(json.dumps(
        tinygptoss.model_config(tinygptoss.TinyGptOssSpec(sliding_window=16))))
    return directory


def test_the_tokenizer_named_by_its_file_is_the_same_model(gptoss_dir: Path,
                                                            tmp_path: Path) -> None:
    """``--tokenizer DIR`` and ``--tokenizer DIR/tokenizer.json`` read the same
    ``config.json``: the same cache model, the same prediction (they differed: the file's
    form fell back to full attention)."""
    prompts = mixed_file(tmp_path / "p.jsonl")
    hybrid = CacheModel("hybrid", sliding_window=16)
    assert from_model_dir(gptoss_dir) == from_model_dir(gptoss_dir / "tokenizer.json") == hybrid
    assert tk.load(gptoss_dir / "tokenizer.json").harmony
    outs = []
    for tok in (gptoss_dir, gptoss_dir / "tokenizer.json"):
        code, out, err = run("--platform", "cpu",
                             str(prompts), "--tokenizer", str(tok), "--block-size", "16",
                             "--capacity-blocks", "40")
        assert code == 0, err
        outs.append(out.replace(str(gptoss_dir / "tokenizer.json"), "TOKENIZER")
                    .replace(str(gptoss_dir), "TOKENIZER"))
    assert outs[0] == outs[1]
    assert "hybrid (sliding window 16" in outs[0]
    code, full, _ = run("--platform", "cpu",
                        str(prompts), "--tokenizer", str(gptoss_dir), "--block-size", "16",
                        "--capacity-blocks", "40", "--kv-cache", "full")
    ratio = [line for line in outs[0].splitlines() if line.startswith("predicted ratio")]
    assert code == 0 and ratio and ratio[0] not in full  # the model matters here


def test_the_output_length_is_the_benchs_rule(tmp_path: Path) -> None:
    """vLLM 0.32's ``CustomDataset.sample``: ``--custom-output-len N`` for every request,
    each line's ``output_tokens`` only with -1 (lines without one are then refused)."""
    from prefixbench.engines.custom import prepare_file  # noqa: PLC0415

    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"t{4 + i}", "output_tokens": 1 + i}) + "\n"
                            for i in range(3)))
    assert prepare_file(path, custom_output_len=7).output_tokens == (7, 7, 7)
    assert prepare_file(path, custom_output_len=-1).output_tokens == (1, 2, 3)


def test_the_docs_and_help_state_the_defaults_the_command_applies(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``docs/own-traffic.md``'s table and ``--help`` say what :data:`DEFAULTS` says, for
    every flag with a default; the command applies it (the ``assumed:`` lines)."""
    from prefixbench.frontend.whatif_setup import DEFAULTS  # noqa: PLC0415

    doc = (Path(__file__).resolve().parents[2] / "docs" / "own-traffic.md").read_text()
    rows = dict(re.findall(r"^\s*\| `(--[a-z-]+)` \| (.+?) \|$", doc, flags=re.MULTILINE))
    assert rows == DEFAULTS
    code, _, _ = run("--help")
    help_text = capsys.readouterr().out
    assert code == 0
    flat = " ".join(help_text.split())
    for flag, text in DEFAULTS.items():
        assert f"default: {text}" in flat, flag
    code, out, _ = run("--workload", "high_overlap", "--platform", "cpu")
    assert code == 0
    assert "  block size:             128 tokens [cpu platform's default" in out
    # Neuron is the default platform (issue 44): the plugin's scheduler, full attention.
    for argv in (["--workload", "high_overlap"],
                 ["--workload", "high_overlap", "--platform", "neuron"]):
        code, out, _ = run(*argv)
        assert code == 0
        assert "  block size:             32 tokens [neuron platform's default" in out
        assert ("  scheduler:              NeuronAsyncScheduler (the Neuron plugin's, "
                "engines.schedneuron) [neuron platform's default") in out
    assert "  platform:               neuron [default (as prefixbench_platform)" in run(
        "--workload", "high_overlap")[1]


def short_prefix(prefix_len: int, **extra: object) -> Workload:
    """The tutorial's high-overlap workload with a shared prefix of ``prefix_len``."""
    high = {w.name: w for w in tutorial_workloads()}["high_overlap"]
    return Workload.from_dict({**high.to_dict(), "name": "short",
                               "prefix_repetition_prefix_len": prefix_len, **extra})


def test_on_neuron_a_warm_request_runs_the_chunks_its_uncached_tokens_need() -> None:
    """AWS's design (prefix-caching.md, "Block Alignment", "Scheduler Integration",
    "Partial KV Segment Handling"): a warm request of P tokens with h hit tokens runs
    ceil((P - h) / S) chunks instead of ceil(P / S). Expected values by hand, 50 requests
    over 5 prefixes (45 warm), block 32, S = 1024, every chunk padded to 1024."""
    serving = Serving(prefill_segment=1024, prefill_buckets=(1024,))
    # The tutorial's 3072 + 1024: cold 4 chunks, warm ceil(1024/1024) = 1: 3 skipped.
    tutorial = whatif.predict(short_prefix(3072), block_size=32, serving=serving).prefill
    assert tutorial is not None
    assert (tutorial.cold_chunks, tutorial.run_chunks, tutorial.skipped_chunks) == (
        50 * 4, 5 * 4 + 45 * 1, 45 * 3)
    assert (tutorial.cold_padded, tutorial.run_padded) == (50 * 4096, 5 * 4096 + 45 * 1024)
    assert tutorial.skipping_requests == 45
    # The spec's example: an 800-token prefix (25 blocks) and a 600-token suffix, shorter
    # than a segment, saves one chunk a warm request: ceil(1400/1024) = 2 vs
    # ceil(600/1024) = 1 (the old whole-segment rule said none).
    short = whatif.predict(short_prefix(800, prefix_repetition_suffix_len=600),
                           block_size=32, serving=serving).prefill
    assert short is not None
    assert (short.cold_chunks, short.run_chunks, short.skipping_requests) == (100, 55, 45)
    assert (short.cold_padded, short.saved_padded) == (100 * 1024, 45 * 1024)
    # Powers-of-two buckets (the plugin's default) pad the 376-token tail to 512 and the
    # warm 600 tokens to 1024: 512 padded tokens saved a warm request.
    pow2 = whatif.predict(short_prefix(800, prefix_repetition_suffix_len=600),
                          block_size=32, serving=Serving(
                              prefill_segment=1024,
                              prefill_buckets=(128, 256, 512, 1024))).prefill
    assert pow2 is not None and pow2.saved_padded == 45 * 512
    assert pow2.cold_padded == 50 * (1024 + 512)
    # A 1000-token prefix hits 992 tokens (31 blocks); the 1032 left take 2 chunks, as
    # the 2024 cold ones: nothing skipped, though the hit ratio is high.
    none = whatif.predict(short_prefix(1000), block_size=32, serving=serving)
    assert none.prefill is not None and none.ratio is not None and none.ratio > 0.4
    assert (none.prefill.skipped_chunks, none.prefill.saved_padded) == (0, 0)
    assert whatif.predict(short_prefix(2500), block_size=32).prefill is None  # cpu


def test_prefill_chunks_through_the_scheduler_model_follow_each_requests_hit() -> None:
    w = short_prefix(2500, max_concurrency=4, num_prompts=60)
    serving = Serving(4, prefill_segment=1024, prefill_buckets=(1024,))
    pred = whatif.predict(w, block_size=32, capacity_blocks=300, serving=serving, band=False)
    sim = SchedulerSim(32, 300)
    result = sim.replay(whatif.prefix_repetition_tokens(w), w.prefix_repetition_output_len,
                        concurrency=4)
    prompt = 2500 + w.prefix_repetition_suffix_len
    run = [-(-(prompt - hit) // 1024) for hit in result.hit_tokens]
    assert pred.hit_tokens == result.total_hit_tokens
    assert pred.prefill is not None
    assert pred.prefill.cold_chunks == len(run) * -(-prompt // 1024)
    assert pred.prefill.run_chunks == sum(run)
    assert pred.prefill.run_padded == sum(run) * 1024


def test_the_whatif_command_leads_with_the_prefill_saved_on_neuron(tmp_path: Path) -> None:
    """A prefix shorter than a segment: the first line is the prefill saved (one chunk a
    warm request), the hit ratio after it, the design's rule and that it is unchecked on
    Trainium said once."""
    path = tmp_path / "w.yml"
    path.write_text(json.dumps({"workloads": [
        short_prefix(800, prefix_repetition_suffix_len=600).to_dict()]}))
    code, out, err = run("--workload", "short", "--workloads", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ("prefill saved:   45 of 100 prefill chunks (46,080 of 102,400 padded "
                        "tokens, 45.00%); 45 of 50 requests skip at least one")
    assert lines[1].startswith("per request:     1.10 chunks run and 0.90 skipped")
    assert "padded to buckets [1024]" in lines[1]
    ratio = next(i for i, line in enumerate(lines) if line.startswith("predicted ratio"))
    assert ratio > 1
    assert out.count("never checked on Trainium") == 1
    assert "ceil((P - h) / S)" in out and "Partial KV Segment Handling" in out
    assert "  prefill saving:         design over tutorial" in out
    assert "whole segments" not in out.replace("fills whole segments", "")
    code, out, _ = run("--platform", "cpu", "--workload", "short", "--workloads", str(path))
    assert code == 0 and "prefill saved" not in out and "Trainium" not in out


def test_requests_longer_than_max_model_len_are_refused_in_one_line(tmp_path: Path) -> None:
    """A Neuron server refuses a prompt longer than its max_model_len (8192 by default):
    24,600-token prompts are not a hit ratio."""
    path = tmp_path / "w.yml"
    path.write_text(json.dumps({"workloads": [
        short_prefix(24000, prefix_repetition_suffix_len=600).to_dict()]}))
    code, out, err = run("--workload", "short", "--workloads", str(path))
    assert code == 2 and not out
    assert err.count("\n") == 1
    assert "50 of 50 requests have a prompt longer than the server's max_model_len" in err
    code, out, err = run("--workload", "short", "--workloads", str(path),
                         "--max-model-len", "32768")
    assert code == 0, err
    assert "rejected" not in out


def test_a_workload_is_replayed_at_its_own_concurrency_unless_told() -> None:
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200")
    assert code == 0
    lines = out.splitlines()
    assert ("replayed:        vLLM scheduler model at concurrency 4 (max_num_seqs 4, "
            "max_num_batched_tokens 1024)") in lines
    assert "  concurrency:            4 [workload sustained_c4's max_concurrency]" in lines
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200",
                       "--concurrency", "1")
    assert code == 0
    assert "replayed:        one request at a time (concurrency 1)" in out.splitlines()
    assert "  concurrency:            1 [given: --concurrency]" in out.splitlines()


def test_the_point_is_inside_its_printed_range_at_the_same_precision() -> None:
    code, out, _ = run("--platform", "cpu",
                       "--workload", "sustained_c4", "--capacity-blocks", "200")
    assert code == 0
    point = re.search(r"^predicted ratio: (\d+\.\d+)%$", out, flags=re.MULTILINE)
    band = re.search(r"^timing range:    (\d+\.\d+)% to (\d+\.\d+)% over ", out,
                     flags=re.MULTILINE)
    assert point is not None and band is not None
    decimals = {len(x.partition(".")[2]) for x in (point[1], band[1], band[2])}
    assert decimals == {4}
    assert float(band[1]) <= float(point[1]) <= float(band[2])


@pytest.mark.parametrize("argv", [
    ["--workload", "sustained_c4", "--capacity-blocks", "200"],
    ["--workload", "sustained_c4", "--capacity-blocks", "200", "--concurrency", "1"],
    ["--workload", "sustained_c4", "--concurrency", "8", "--max-num-seqs", "8"],
])
def test_the_method_and_notes_read_as_sentences(argv: list[str]) -> None:
    code, out, _ = run("--platform", "cpu", *argv)
    assert code == 0
    lines = out.splitlines()
    method = next(x for x in lines if x.startswith("method:"))[17:]
    assert method.startswith("The requests were ") and method.endswith(".")
    first = next(i for i, x in enumerate(lines) if x.startswith("note:"))
    notes = [lines[first][17:]] + [x[17:] for x in lines[first + 1:] if x.startswith(" " * 17)]
    assert notes
    for note in notes:
        assert note[0].isupper() and note.endswith("."), note
        assert "; " not in note and "request_rate" not in note, note


@pytest.mark.parametrize("command", ["whatif", "chat-traffic"])
def test_help_names_only_what_applies(command: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Neither command runs anything on a host: their help lists exit codes 0 and 2 only,
    not the run's (verdicts, regressions, ansible, interruptions)."""
    assert cli.main([command, "--help"]) == 0
    text = capsys.readouterr().out
    codes = re.findall(r"^  (\d)  ", text.partition("exit codes:")[2], flags=re.MULTILINE)
    assert codes == ["0", "2"]
    for word in ("regression", "ansible", "INCONCLUSIVE", "Ctrl+C", "verdict"):
        assert word not in text, word


@pytest.mark.parametrize(("argv", "message"), [
    (["--workload", "high_overlap", "--num-prompts", "0"],
     "--num-prompts must be >= 1, got 0 (leave it out to send every line"),
    (["--workload", "high_overlap", "--num-prompts", "-3"], "--num-prompts must be >= 1"),
    (["--workload", "high_overlap", "--platform", "neuron", "--block-size", "100"],
     "--block-size 100 does not divide the 1024-token prefill segment (block size must "
     "divide the segment size, aws-neuron/aws-neuron-sdk@v2.31.1 vllm-neuron/docs/guides/"
     "reference-configuration.md, \"Prefix caching constraints\")"),
    (["--workload", "high_overlap", "--platform", "neuron", "--max-num-batched-tokens",
          "1000"], "--max-num-batched-tokens 1000 is below --max-model-len 8192, so the "
         "Neuron plugin turns segmented prefill on with it as the segment, and it is not a "
         "supported segment size: use one of 512, 1024, 2048, 4096"),
        (["--workload", "high_overlap", "--max-num-batched-tokens", "8192"],
         "--max-num-batched-tokens 8192 is not below --max-model-len 8192: single-shot "
         "prefill, no segmented prefill, and the Neuron plugin refuses prefix caching"),
    (["--workload", "high_overlap", "--block-size", "0"], "--block-size must be >= 1, got 0"),
    (["--workload", "high_overlap", "--sliding-window", "64"],
     "--sliding-window applies with --kv-cache hybrid only"),
])
def test_inputs_the_replay_or_a_neuron_server_would_refuse_are_one_line_errors(
        argv: list[str], message: str) -> None:
    code, out, err = run(*argv)
    assert code == 2 and not out
    assert message in err and err.count("\n") == 1, err


def test_a_block_that_divides_the_segment_is_taken_on_neuron_and_any_on_cpu() -> None:
    assert run("--platform", "cpu",
               "--workload", "high_overlap", "--platform", "neuron", "--block-size",
               "128")[0] == 0
    assert run("--platform", "cpu", "--workload", "high_overlap", "--block-size", "100")[0] == 0


def test_custom_output_len_reaches_a_custom_workload_and_is_refused_elsewhere(
        tmp_path: Path) -> None:
    """``--workload NAME --custom-output-len N`` was silently ignored: a custom workload
    now takes N (it changes a bounded replay), a prefix_repetition one refuses it."""
    tokdir = write_tokenizer(tmp_path / "tok")
    prompts = mixed_file(tmp_path / "p.jsonl")
    path = tmp_path / "w.yml"
    path.write_text(json.dumps({"workloads": [{
        "name": "mine", "dataset_name": "custom", "dataset_path": str(prompts),
        "custom_output_len": 64, "max_concurrency": 1}]}))
    base = ["--workload", "mine", "--workloads", str(path), "--tokenizer", str(tokdir),
            "--block-size", "16", "--capacity-blocks", "30"]
    code, own, _ = run(*base)
    assert code == 0 and "output length:          64 tokens a request [workload mine's" in own
    code, given, _ = run(*base, "--custom-output-len", "1")
    assert code == 0 and "output length:          1 tokens a request [given:" in given
    evicted = [next(x for x in out.splitlines() if x.startswith("evicted"))
               for out in (own, given)]
    assert evicted[0] != evicted[1]  # the output length was used
    code, _, err = run("--workload", "high_overlap", "--custom-output-len", "5")
    assert code == 2 and "applies to a prompts file or a custom workload" in err


def test_the_replayed_line_names_the_model_the_replay_went_through() -> None:
    """Full attention one at a time replays without the scheduler model even under
    async scheduling (Neuron's default): the line says so; the hybrid manager under async
    scheduling goes through the async model even one at a time."""
    code, out, _ = run("--platform", "cpu", "--workload", "high_overlap", "--platform", "neuron")
    assert code == 0
    assert "replayed:        one request at a time (concurrency 1)" in out.splitlines()
    assert "  scheduler:              NeuronAsyncScheduler" in out
    code, out, _ = run("--platform", "cpu", "--workload", "sustained_c4", "--kv-cache", "hybrid",
                       "--async-scheduling", "--concurrency", "1", "--capacity-blocks", "300")
    assert code == 0
    assert ("replayed:        vLLM async scheduler model at concurrency 1 (max_num_seqs 4, "
            "max_num_batched_tokens 1024)") in out.splitlines()


def test_chat_traffic_says_where_its_cache_assumptions_come_from(gptoss_dir: Path,
                                                                 tmp_path: Path) -> None:
    """chat-traffic resolves its server as whatif does (tests/unit/test_chat_assumptions.py):
    on cpu the model's files name the hybrid manager, and the ``assumed:`` block says so."""
    out = io.StringIO()
    argv = ["chat-traffic", str(tmp_path / "c.jsonl"), "--users", "3", "--platform", "cpu",
            "--tokenizer", str(gptoss_dir / "tokenizer.json")]
    assert cli.main(argv, out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    line = next(x for x in lines if x.startswith("cache:"))
    assert line.startswith("cache:           block 128, capacity unbounded, hybrid (sliding "
                           "window 16")
    kv = next(x for x in lines if x.startswith("  KV-cache manager:"))
    assert kv.endswith(f"[read from the model's files: {gptoss_dir}/config.json]")
    assert any(x.startswith("  block size:             128 tokens [cpu platform's default")
               for x in lines)


def test_on_neuron_the_replay_goes_through_the_plugins_scheduler_model() -> None:
    """--platform neuron above concurrency 1: the Neuron plugin's async scheduler model
    (engines.schedneuron) with its KV-concurrency cap at --max-model-len."""
    from prefixbench.engines.platforms import scheduler_model  # noqa: PLC0415
    from prefixbench.engines.schedneuron import NeuronAsyncSchedulerSim  # noqa: PLC0415

    code, out, _ = run("--workload", "sustained_c4", "--platform", "neuron",
                       "--capacity-blocks", "900", "--max-model-len", "4096")
    assert code == 0
    assert ("replayed:        Neuron plugin's async scheduler model at concurrency 4 "
            "(max_num_seqs 4, max_num_batched_tokens 1024)") in out.splitlines()
    assert "  max_model_len:          4096 (the KV-concurrency cap's) [given:" in out
    sim = scheduler_model(32, 900, CacheModel(), Serving(4, async_scheduling=True,
                                                          scheduler="neuron",
                                                          max_model_len=4096))
    assert isinstance(sim, NeuronAsyncSchedulerSim)
    w = {x.name: x for x in tutorial_workloads()}["sustained_c4"]
    pred = whatif.predict(w, block_size=32, capacity_blocks=900, band=False, serving=Serving(
        4, async_scheduling=True, scheduler="neuron", max_model_len=4096))
    assert f"predicted ratio: {pred.ratio:.4%}" in out
    code, _, err = run("--workload", "sustained_c4", "--max-model-len", "4096",
                       "--platform", "cpu")
    assert code == 2 and "--max-model-len applies with --platform neuron only" in err
