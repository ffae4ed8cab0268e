"""``prefixbench chat-traffic`` assumes the server ``prefixbench whatif`` assumes: the
platform (neuron by default) gives the block size, the KV-cache manager and the
scheduler, and the command prints the same ``assumed:`` block."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.platforms import engine_model
from prefixbench.engines.schedconfig import Serving
from prefixbench.engines.workloads import Workload
from prefixbench.frontend import cli
from prefixbench.predict import whatif
from prefixbench_sim import tinygptoss

#: The assumptions about the server, which both commands must state alike.
SERVER = ("platform", "block size", "KV-cache manager", "max_num_seqs",
          "max_num_batched_tokens", "max_model_len", "scheduler", "prefill segment",
          "KV capacity")


def run(command: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([command, *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def assumed(text: str) -> dict[str, str]:
    """The ``assumed:`` block's lines by name."""
    block = text.split("assumed:", 1)[1].splitlines()[1:]
    lines = [m for line in block if (m := re.match(r"^  (\S[^:]*): +(.*)$", line))]
    return {m.group(1): m.group(2) for m in lines}


def field(text: str, label: str) -> str:
    found = re.search(rf"^{label}: +(.*)$", text, re.MULTILINE)
    assert found, (label, text)
    return found.group(1)


@pytest.fixture
def gptoss_dir(tmp_path: Path) -> Path:
    """A tokenizer directory with a gpt-oss ``config.json`` beside it (window 16)."""
    directory = write_tokenizer(tmp_path / "tok")
    (directory / "config.json").write_text(json.dumps(
        tinygptoss.model_config(tinygptoss.TinyGptOssSpec(sliding_window=16))))
    return directory


def test_by_default_the_neuron_server_whatif_assumes(gptoss_dir: Path,
                                                     tmp_path: Path) -> None:
    """No flag: a Neuron server (block 32, full attention whatever the model's layers,
    NeuronAsyncScheduler), as ``whatif`` says for the same file; the replay is the
    what-if's through that engine model."""
    path = tmp_path / "chat.jsonl"
    code, out, err = run("chat-traffic", str(path), "--users", "6", "--tokenizer",
                         str(gptoss_dir))
    assert (code, err) == (0, "")
    mine = assumed(out)
    assert mine["platform"].startswith("neuron [default")
    assert mine["block size"].startswith("32 tokens [neuron platform's default")
    assert mine["KV-cache manager"].startswith("full attention (one KV cache group) [neuron")
    assert mine["scheduler"].startswith("NeuronAsyncScheduler")
    assert field(out, "cache") == "block 32, capacity unbounded, full attention (one KV " \
                                  "cache group)"
    code, theirs_out, err = run("whatif", str(path), "--tokenizer", str(gptoss_dir),
                                "--custom-output-len", "-1", "--no-shuffle")
    assert code == 0, err
    theirs = assumed(theirs_out)
    assert {k: mine.get(k) for k in SERVER} == {k: theirs.get(k) for k in SERVER}
    # The predicted ratio is the what-if's replay through the Neuron engine model.
    engine = engine_model("neuron", serving=Serving(max_num_batched_tokens=1024),
                          max_model_len=8192)
    workload = Workload.from_dict({
        "name": "chat", "dataset_name": "custom", "dataset_path": str(path),
        "custom_output_len": -1, "max_concurrency": 1, "disable_shuffle": True})
    want = whatif.predict(workload, block_size=32, tokenizer_dir=gptoss_dir,
                          cache_model=engine.cache_model,
                          serving=engine.serving)
    assert want.ratio is not None
    assert field(out, "predicted ratio").startswith(f"{want.ratio:.2%} ")
    assert engine.cache_model is FULL_ATTENTION


