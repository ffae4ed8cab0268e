"""A tokenizer is loaded once per process while its files are unchanged: a report over a
fleet's records reloaded a 12 MB tokenizer once per record."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer


def test_the_same_files_load_once_and_a_change_reloads(tmp_path: Path) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    first = tokenizer.load(tok)
    assert tokenizer.load(tok) is first
    assert tokenizer.load(tmp_path / "tok" / ".." / "tok") is first  # same files
    # A changed file beside it (its size and mtime) is a new load.
    config = tok / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["model_max_length"] = 12345
    config.write_text(json.dumps(data))
    os.utime(config, ns=(1, 1))
    again = tokenizer.load(tok)
    assert again is not first and again.config["model_max_length"] == 12345
