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


def test_on_neuron_only_hits_in_whole_prefill_segments_are_savings() -> None:
    """The tutorial's 3072-token prefix is three whole 1024-token segments: every hit is a
    skipped segment. A 1000-token prefix hits 992 tokens a warm request (block 32) and
    skips no segment: a hit ratio with nothing saved."""
    segment = Serving(prefill_segment=1024)
    tutorial = whatif.predict(short_prefix(3072), block_size=32, serving=segment)
    assert tutorial.segment_saved_tokens == tutorial.hit_tokens == 45 * 3072
    assert tutorial.segment_requests == 45
    short = whatif.predict(short_prefix(1000), block_size=32, serving=segment)
    assert short.hit_tokens == 45 * 992 and short.ratio is not None and short.ratio > 0.4
    assert (short.segment_saved_tokens, short.segment_requests) == (0, 0)
    mixed = whatif.predict(short_prefix(2500), block_size=32, serving=segment)
    assert (mixed.segment_saved_tokens, mixed.segment_requests) == (45 * 2048, 45)
    assert whatif.predict(short_prefix(2500), block_size=32).segment_saved_tokens is None


def test_segment_savings_through_the_scheduler_model_are_each_requests_hit() -> None:
    w = short_prefix(2500, max_concurrency=4, num_prompts=60)
    serving = Serving(4, prefill_segment=1024)
    pred = whatif.predict(w, block_size=32, capacity_blocks=300, serving=serving, band=False)
    sim = SchedulerSim(32, 300)
    result = sim.replay(whatif.prefix_repetition_tokens(w), w.prefix_repetition_output_len,
                        concurrency=4)
    whole = [hit // 1024 * 1024 for hit in result.hit_tokens]
    assert pred.hit_tokens == result.total_hit_tokens
    assert (pred.segment_saved_tokens, pred.segment_requests) == (
        sum(whole), sum(1 for h in whole if h))
    assert 0 < sum(whole) < pred.hit_tokens


def test_the_whatif_command_reports_segment_savings_on_neuron_only(tmp_path: Path) -> None:
    path = tmp_path / "w.yml"
    path.write_text(json.dumps({"workloads": [short_prefix(1000).to_dict()]}))
    code, out, err = run("--platform", "cpu",
                         "--workload", "short", "--workloads", str(path), "--platform",
                         "neuron")
    assert code == 0, err
    assert ("segments saved:  0 prompt tokens of prefill skipped in whole 1024-token "
            "segments (0.0000% of those queried); 0 of 50 requests (0.00%) skip at least "
            "one") in out.splitlines()
    assert "44,640 hit tokens lie outside whole segments" in out
    assert "segment rule:    a warm request gains TTFT only for the prefill segments it " \
           "skips whole" in out
    code, out, _ = run("--platform", "cpu", "--workload", "short", "--workloads", str(path))
    assert code == 0 and "segments saved" not in out  # cpu: no segments


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
      "1000"], "--max-num-batched-tokens 1000 is not a Neuron prefill segment size"),
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
