"""A checked prompts file without its texts: where each prompt is, and reading prompts
back by position.

:func:`index_file` runs :func:`prefixbench.engines.custom.prepare_file`'s checks (same
errors, same order) as a stream but keeps only where each prompt is
(:class:`PromptIndex`, ~25 bytes a prompt); :class:`PromptReader` reads prompts back by
position. This is how a big file's tokens are counted
(:mod:`prefixbench.predict.whatif`) without holding it.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from prefixbench.engines.custom import send_order
from prefixbench.engines.custom_read import (
    CustomPromptsError,
    chat_tokenizer,
    decode_line,
    file_stamp,
    parse_line,
    render_messages,
    scan_file,
)
from prefixbench.engines.progress import Progress
from prefixbench.engines.tokenizer import Tokenizer

__all__ = ["PromptIndex", "PromptReader", "index_file"]


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
        """Indices of the prompts sent, in order
        (:func:`prefixbench.engines.custom.send_order`)."""
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
        if file_stamp(os.fstat(self._fd)) != index.stamp:
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
                item = parse_line(where, decode_line(where, raw), 0)
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
                tok = chat_tokenizer(where, self.tokenizer, None)
                out.append(render_messages(where, tok, item.messages or ()))
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
    """:func:`prefixbench.engines.custom.prepare_file`'s checks (same errors, same order),
    read as a stream, keeping
    where each prompt is instead of its text (:class:`PromptIndex`). ``progress`` is
    called with ``("reading", bytes done, file size)`` now and then."""
    path = Path(path)
    scan = scan_file(path, num_prompts=num_prompts, custom_output_len=custom_output_len,
                     tokenizer=tokenizer, tokenizer_dir=tokenizer_dir, keep_texts=False,
                     progress=progress)
    return PromptIndex(source=path, offsets=scan.offsets, lengths=scan.lengths,
                       verbatim=scan.verbatim, output_tokens=scan.outs,
                       num_prompts=num_prompts or len(scan.offsets), chat_lines=scan.chats,
                       stamp=scan.stamp)