def test_platform_cpu_reads_the_model_as_whatif_does(gptoss_dir: Path,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    code, out, err = run("chat-traffic", str(path), "--users", "6", "--tokenizer",
                         str(gptoss_dir), "--platform", "cpu")
    assert (code, err) == (0, "")
    mine = assumed(out)
    assert mine["block size"].startswith("128 tokens [cpu platform's default")
    hybrid = CacheModel("hybrid", sliding_window=16).describe()
    assert mine["KV-cache manager"] == (f"{hybrid} [read from the model's files: "
                                        f"{gptoss_dir}/config.json]")
    assert mine["scheduler"].startswith("Scheduler (vLLM's")
    assert field(out, "cache") == f"block 128, capacity unbounded, {hybrid}"
    # The replay is through the hybrid model the files name, which hits less here.
    workload = Workload.from_dict({
        "name": "chat", "dataset_name": "custom", "dataset_path": str(path),
        "custom_output_len": -1, "max_concurrency": 1, "disable_shuffle": True})
    preds = [whatif.predict(workload, block_size=128, tokenizer_dir=gptoss_dir,
                            cache_model=model.chunked(1024)).ratio
             for model in (CacheModel("hybrid", sliding_window=16), FULL_ATTENTION)]
    assert preds[0] is not None and preds[1] is not None and preds[0] < preds[1]
    assert field(out, "predicted ratio").startswith(f"{preds[0]:.2%} ")
    code, out, _ = run("chat-traffic", str(path), "--users", "6", "--tokenizer",
                       str(gptoss_dir), "--platform", "cpu", "--kv-cache", "full", "--force")
    assert code == 0 and field(out, "predicted ratio").startswith(f"{preds[1]:.2%} ")
    assert assumed(out)["KV-cache manager"].endswith("[given: --kv-cache]")
    _, theirs, _ = run("whatif", str(path), "--tokenizer", str(gptoss_dir),
                       "--custom-output-len", "-1", "--no-shuffle", "--platform", "cpu")
    assert {k: mine.get(k) for k in SERVER} == {k: assumed(theirs).get(k) for k in SERVER}
    # Without a tokenizer the structural estimate counts the platform's blocks too.
    code, out, _ = run("chat-traffic", str(tmp_path / "w.jsonl"), "--users", "3")
    assert code == 0 and assumed(out)["block size"].startswith("32 tokens")
    assert assumed(out)["tokenizer"].startswith("none [words counted as tokens")


def test_what_a_neuron_server_refuses_is_refused_before_the_file_is_written(
        tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    for argv, message in (
            (["--block-size", "48"], "--block-size 48 does not divide the 1024-token"),
            (["--max-num-batched-tokens", "1000"], "is not a supported segment size"),
            (["--platform", "cpu", "--max-model-len", "4096"],
             "--max-model-len applies with --platform neuron only"),
            (["--sliding-window", "64"], "--sliding-window applies with --kv-cache hybrid")):
        code, _, err = run("chat-traffic", str(path), *argv)
        assert code == 2, argv
        assert err.startswith("prefixbench chat-traffic: error: ") and message in err, err
        assert err.count("\n") == 1
        assert not path.exists(), argv


def test_the_saving_lines_are_the_whatifs_and_come_before_the_hit_ratio(
        gptoss_dir: Path, tmp_path: Path) -> None:
    """On Neuron, chat-traffic prints what the what-if prints first for the same file:
    the prefill chunks saved (AWS's design), then the hit ratio; never checked on
    Trainium, said once."""
    path = tmp_path / "chat.jsonl"
    code, out, err = run("chat-traffic", str(path), "--users", "6", "--tokenizer",
                         str(gptoss_dir))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    saved = next(i for i, line in enumerate(lines) if line.startswith("prefill saved:"))
    ratio = next(i for i, line in enumerate(lines) if line.startswith("predicted ratio:"))
    assert saved < ratio
    assert out.count("never checked on Trainium") == 1
    _, theirs, _ = run("whatif", str(path), "--tokenizer", str(gptoss_dir),
                       "--custom-output-len", "-1", "--no-shuffle")
    assert lines[saved] == theirs.splitlines()[0]
    assert field(out, "per request") == field(theirs, "per request")


def test_prompts_longer_than_max_model_len_are_refused_in_one_line(
        gptoss_dir: Path, tmp_path: Path) -> None:
    """Every conversation longer than the server's max_model_len: refused, one line,
    not a hit ratio (a Neuron server refuses each of them)."""
    path = tmp_path / "chat.jsonl"
    code, out, err = run("chat-traffic", str(path), "--users", "3", "--tokenizer",
                         str(gptoss_dir), "--max-model-len", "600",
                         "--max-num-batched-tokens", "512", "--system-words", "2000")
    assert code == 2, out
    assert err.count("\n") == 1, err
    assert "requests have a prompt longer than the server's max_model_len" in err
