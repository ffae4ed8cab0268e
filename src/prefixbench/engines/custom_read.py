"""Reading a user's prompts file: its line format, checked line by line as a stream, and
one checking pass over the whole file.

The format is :mod:`prefixbench.engines.custom`'s (one JSON object a line: ``prompt`` text
or chat ``messages``, optional ``output_tokens``). Every reader here streams the file (one
line in memory at a time, split as text mode's universal newlines split); every problem
is a :class:`CustomPromptsError` of one line naming the file and the line number.

:func:`scan_file` is the one pass that :func:`prefixbench.engines.custom.prepare_file` (which
keeps every prompt's text) and :func:`prefixbench.engines.custom_index.index_file` (which keeps
only where each prompt is) share: the same checks, in the same order. Chat lines are
rendered with the tokenizer's chat template (:func:`render_messages`).
"""

from __future__ import annotations

import json
import os
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from prefixbench.engines.progress import READING, Progress
from prefixbench.engines.tokenizer import Tokenizer, TokenizerError
from prefixbench.engines.tokenizer import load as load_tokenizer

__all__ = [
    "CustomPromptsError",
    "Scan",
    "UserPrompt",
    "chat_tokenizer",
    "decode_line",
    "file_stamp",
    "open_prompts",
    "parse_line",
    "read_user_file",
    "render_messages",
    "scan_file",
    "user_prompts",
]


class CustomPromptsError(ValueError):
    """A prompts file or its preparation is invalid; one line, naming file and line."""


@dataclass(frozen=True)
class UserPrompt:
    """One line of the user's file."""

    line: int
    prompt: str | None
    messages: tuple[Mapping[str, Any], ...] | None
    output_tokens: int | None


def parse_line(where: str, raw: str, number: int) -> UserPrompt:
    """Line ``number`` of a file, checked; ``where`` names it in the errors."""
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


_EOL: Final = re.compile(rb"\r\n?|\n")


def _physical_lines(handle: BinaryIO) -> Iterator[tuple[int, bytes]]:
    r"""``(byte offset, line)`` of every line of a binary file, split where text mode's
    universal newlines split (``\n``, ``\r\n`` and a lone ``\r``)."""
    offset = 0
    for raw in handle:
        if b"\r" in raw:
            start = 0
            for end in _EOL.finditer(raw):
                yield offset + start, raw[start:end.end()]
                start = end.end()
            if start < len(raw):
                yield offset + start, raw[start:]
        else:
            yield offset, raw
        offset += len(raw)


def decode_line(where: str, line: bytes) -> str:
    r"""A line's text as text mode gives it to JSON: a lone ``\r`` ending becomes ``\n``
    (an error's column counts from the last ``\n``; a ``\r\n`` ending reads the same)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CustomPromptsError(f"{where}: not UTF-8 text ({exc.reason})") from None
    if text.endswith("\r"):
        return text[:-1] + "\n"
    return text


def user_prompts(path: Path, handle: BinaryIO) -> Iterator[tuple[int, bytes, UserPrompt]]:
    """``(byte offset, line, prompt)`` of every non-blank line, checked, read as a stream:
    one line in memory at a time."""
    number = 0
    try:
        for offset, line in _physical_lines(handle):
            number += 1
            where = f"{path}:{number}"
            text = decode_line(where, line)
            if text.strip():
                yield offset, line, parse_line(where, text, number)
    except OSError as exc:
        raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None


#: Read buffer: prompt lines are often longer than the default 8 KiB, which makes reading
#: them line by line several times slower.
_BUFFER: Final = 1 << 20


def open_prompts(path: Path) -> BinaryIO:
    """``path`` opened to be read as a stream (binary, with a large buffer)."""
    try:
        return path.open("rb", buffering=_BUFFER)
    except OSError as exc:
        raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_user_file(path: Path) -> list[UserPrompt]:
    """Every prompt of a JSONL file, checked; raises :class:`CustomPromptsError`."""
    path = Path(path)
    with open_prompts(path) as handle:
        out = [item for _, _, item in user_prompts(path, handle)]
    if not out:
        raise CustomPromptsError(f"{path}: no prompts (the file is empty)")
    return out


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


#: Report reading progress after at least this many bytes.
_REPORT_BYTES: Final = 4 << 20


#: How a prompt's text is looked for in its line: its first _HEAD bytes, at most _TRIES
#: places.
_HEAD: Final = 32
_TRIES: Final = 4


@dataclass
class Scan:
    """What one pass over a user file keeps (see
    :class:`prefixbench.engines.custom_index.PromptIndex` for the places)."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    lengths: array[int] = field(default_factory=lambda: array("q"))
    verbatim: bytearray = field(default_factory=bytearray)
    outs: list[int] = field(default_factory=list)
    texts: list[str] | None = None
    chats: int = 0
    stamp: tuple[int, ...] = ()

    def place(self, offset: int, line: bytes, prompt: str | None) -> None:
        """Where to read a prompt back: the span of its text when its UTF-8 bytes stand
        in the line as they are (no JSON escapes), else the span of the line."""
        if prompt is not None:
            raw = prompt.encode("utf-8")
            # Look for the first bytes (a long needle is slow to search for), then compare.
            head = raw[:_HEAD]
            at = line.find(head)
            for _ in range(_TRIES):
                if at < 0 or line.startswith(raw, at):
                    break
                at = line.find(head, at + 1)
            else:
                at = -1
            if at >= 0:
                self.offsets.append(offset + at)
                self.lengths.append(len(raw))
                self.verbatim.append(1)
                return
        self.offsets.append(offset)
        self.lengths.append(len(line))
        self.verbatim.append(0)


