"""gpt-oss's chat rendering (the harmony format), as vLLM 0.32 renders a chat-completions
request for a model whose ``config.json`` says ``model_type: gpt_oss``.

vLLM ignores the tokenizer's chat template for gpt-oss: ``_make_request_with_harmony``
(``vllm/renderers/online_renderer.py``) builds harmony messages with the helpers of
``vllm/entrypoints/openai/parser/harmony_utils.py`` and openai-harmony renders them.
:func:`render` produces the same text, for a request without tools, with the server's
defaults (``VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS`` unset):

* a **system** message: harmony's default identity, knowledge cutoff 2024-06, the
  conversation's start date (vLLM: ``VLLM_SYSTEM_START_DATE``, else the server's local
  date), the reasoning effort (default medium) and the valid channels;
* a leading ``system`` or ``developer`` message's text becomes a **developer** message
  ``# Instructions\\n\\n<text>`` (none when the text is empty); a later one too;
* user messages as they are; an assistant message's ``reasoning`` on the ``analysis``
  channel and its content (when not empty) on the ``final`` channel;
* analysis messages before the last assistant message on the final channel are dropped
  (``auto_drop_analysis_messages``): the reasoning of an answered turn is not part of
  the next prompt, so it is not reused from the cache either;
* the prompt ends with ``<|start|>assistant``, the generation prompt.

Content given as a list of parts is joined. vLLM has harmony encode each part on its own,
so where two parts meet the token boundaries can differ from encoding the joined text;
this renderer gives text, which the bench sends as a completion prompt and the
prediction encodes the same way. Tool calls and tool messages are not rendered
(:class:`HarmonyError`).

``tests/fixtures/harmony/renderings.json`` holds vLLM's own renderings of a set of
conversations (with the script that recorded them); the fast tier compares this module
with them text for text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["REASONING_EFFORTS", "HarmonyError", "render", "start_date", "system_text"]

REASONING_EFFORTS: Final = ("low", "medium", "high")
_SYSTEM: Final = ("You are ChatGPT, a large language model trained by OpenAI.\n"
                  "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: {effort}\n\n"
                  "# Valid channels: analysis, commentary, final. Channel must be included "
                  "for every message.")


class HarmonyError(ValueError):
    """A conversation this renderer does not render (tool calls, unknown roles)."""


def start_date(now: dt.datetime | None = None) -> str:
    """The date vLLM puts in the system message when none is pinned: local, YYYY-MM-DD."""
    return (now or dt.datetime.now()).strftime("%Y-%m-%d")


def system_text(date: str, effort: str = "medium") -> str:
    """The system message's text."""
    if effort not in REASONING_EFFORTS:
        raise HarmonyError(f"reasoning effort {effort!r}: use one of "
                           f"{', '.join(REASONING_EFFORTS)}")
    return _SYSTEM.format(date=date, effort=effort)


def _flatten(content: Any) -> str | None:
    """A message's text: a string as is, a list of parts joined, else none."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [part if isinstance(part, str) else part.get("text")
             for part in content if isinstance(part, str | Mapping)]
    kept = [t for t in texts if t is not None]
    return "".join(kept) if kept else None


def _message(role: str, text: str, channel: str | None = None) -> tuple[str, str | None, str]:
    return role, channel, text


def render(messages: Sequence[Mapping[str, Any]], *, date: str | None = None,
           effort: str = "medium") -> str:
    """The prompt text vLLM gives gpt-oss for ``messages`` (the module's docstring);
    ``date`` defaults to :func:`start_date`."""
    rest = list(messages)
    instructions = None
    if rest and rest[0].get("role") in ("system", "developer"):
        instructions = _flatten(rest.pop(0).get("content"))
    out: list[tuple[str, str | None, str]] = [
        _message("system", system_text(date or start_date(), effort))]
    if instructions:
        out.append(_message("developer", f"# Instructions\n\n{instructions}"))
    for index, msg in enumerate(rest, start=1 if instructions is not None else 0):
        role = msg.get("role")
        if msg.get("tool_calls") or role == "tool":
            raise HarmonyError(f"message {index}: tool calls and tool results are not "
                               f"rendered here")
        if role == "assistant":
            if msg.get("reasoning"):
                out.append(_message("assistant", str(msg["reasoning"]), "analysis"))
            answer = _flatten(msg.get("content"))
            if answer:
                out.append(_message("assistant", answer, "final"))
        elif role in ("system", "developer"):
            instruction = _flatten(msg.get("content"))
            if instruction is not None:
                out.append(_message("developer", f"# Instructions\n\n{instruction}"))
        elif role == "user":
            out.append(_message("user", _flatten(msg.get("content")) or ""))
        else:
            raise HarmonyError(f"message {index}: role {role!r} is not rendered by "
                               f"gpt-oss's chat format (system, developer, user, assistant)")
    last_final = max((i for i, (role, channel, _) in enumerate(out)
                      if role == "assistant" and channel == "final"), default=-1)
    kept = [m for i, m in enumerate(out) if not (i < last_final and m[1] == "analysis")]
    parts = [f"<|start|>{role}" + (f"<|channel|>{channel}" if channel else "")
             + f"<|message|>{text}<|end|>" for role, channel, text in kept]
    return "".join(parts) + "<|start|>assistant"
