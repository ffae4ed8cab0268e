"""Custom workloads through preflight (rules, plan) and the whatif command line."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from prefixbench.config import plan, settings
from prefixbench.frontend import cli
from prefixbench_sim import tinyconfig, tinytokenizer

BASE: dict[str, Any] = {
    "prefixbench_instance_type": "trn2.48xlarge",
    "vllm_service_model": "/opt/models/gpt-oss-120b",
}


def custom(path: Path, **extra: Any) -> dict[str, Any]:
    return {"name": "mine", "dataset_name": "custom", "dataset_path": str(path), **extra}


def test_rules_check_the_prompts_file(tmp_path: Path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "hello"}\n')
    assert settings.validate({**BASE, "prefixbench_workloads": [custom(good)]}, host="h").ok
    for workload, message in (
            (custom(tmp_path / "absent.jsonl"), "absent.jsonl: cannot read"),
            (custom(good, num_prompts=2), "exceeds the 1 prompts"),
            (custom(good, custom_output_len=-1), "p.jsonl:1: no output_tokens"),
            (custom(good, custom_output_len=100000), "leaves no room")):
        result = settings.validate({**BASE, "prefixbench_workloads": [workload]}, host="h")
        assert not result.ok
        assert any(message in line for line in result.problems), result.problems


def test_plan_line_of_a_custom_workload(tmp_path: Path) -> None:
    lines = plan.workload_lines({"prefixbench_workloads": [
        custom(tmp_path / "p.jsonl", custom_output_len=-1, max_concurrency=2)]})
    assert lines[0] == (f"workload mine: your prompts from {tmp_path / 'p.jsonl'}, all "
                        f"prompts, out per line, c=2, rate inf; expected hit ratio predicted "
                        f"after the run (prefixbench whatif)")
    # Your own prompts serve no criterion unless declared: the plan says so.
    assert [ln.split(" (")[0] for ln in lines[1:]] == [
        "criterion high_overlap", "criterion no_overlap", "criterion sustained"]
    assert all("not run" in ln for ln in lines[1:])


def test_whatif_command(tmp_path: Path) -> None:
    spec = tinyconfig.TinyLlamaSpec()
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps(tinytokenizer.tokenizer_json(spec)))
    (tok / "tokenizer_config.json").write_text(json.dumps(tinytokenizer.tokenizer_config(spec)))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(
        json.dumps({"prompt": f"t5 t6 t7 t8 t{20 + i}"}) + "\n" for i in range(4)))
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["whatif", "--platform", "cpu",
                     str(prompts), "--tokenizer", str(tok), "--block-size", "2"],
                    out=out, err=err) == 0
    text = out.getvalue()
    assert "predicted ratio: 60.0000%" in text  # 3 warm x 4 hit tokens / 20
    assert "hit tokens:      12 of 20 queried, 4 requests" in text
    for workers in ("1", "3"):  # the same prediction on any number of encoding threads
        again = io.StringIO()
        assert cli.main(["whatif", "--platform", "cpu",
                         str(prompts), "--tokenizer", str(tok), "--block-size", "2",
                         "--workers", workers], out=again, err=err) == 0
        assert again.getvalue() == text
    assert err.getvalue() == ""  # not a terminal, so no progress bar
    out = io.StringIO()
    assert cli.main(["whatif", "--platform", "cpu",
                     "--workload", "high_overlap", "--block-size", "100"],
                    out=out, err=err) == 0
    assert "predicted ratio: 65.9180%" in out.getvalue()
    assert "formula:         65.9180%" in out.getvalue()
    for argv, message in (
            (["whatif"], "give a PROMPTS.jsonl file or --workload NAME"),
            (["whatif", str(prompts)], "needs --tokenizer"),
            (["whatif", "--workload", "nope"], "no workload 'nope'"),
            (["whatif", str(tmp_path / "x.jsonl"), "--tokenizer", str(tok)], "no such file"),
            (["whatif", "--workload", "high_overlap", "--block-size", "0"], ">= 1"),
            (["whatif", str(prompts), "--tokenizer", str(tok), "--workers", "0"],
             "--workers must be >= 1, got 0"),
            (["whatif", "--workload", "high_overlap", "--capacity-blocks", "2"],
             "does not fit")):
        err = io.StringIO()
        assert cli.main(argv, out=io.StringIO(), err=err) == 2, argv
        assert message in err.getvalue() and err.getvalue().count("\n") == 1
