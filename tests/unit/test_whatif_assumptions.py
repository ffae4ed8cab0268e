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

from prefixbench.frontend import cli
from prefixbench.predict import tokenizer as tk
from prefixbench.predict.cachemodel import CacheModel, from_model_dir
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
        code, out, err = run(str(prompts), "--tokenizer", str(tok), "--block-size", "16",
                             "--capacity-blocks", "40")
        assert code == 0, err
        outs.append(out.replace(str(gptoss_dir / "tokenizer.json"), "TOKENIZER")
                    .replace(str(gptoss_dir), "TOKENIZER"))
    assert outs[0] == outs[1]
    assert "hybrid (sliding window 16" in outs[0]
    code, full, _ = run(str(prompts), "--tokenizer", str(gptoss_dir), "--block-size", "16",
                        "--capacity-blocks", "40", "--kv-cache", "full")
    ratio = [line for line in outs[0].splitlines() if line.startswith("predicted ratio")]
    assert code == 0 and ratio and ratio[0] not in full  # the model matters here


def test_the_output_length_is_the_benchs_rule(tmp_path: Path) -> None:
    """vLLM 0.32's ``CustomDataset.sample``: ``--custom-output-len N`` for every request,
    each line's ``output_tokens`` only with -1 (lines without one are then refused)."""
    from prefixbench.bench.custom import prepare_file  # noqa: PLC0415

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
    code, out, _ = run("--workload", "high_overlap")
    assert code == 0
    assert "  block size:             128 tokens [cpu platform's default" in out
    code, out, _ = run("--workload", "high_overlap", "--platform", "neuron")
    assert code == 0
    assert "  block size:             32 tokens [neuron platform's default" in out
    assert "  scheduler:              async (AsyncScheduler) [neuron platform's default" in out
