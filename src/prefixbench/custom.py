"""Your own prompts: check a JSONL file, prepare what vLLM's ``custom`` dataset reads, and
the order the server will see them.

The user's file (on the controller) has one JSON object per line, blank lines ignored:

* ``{"prompt": "text", "output_tokens": N}``: sent as is;
* ``{"messages": [{"role": "user", "content": "text"}, ...], "output_tokens": N}``:
  rendered with the tokenizer's chat template (generation prompt appended;
  :meth:`prefixbench.tokenizer.Tokenizer.render_chat`), so it needs the tokenizer
  directory.

``output_tokens`` (an integer >= 1) is optional unless the workload's
``custom_output_len`` is -1. Other keys are ignored. Every problem is one line naming
the file and the line number.

:func:`prepare` writes every line as ``{"prompt": text, "output_tokens": N}`` (ASCII
JSON, one object a line): exactly what vLLM 0.32's ``CustomDataset`` reads with
``pandas.read_json(lines=True)``, and the bench passes ``--skip-chat-template`` so the
server gets the text unchanged. ``output_tokens`` is the line's own value, else
``custom_output_len``, so the column is whole (``--custom-output-len`` overrides it
unless -1).

Order (:func:`send_order`): ``CustomDataset`` loads every line, then
``random.seed(seed); random.shuffle(data)`` unless ``--disable-shuffle``, then sends the
first ``num_prompts``. The permutation depends only on the seed and the number of lines,
so it is replayed here with ``random.Random(seed).shuffle`` on the line indices. The
ready check and warmups (if any) are copies of the first prompt sent. Custom prompts are
not re-aligned to the server's tokenizer (vLLM does that for random and
prefix_repetition only).

The hosts' vLLM needs ``pandas`` for this dataset (vLLM imports it lazily).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixbench.atomic import write_bytes_atomic
from prefixbench.tokenizer import Tokenizer, TokenizerError
from prefixbench.tokenizer import load as load_tokenizer
from prefixbench.workloads import Workload

__all__ = [
    "CustomPromptsError",
    "PreparedPrompts",
    "UserPrompt",
    "check_file",
    "prepare",
    "prepare_file",
    "prepared_path",
    "read_user_file",
    "send_order",
    "texts_in_order",
    "write_prepared",
]

#: Where the bench keeps a workload's prepared prompts inside the run directory.
PROMPTS_DIR: Final = "prompts"


class CustomPromptsError(ValueError):
    """A prompts file or its preparation is invalid; one line, naming file and line."""


@dataclass(frozen=True)
class UserPrompt:
    """One line of the user's file."""

    line: int
    prompt: str | None
    messages: tuple[Mapping[str, Any], ...] | None
    output_tokens: int | None


def _parse_line(where: str, raw: str, number: int) -> UserPrompt:
    try:
        item = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CustomPromptsError(f"{where}: not valid JSON ({exc.msg}, column "
                                 f"{exc.colno})") from None
    if not isinstance(item, dict):
        raise CustomPromptsError(f"{where}: expected a JSON object, got "
                                 f"{type(item).__name__}")
    has_prompt, has_messages = "prompt" in item, "messages" in item
    if has_prompt == has_messages:
        raise CustomPromptsError(f"{where}: needs exactly one of 'prompt' (text) or "
                                 f"'messages' (a chat)")
    out = item.get("output_tokens")
    if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
        raise CustomPromptsError(f"{where}: output_tokens must be an integer >= 1, "
                                 f"got {out!r}")
    if has_prompt:
        prompt = item["prompt"]
        if not isinstance(prompt, str):
            raise CustomPromptsError(f"{where}: prompt must be a string, got "
                                     f"{type(prompt).__name__}")
        if not prompt:
            raise CustomPromptsError(f"{where}: prompt is empty")
        return UserPrompt(line=number, prompt=prompt, messages=None, output_tokens=out)
    messages = item["messages"]
    if not isinstance(messages, list) or not messages:
        raise CustomPromptsError(f"{where}: messages must be a non-empty list")
    for k, message in enumerate(messages):
        if not isinstance(message, dict):
            raise CustomPromptsError(f"{where}: messages[{k}] must be an object")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                raise CustomPromptsError(
                    f"{where}: messages[{k}].{key} must be a string, got "
                    f"{type(message.get(key)).__name__}")
    return UserPrompt(line=number, prompt=None, messages=tuple(messages),
                      output_tokens=out)


