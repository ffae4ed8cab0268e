"""The simulated fleet's tiny tokenizer written into a directory, for the tests that
count tokens or render chats without a server (custom workloads, what-if)."""

from __future__ import annotations

import json
from pathlib import Path

from prefixbench.sim import tinymodel


def write_tokenizer(directory: Path) -> Path:
    """``tokenizer.json`` and ``tokenizer_config.json`` (with its chat template)."""
    spec = tinymodel.TinyLlamaSpec()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(json.dumps(tinymodel.tokenizer_json(spec)))
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tinymodel.tokenizer_config(spec)))
    return directory
