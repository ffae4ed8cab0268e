"""The simulated fleet's tiny tokenizers written into a directory, for the tests that
count tokens or render chats without a server (custom workloads, what-if).

``write_tokenizer(directory)`` writes the word-level tokenizer (``t<i>`` is token ``i``,
exact round trip), which the token-counting tests rely on; ``kind="bpe"`` writes the
byte-level BPE the fleet's model serves (trained once per test session: ~1 s)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from prefixbench_sim import tinyconfig, tinytokenizer


@lru_cache(maxsize=4)
def _tokenizer_text(kind: str) -> str:
    spec = tinyconfig.TinyLlamaSpec(tokenizer=kind)
    return json.dumps(tinytokenizer.model_tokenizer_json(spec), ensure_ascii=False)


def write_tokenizer(directory: Path, kind: str = "word") -> Path:
    """``tokenizer.json`` and ``tokenizer_config.json`` (with its chat template)."""
    spec = tinyconfig.TinyLlamaSpec(tokenizer=kind)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(_tokenizer_text(kind), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tinytokenizer.tokenizer_config(spec)))
    return directory
