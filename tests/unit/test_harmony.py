"""gpt-oss's chat rendering (prefixbench.engines.harmony) against vLLM 0.32's own
renderings (tests/fixtures/harmony/renderings.json, recorded with the script beside it),
and the tokenizer choosing it from the model's config.json."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import harmony
from prefixbench.engines.tokenizer import TokenizerError, load

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "harmony" / "renderings.json"


def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("case", range(len(recorded()["renderings"])))
def test_the_text_equals_vllms_rendering(case: int) -> None:
    data = recorded()
    item = data["renderings"][case]
    assert harmony.render(item["messages"], date=data["start_date"]) == item["text"]


def test_an_answered_turns_reasoning_is_dropped_but_the_last_unanswered_is_kept() -> None:
    answered = harmony.render([{"role": "user", "content": "q"},
                               {"role": "assistant", "content": "a", "reasoning": "r"},
                               {"role": "user", "content": "q2"}], date="2026-01-01")
    assert "<|channel|>analysis" not in answered
    assert "<|channel|>final<|message|>a<|end|>" in answered
    open_turn = harmony.render([{"role": "user", "content": "q"},
                                {"role": "assistant", "content": "", "reasoning": "r"}],
                               date="2026-01-01")
    assert open_turn.endswith("<|start|>assistant<|channel|>analysis<|message|>r<|end|>"
                              "<|start|>assistant")


def test_date_and_effort() -> None:
    text = harmony.render([{"role": "user", "content": "x"}], date="2030-02-03", effort="high")
    assert "Current date: 2030-02-03\n\nReasoning: high\n\n" in text
    assert harmony.start_date(dt.datetime(2026, 12, 4, 23, 59)) == "2026-12-04"
    with pytest.raises(harmony.HarmonyError, match="reasoning effort 'max'"):
        harmony.system_text("2030-02-03", "max")


def test_tools_and_unknown_roles_are_refused() -> None:
    with pytest.raises(harmony.HarmonyError, match="message 1: tool calls"):
        harmony.render([{"role": "user", "content": "x"},
                        {"role": "assistant", "tool_calls": [{"id": "1"}]}])
    with pytest.raises(harmony.HarmonyError, match="role 'narrator'"):
        harmony.render([{"role": "narrator", "content": "x"}])


def test_the_tokenizer_renders_gpt_oss_chat_with_harmony(tmp_path: Path) -> None:
    directory = write_tokenizer(tmp_path / "tok")
    template = load(directory).render_chat([{"role": "user", "content": "t20"}])
    assert "<|start|>" not in template
    (directory / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    tokenizer = load(directory)
    assert tokenizer.harmony and tokenizer.renders_chat
    text = tokenizer.render_chat([{"role": "user", "content": "t20"}])
    assert text.startswith("<|start|>system<|message|>You are ChatGPT")
    assert text.endswith("<|start|>user<|message|>t20<|end|><|start|>assistant")
    with pytest.raises(TokenizerError, match="gpt-oss's chat format: message 0"):
        tokenizer.render_chat([{"role": "tool", "content": "x"}])
    (directory / "config.json").write_text("not json")
    assert not load(directory).harmony
