"""Your own prompts: check a JSONL file, prepare what vLLM's ``custom`` dataset reads, and
the order the server will see them.

The user's file (on the controller) has one JSON object per line, blank lines ignored:

* ``{"prompt": "text", "output_tokens": N}``: sent as is;
* ``{"messages": [{"role": "user", "content": "text"}, ...], "output_tokens": N}``:
  rendered with the tokenizer's chat template (generation prompt appended;
  :meth:`prefixbench.engines.tokenizer.Tokenizer.render_chat`), so it needs the tokenizer
  directory.

``output_tokens`` (an integer >= 1) is optional unless the workload's
``custom_output_len`` is -1. Other keys are ignored. Every problem is one line naming
the file and the line number.

:func:`prepare` writes every line as ``{"prompt": text, "output_tokens": N}`` (ASCII
JSON, one object a line): exactly what vLLM 0.32's ``CustomDataset`` reads with
``pandas.read_json(lines=True)``, and the bench passes ``--skip-chat-template`` so the
server gets the text unchanged. ``output_tokens`` is what the bench will generate for
the line, by vLLM's rule (``CustomDataset.sample``): the workload's ``custom_output_len``
(``--custom-output-len``, which the bench always passes) for every line, and only when
it is -1 the line's own ``output_tokens``. So the column is whole, and a line's own value
is ignored unless ``custom_output_len`` is -1.

Order (:func:`send_order`): ``CustomDataset`` loads every line, then
``random.seed(seed); random.shuffle(data)`` unless ``--disable-shuffle``, then sends the
first ``num_prompts``. The permutation depends only on the seed and the number of lines,
so it is replayed here with ``random.Random(seed).shuffle`` on the line indices. The
ready check and warmups (if any) are copies of the first prompt sent. Custom prompts are
not re-aligned to the server's tokenizer (vLLM does that for random and
prefix_repetition only).

Reading and checking the file is :mod:`prefixbench.engines.custom_read` (streamed: one
line in memory at a time, split as text mode's universal newlines split; the errors are
its :class:`~prefixbench.engines.custom_read.CustomPromptsError`). :func:`prepare_file`
keeps every prompt's text (the prepared file is written from them);
:func:`prefixbench.engines.custom_index.index_file` runs the same checks but keeps only
where each prompt is (:class:`~prefixbench.engines.custom_index.PromptIndex`, ~25 bytes a
prompt) and reads prompts back by position
(:class:`~prefixbench.engines.custom_index.PromptReader`), for counting a file's tokens
(:mod:`prefixbench.predict.whatif`) without holding it.

The hosts' vLLM needs ``pandas`` for this dataset (vLLM imports it lazily).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixbench.engines.custom_read import (
    CustomPromptsError,
    open_prompts,
    scan_file,
    user_prompts,
)
from prefixbench.engines.tokenizer import Tokenizer
from prefixbench.engines.workloads import Workload

__all__ = [
    # Re-exported: the error every function here raises (defined in custom_read).
    "CustomPromptsError",
    "PreparedPrompts",
    "check_file",
    "prepare",
    "prepare_file",
    "send_order",
    "texts_in_order",
]


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
    is refused. Raises :class:`~prefixbench.engines.custom_read.CustomPromptsError` (every
    message one line).

    Every prompt's text is kept (the prepared file is written from them); to count a big
    file's tokens, :func:`prefixbench.engines.custom_index.index_file` keeps only where each
    prompt is."""
    path = Path(path)
    scan = scan_file(path, num_prompts=num_prompts, custom_output_len=custom_output_len,
                     tokenizer=tokenizer, tokenizer_dir=tokenizer_dir, keep_texts=True)
    texts = scan.texts or []
    return PreparedPrompts(source=path, texts=tuple(texts), output_tokens=tuple(scan.outs),
                           num_prompts=num_prompts or len(texts), chat_lines=scan.chats)


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
    with open_prompts(path) as handle:
        for _, _, item in user_prompts(path, handle):
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


def texts_in_order(prepared: PreparedPrompts, seed: int, *, shuffle: bool = True,
                   pre_requests: int = 0) -> tuple[list[str], list[int]]:
    """The texts and output tokens of every request the server gets, in order: the
    ready check and warmups (copies of the first prompt), then the measured run."""
    order = prepared.sent(seed, shuffle=shuffle)
    order = [order[0]] * pre_requests + order if order else order
    return ([prepared.texts[i] for i in order], [prepared.output_tokens[i] for i in order])