def file_stamp(stat: os.stat_result) -> tuple[int, ...]:
    """A file's (device, inode, size, mtime): what tells that it changed."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def scan_file(
    path: Path,
    *,
    num_prompts: int,
    custom_output_len: int,
    tokenizer: Tokenizer | None,
    tokenizer_dir: Path | None,
    keep_texts: bool,
    progress: Progress | None = None,
) -> Scan:
    """Check every line of a user file in one streaming pass (chats rendered), keeping each
    prompt's place in the file and output tokens, and its text only if ``keep_texts``.

    Errors come in the order of a whole-file read then a per-prompt pass: every line
    is parsed first (the first unparsable one is reported), then ``num_prompts``, then
    the first prompt without output tokens or whose chat does not render.
    """
    scan = Scan(texts=[] if keep_texts else None)
    outs, texts = scan.outs, scan.texts
    numeric = True
    deferred: CustomPromptsError | None = None
    with open_prompts(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        report = _REPORT_BYTES
        for offset, line, item in user_prompts(path, handle):
            scan.place(offset, line, None if keep_texts else item.prompt)
            if progress is not None and offset >= report:
                progress(READING, offset, size)
                report = offset + _REPORT_BYTES
            if deferred is not None:
                continue  # keep parsing: an unparsable line is reported first
            where = f"{path}:{item.line}"
            # vLLM 0.32's CustomDataset.sample: --custom-output-len for every request
            # unless it is -1, then each line's output_tokens.
            if custom_output_len != -1:
                outs.append(custom_output_len)
            elif item.output_tokens is not None:
                outs.append(item.output_tokens)
            else:
                deferred = CustomPromptsError(
                    f"{where}: no output_tokens, and custom_output_len is -1 (use each "
                    f"line's output_tokens)")
                continue
            if item.prompt is not None:
                text = item.prompt
            else:
                scan.chats += 1
                try:
                    tokenizer = chat_tokenizer(where, tokenizer, tokenizer_dir)
                    text = render_messages(where, tokenizer, item.messages or ())
                except CustomPromptsError as exc:
                    deferred = exc
                    continue
            numeric = numeric and _looks_numeric(text)
            if texts is not None:
                texts.append(text)
        scan.stamp = file_stamp(os.fstat(handle.fileno()))
    if progress is not None:
        progress(READING, size, size)
    count = len(scan.offsets)
    if not count:
        raise CustomPromptsError(f"{path}: no prompts (the file is empty)")
    if num_prompts < 0:
        raise CustomPromptsError(f"{path}: num_prompts must be >= 0 (0: every prompt)")
    if num_prompts > count:
        raise CustomPromptsError(
            f"{path}: num_prompts {num_prompts} exceeds the {count} prompts in the "
            f"file; vLLM would repeat prompts drawn at random")
    if deferred is not None:
        raise deferred
    if numeric:
        raise CustomPromptsError(f"{path}: every prompt is a number; vLLM's pandas reader "
                                 f"would turn them into numbers, not text")
    return scan


def chat_tokenizer(where: str, tokenizer: Tokenizer | None,
                   tokenizer_dir: Path | None) -> Tokenizer:
    """The tokenizer a chat line at ``where`` is rendered with: ``tokenizer``, else the one
    in ``tokenizer_dir``."""
    if tokenizer is not None:
        return tokenizer
    if tokenizer_dir is None:
        raise CustomPromptsError(f"{where}: a chat (messages) line needs the "
                                 f"tokenizer's chat template; no tokenizer given")
    try:
        return load_tokenizer(tokenizer_dir)
    except TokenizerError as exc:
        raise CustomPromptsError(f"{where}: {exc}") from None


def render_messages(where: str, tokenizer: Tokenizer,
                    messages: Sequence[Mapping[str, Any]]) -> str:
    """A chat line's text: its messages through the tokenizer's chat template."""
    try:
        text = tokenizer.render_chat(messages)
    except TokenizerError as exc:
        raise CustomPromptsError(f"{where}: {exc}") from None
    if not text:
        raise CustomPromptsError(f"{where}: the chat template rendered an empty prompt")
    return text