def read_user_file(path: Path) -> list[UserPrompt]:
    """Every prompt of a JSONL file, checked; raises :class:`CustomPromptsError`."""
    path = Path(path)
    out: list[UserPrompt] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, raw in enumerate(handle, start=1):
                if raw.strip():
                    out.append(_parse_line(f"{path}:{number}", raw, number))
    except OSError as exc:
        raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CustomPromptsError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not out:
        raise CustomPromptsError(f"{path}: no prompts (the file is empty)")
    return out


def send_order(num_lines: int, num_prompts: int, seed: int, *, shuffle: bool = True
               ) -> list[int]:
    """Indices (into the file's prompts) of the requests vLLM sends, in order."""
    if num_prompts > num_lines:
        raise CustomPromptsError(f"num_prompts {num_prompts} exceeds the {num_lines} "
                                 f"prompts of the file (vLLM would oversample)")
    order = list(range(num_lines))
    if shuffle:
        random.Random(seed).shuffle(order)  # noqa: S311 - replays vLLM's own shuffle
    return order[:num_prompts] if num_prompts > 0 else order


@dataclass(frozen=True)
class PreparedPrompts:
    """The file vLLM reads: every prompt's final text and output tokens, in file order."""

    source: Path
    texts: tuple[str, ...]
    output_tokens: tuple[int, ...]
    #: Prompts the bench sends (the workload's num_prompts, or every line).
    num_prompts: int
    chat_lines: int

    @property
    def jsonl(self) -> bytes:
        """The prepared file's bytes."""
        return "".join(
            json.dumps({"prompt": t, "output_tokens": n}, ensure_ascii=True,
                       separators=(", ", ": ")) + "\n"
            for t, n in zip(self.texts, self.output_tokens, strict=True)).encode("ascii")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.jsonl).hexdigest()

    def sent(self, seed: int, *, shuffle: bool = True) -> list[int]:
        """Indices of the prompts sent, in order (:func:`send_order`)."""
        return send_order(len(self.texts), self.num_prompts, seed, shuffle=shuffle)

    def record(self) -> dict[str, Any]:
        """What a bench record keeps about its prompts."""
        return {"source": str(self.source), "sha256": self.sha256,
                "lines": len(self.texts), "num_prompts": self.num_prompts,
                "chat_lines": self.chat_lines}


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def prepare_file(
    path: Path,
    *,
    num_prompts: int = 0,
    custom_output_len: int = -1,
    tokenizer: Tokenizer | None = None,
    tokenizer_dir: Path | None = None,
) -> PreparedPrompts:
    """Check and prepare a user file. Chat lines need ``tokenizer`` or ``tokenizer_dir``
    (loaded on first need). ``num_prompts`` 0 sends every prompt; more than the file holds
    is refused. Raises :class:`CustomPromptsError` (every message one line)."""
    path = Path(path)
    lines = read_user_file(path)
    if num_prompts < 0:
        raise CustomPromptsError(f"{path}: num_prompts must be >= 0 (0: every prompt)")
    if num_prompts > len(lines):
        raise CustomPromptsError(
            f"{path}: num_prompts {num_prompts} exceeds the {len(lines)} prompts in the "
            f"file; vLLM would repeat prompts drawn at random")
    texts: list[str] = []
    outs: list[int] = []
    chats = 0
    for item in lines:
        where = f"{path}:{item.line}"
        if item.output_tokens is not None:
            outs.append(item.output_tokens)
        elif custom_output_len != -1:
            outs.append(custom_output_len)
        else:
            raise CustomPromptsError(f"{where}: no output_tokens, and custom_output_len "
                                     f"is -1 (use each line's output_tokens)")
        if item.prompt is not None:
            texts.append(item.prompt)
            continue
        chats += 1
        if tokenizer is None:
            if tokenizer_dir is None:
                raise CustomPromptsError(f"{where}: a chat (messages) line needs the "
                                         f"tokenizer's chat template; no tokenizer given")
            try:
                tokenizer = load_tokenizer(tokenizer_dir)
            except TokenizerError as exc:
                raise CustomPromptsError(f"{where}: {exc}") from None
        try:
            text = tokenizer.render_chat(item.messages or ())
        except TokenizerError as exc:
            raise CustomPromptsError(f"{where}: {exc}") from None
        if not text:
            raise CustomPromptsError(f"{where}: the chat template rendered an empty prompt")
        texts.append(text)
    if all(_looks_numeric(t) for t in texts):
        raise CustomPromptsError(f"{path}: every prompt is a number; vLLM's pandas reader "
                                 f"would turn them into numbers, not text")
    return PreparedPrompts(source=path, texts=tuple(texts), output_tokens=tuple(outs),
                           num_prompts=num_prompts or len(texts), chat_lines=chats)


