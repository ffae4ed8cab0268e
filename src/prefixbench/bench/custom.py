"""Your own prompts: check a JSONL file, prepare what vLLM's ``custom`` dataset reads, and
the order the server will see them.

The user's file (on the controller) has one JSON object per line, blank lines ignored:

* ``{"prompt": "text", "output_tokens": N}``: sent as is;
* ``{"messages": [{"role": "user", "content": "text"}, ...], "output_tokens": N}``:
  rendered with the tokenizer's chat template (generation prompt appended;
  :meth:`prefixbench.predict.tokenizer.Tokenizer.render_chat`), so it needs the tokenizer
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

Big files: every reader here streams the file (one line in memory at a time, split as
text mode's universal newlines split). :func:`prepare_file` keeps every prompt's text (the
prepared file is written from them); :func:`index_file` runs the same checks but keeps
only where each prompt is (:class:`PromptIndex`, ~25 bytes a prompt) and reads prompts
back by position (:class:`PromptReader`), for counting a file's tokens
(:mod:`prefixbench.predict.whatif`) without holding it.

The hosts' vLLM needs ``pandas`` for this dataset (vLLM imports it lazily).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Self

from prefixbench.bench.workloads import Workload
from prefixbench.frontend.progress import READING, Progress
from prefixbench.measure.atomic import write_bytes_atomic
from prefixbench.predict.tokenizer import Tokenizer, TokenizerError
from prefixbench.predict.tokenizer import load as load_tokenizer

__all__ = [
    "CustomPromptsError",
    "PreparedPrompts",
    "PromptIndex",
    "PromptReader",
    "UserPrompt",
    "check_file",
    "index_file",
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


def _decode(where: str, line: bytes) -> str:
    r"""A line's text as text mode gives it to JSON: a lone ``\r`` ending becomes ``\n``
    (an error's column counts from the last ``\n``; a ``\r\n`` ending reads the same)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CustomPromptsError(f"{where}: not UTF-8 text ({exc.reason})") from None
    if text.endswith("\r"):
        return text[:-1] + "\n"
    return text


def _user_prompts(path: Path, handle: BinaryIO) -> Iterator[tuple[int, bytes, UserPrompt]]:
    """``(byte offset, line, prompt)`` of every non-blank line, checked, read as a stream:
    one line in memory at a time."""
    number = 0
    try:
        for offset, line in _physical_lines(handle):
            number += 1
            where = f"{path}:{number}"
            text = _decode(where, line)
            if text.strip():
                yield offset, line, _parse_line(where, text, number)
    except OSError as exc:
        raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None


#: Read buffer: prompt lines are often longer than the default 8 KiB, which makes reading
#: them line by line several times slower.
_BUFFER: Final = 1 << 20


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb", buffering=_BUFFER)
    except OSError as exc:
        raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_user_file(path: Path) -> list[UserPrompt]:
    """Every prompt of a JSONL file, checked; raises :class:`CustomPromptsError`."""
    path = Path(path)
    with _open(path) as handle:
        out = [item for _, _, item in _user_prompts(path, handle)]
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


#: Report reading progress after at least this many bytes.
_REPORT_BYTES: Final = 4 << 20


#: How a prompt's text is looked for in its line: its first _HEAD bytes, at most _TRIES
#: places.
_HEAD: Final = 32
_TRIES: Final = 4


@dataclass
class _Scan:
    """What one pass over a user file keeps (see :class:`PromptIndex` for the places)."""

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


def _stamp(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _scan(
    path: Path,
    *,
    num_prompts: int,
    custom_output_len: int,
    tokenizer: Tokenizer | None,
    tokenizer_dir: Path | None,
    keep_texts: bool,
    progress: Progress | None = None,
) -> _Scan:
    """Check every line of a user file in one streaming pass (chats rendered), keeping each
    prompt's place in the file and output tokens, and its text only if ``keep_texts``.

    Errors come in the order of a whole-file read then a per-prompt pass: every line
    is parsed first (the first unparsable one is reported), then ``num_prompts``, then
    the first prompt without output tokens or whose chat does not render.
    """
    scan = _Scan(texts=[] if keep_texts else None)
    outs, texts = scan.outs, scan.texts
    numeric = True
    deferred: CustomPromptsError | None = None
    with _open(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        report = _REPORT_BYTES
        for offset, line, item in _user_prompts(path, handle):
            scan.place(offset, line, None if keep_texts else item.prompt)
            if progress is not None and offset >= report:
                progress(READING, offset, size)
                report = offset + _REPORT_BYTES
            if deferred is not None:
                continue  # keep parsing: an unparsable line is reported first
            where = f"{path}:{item.line}"
            if item.output_tokens is not None:
                outs.append(item.output_tokens)
            elif custom_output_len != -1:
                outs.append(custom_output_len)
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
                    tokenizer = _chat_tokenizer(where, tokenizer, tokenizer_dir)
                    text = _render(where, tokenizer, item.messages or ())
                except CustomPromptsError as exc:
                    deferred = exc
                    continue
            numeric = numeric and _looks_numeric(text)
            if texts is not None:
                texts.append(text)
        scan.stamp = _stamp(os.fstat(handle.fileno()))
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


def _chat_tokenizer(where: str, tokenizer: Tokenizer | None,
                    tokenizer_dir: Path | None) -> Tokenizer:
    if tokenizer is not None:
        return tokenizer
    if tokenizer_dir is None:
        raise CustomPromptsError(f"{where}: a chat (messages) line needs the "
                                 f"tokenizer's chat template; no tokenizer given")
    try:
        return load_tokenizer(tokenizer_dir)
    except TokenizerError as exc:
        raise CustomPromptsError(f"{where}: {exc}") from None


def _render(where: str, tokenizer: Tokenizer, messages: Sequence[Mapping[str, Any]]) -> str:
    try:
        text = tokenizer.render_chat(messages)
    except TokenizerError as exc:
        raise CustomPromptsError(f"{where}: {exc}") from None
    if not text:
        raise CustomPromptsError(f"{where}: the chat template rendered an empty prompt")
    return text


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
    is refused. Raises :class:`CustomPromptsError` (every message one line).

    Every prompt's text is kept (the prepared file is written from them); to count a big
    file's tokens, :func:`index_file` keeps only where each prompt is."""
    path = Path(path)
    scan = _scan(path, num_prompts=num_prompts, custom_output_len=custom_output_len,
                 tokenizer=tokenizer, tokenizer_dir=tokenizer_dir, keep_texts=True)
    texts = scan.texts or []
    return PreparedPrompts(source=path, texts=tuple(texts), output_tokens=tuple(scan.outs),
                           num_prompts=num_prompts or len(texts), chat_lines=scan.chats)


@dataclass(frozen=True)
class PromptIndex:
    """A checked user file without its texts: where each prompt is and its output tokens,
    in file order. :meth:`reader` reads the prompts back by position.

    Where a prompt is: the byte span of its text when its UTF-8 bytes stand verbatim in
    its line (``verbatim[i]`` 1: read back without parsing JSON), else the span of its
    line (parsed again; chats rendered again).

    Memory: two 8-byte integers, a byte and a list slot a prompt (about 25 bytes; a
    million lines take ~25 MB), whatever the prompts' length.
    """

    source: Path
    offsets: array[int]
    lengths: array[int]
    verbatim: bytes | bytearray
    output_tokens: Sequence[int]
    #: Prompts the bench sends (the workload's num_prompts, or every line).
    num_prompts: int
    chat_lines: int
    #: The file's (device, inode, size, mtime) when it was checked.
    stamp: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.offsets)

    def sent(self, seed: int, *, shuffle: bool = True) -> list[int]:
        """Indices of the prompts sent, in order (:func:`send_order`)."""
        return send_order(len(self), self.num_prompts, seed, shuffle=shuffle)

    def reader(self, tokenizer: Tokenizer | None = None) -> PromptReader:
        """Read prompts back by index; ``tokenizer`` renders chat lines. Close it (or use
        it as a context manager)."""
        return PromptReader(self, tokenizer)


class PromptReader:
    """The prompts of a :class:`PromptIndex`, read by position (``os.pread``: any thread
    may call :meth:`texts`). Refuses a file that changed since it was checked."""

    def __init__(self, index: PromptIndex, tokenizer: Tokenizer | None = None) -> None:
        self.index = index
        self.tokenizer = tokenizer
        path = index.source
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise CustomPromptsError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if _stamp(os.fstat(self._fd)) != index.stamp:
            self.close()
            raise CustomPromptsError(f"{path}: the file changed since it was checked")

    def texts(self, indices: Sequence[int]) -> list[str]:
        """The final texts (chats rendered) of the prompts at ``indices``, in that order."""
        if self._fd is None:
            raise ValueError("PromptReader is closed")
        fd, index = self._fd, self.index
        offsets, lengths, verbatim = index.offsets, index.lengths, index.verbatim
        path = index.source
        out: list[str] = []
        for i in indices:
            where = f"{path} (prompt {i + 1}, byte {offsets[i]})"
            try:
                raw = os.pread(fd, lengths[i], offsets[i])
                if len(raw) != lengths[i]:
                    raise CustomPromptsError(f"{where}: the file is shorter than when checked")
                if verbatim[i]:
                    out.append(raw.decode("utf-8"))
                    continue
                item = _parse_line(where, _decode(where, raw), 0)
            except UnicodeDecodeError as exc:
                raise CustomPromptsError(f"{where}: not UTF-8 text ({exc.reason}) (the file "
                                         f"changed since it was checked?)") from None
            except OSError as exc:
                raise CustomPromptsError(f"{where}: cannot read: {exc.strerror or exc}"
                                         ) from None
            except CustomPromptsError as exc:
                raise CustomPromptsError(f"{exc} (the file changed since it was checked?)"
                                         ) from None
            if item.prompt is not None:
                out.append(item.prompt)
            else:
                tok = _chat_tokenizer(where, self.tokenizer, None)
                out.append(_render(where, tok, item.messages or ()))
        return out

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def index_file(
    path: Path,
    *,
    num_prompts: int = 0,
    custom_output_len: int = -1,
    tokenizer: Tokenizer | None = None,
    tokenizer_dir: Path | None = None,
    progress: Progress | None = None,
) -> PromptIndex:
    """:func:`prepare_file`'s checks (same errors, same order), read as a stream, keeping
    where each prompt is instead of its text (:class:`PromptIndex`). ``progress`` is
    called with ``("reading", bytes done, file size)`` now and then."""
    path = Path(path)
    scan = _scan(path, num_prompts=num_prompts, custom_output_len=custom_output_len,
                 tokenizer=tokenizer, tokenizer_dir=tokenizer_dir, keep_texts=False,
                 progress=progress)
    return PromptIndex(source=path, offsets=scan.offsets, lengths=scan.lengths,
                       verbatim=scan.verbatim, output_tokens=scan.outs,
                       num_prompts=num_prompts or len(scan.offsets), chat_lines=scan.chats,
                       stamp=scan.stamp)


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
    the number of prompts it will send. For preflight. Reads the file as a stream."""
    if workload.dataset_path is None:
        raise CustomPromptsError(f"workload {workload.name!r} has no dataset_path")
    path = Path(workload.dataset_path)
    count = 0
    missing: int | None = None
    with _open(path) as handle:
        for _, _, item in _user_prompts(path, handle):
            count += 1
            if missing is None and item.output_tokens is None:
                missing = item.line
    if not count:
        raise CustomPromptsError(f"{path}: no prompts (the file is empty)")
    if workload.num_prompts > count:
        raise CustomPromptsError(
            f"{path}: num_prompts {workload.num_prompts} exceeds the {count} prompts "
            f"in the file; vLLM would repeat prompts drawn at random")
    if workload.custom_output_len == -1 and missing is not None:
        raise CustomPromptsError(
            f"{path}:{missing}: no output_tokens, and custom_output_len is -1")
    return workload.num_prompts or count


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