def prepare(workload: Workload, *, tokenizer_dir: Path | None = None,
            tokenizer: Tokenizer | None = None) -> PreparedPrompts:
    """The prepared prompts of a custom workload (its ``dataset_path`` on the controller)."""
    if not workload.is_custom or workload.dataset_path is None:
        raise CustomPromptsError(f"workload {workload.name!r} is not a custom workload")
    return prepare_file(Path(workload.dataset_path), num_prompts=workload.num_prompts,
                        custom_output_len=workload.custom_output_len,
                        tokenizer=tokenizer, tokenizer_dir=tokenizer_dir)


def check_file(workload: Workload) -> int:
    """Check a custom workload's file without a tokenizer (chat lines are not rendered);
    the number of prompts it will send. For preflight."""
    if workload.dataset_path is None:
        raise CustomPromptsError(f"workload {workload.name!r} has no dataset_path")
    path = Path(workload.dataset_path)
    lines = read_user_file(path)
    if workload.num_prompts > len(lines):
        raise CustomPromptsError(
            f"{path}: num_prompts {workload.num_prompts} exceeds the {len(lines)} prompts "
            f"in the file; vLLM would repeat prompts drawn at random")
    if workload.custom_output_len == -1:
        for item in lines:
            if item.output_tokens is None:
                raise CustomPromptsError(
                    f"{path}:{item.line}: no output_tokens, and custom_output_len is -1")
    return workload.num_prompts or len(lines)


def prepared_path(run_dir: Path, workload_name: str) -> Path:
    """``<run_dir>/prompts/<workload>.jsonl``."""
    return Path(run_dir) / PROMPTS_DIR / f"{workload_name}.jsonl"


def write_prepared(run_dir: Path, workload_name: str, prepared: PreparedPrompts) -> Path:
    """Write the prepared file atomically into the run directory; its path."""
    path = prepared_path(run_dir, workload_name)
    write_bytes_atomic(path, prepared.jsonl)
    return path


def texts_in_order(prepared: PreparedPrompts, seed: int, *, shuffle: bool = True,
                   pre_requests: int = 0) -> tuple[list[str], list[int]]:
    """The texts and output tokens of every request the server gets, in order: the
    ready check and warmups (copies of the first prompt), then the measured run."""
    order = prepared.sent(seed, shuffle=shuffle)
    order = [order[0]] * pre_requests + order if order else order
    return ([prepared.texts[i] for i in order], [prepared.output_tokens[i] for i in order])

