"""The tiny model's tokenizer: ``tokenizer.json`` (byte-level BPE or word-level) and
``tokenizer_config.json`` with its chat template.

Both kinds, and why the fleet serves the BPE, are described in
:mod:`prefixbench_sim.tinymodel`. The BPE is trained here with the ``tokenizers`` library
on a corpus generated from the spec's seed (:func:`bpe_corpus`), so the same spec and
``tokenizers`` version always give the same bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from prefixbench_sim.tinyconfig import SPECIAL_TOKENS, TinyLlamaSpec

__all__ = [
    "BPE_CORPUS_LINES",
    "BPE_MIN_VOCAB",
    "CHAT_TEMPLATE",
    "TOKENIZER_KINDS",
    "bpe_corpus",
    "bpe_tokenizer_json",
    "model_tokenizer_json",
    "tokenizer_config",
    "tokenizer_json",
    "vocab",
    "word",
    "word_level_tokenizer_json",
]

#: Role markers and end of turn are vocabulary words, so a rendered chat encodes to
#: known ids. Unknown roles are refused, as real templates do.
CHAT_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}t12 "
    "{% elif message['role'] == 'user' %}t10 "
    "{% elif message['role'] == 'assistant' %}t11 "
    "{% else %}{{ raise_exception('unknown role ' + message['role']) }}"
    "{% endif %}"
    "{{ message['content'] | trim }} t13 "
    "{% endfor %}"
    "{% if add_generation_prompt %}t11{% endif %}"
)


def word(token_id: int) -> str:
    """The word of a non-special token id."""
    return f"t{token_id}"


def vocab(spec: TinyLlamaSpec) -> dict[str, int]:
    out = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    out.update({word(i): i for i in range(len(SPECIAL_TOKENS), spec.vocab_size)})
    return out


def _added_tokens() -> list[dict[str, Any]]:
    return [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, tok in enumerate(SPECIAL_TOKENS)
    ]


def word_level_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The word-level ``tokenizer.json`` (``tokenizers`` serialisation format)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab(spec), "unk_token": "<unk>"},
    }


def tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The word-level ``tokenizer.json``, whatever ``spec.tokenizer`` says.

    Kept under this name for the tests and tools that count ``t<i>`` words as tokens;
    the model directory's tokenizer is :func:`model_tokenizer_json`.
    """
    return word_level_tokenizer_json(spec)


#: Pieces of the BPE training corpus's pseudo-words.
_ONSETS: Final = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r",
                  "s", "t", "v", "w", "x", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl",
                  "sh", "st", "th", "tr", "wh")
_VOWELS: Final = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "io", "oo", "ou")
_CODAS: Final = ("", "", "", "n", "r", "s", "t", "l", "m", "ng", "nd", "st", "ck", "x")
_PUNCT: Final = (".", ",", ";", ":", "!", "?", "-", "'", '"', "(", ")", "/", "...", "--")
#: Lines of the BPE training corpus: enough pairs for a few thousand merges.
BPE_CORPUS_LINES: Final = 4000
#: Ids before the merges: the special tokens, then the 256 byte symbols.
BPE_MIN_VOCAB: Final = len(SPECIAL_TOKENS) + 256


def bpe_corpus(seed: int, lines: int = BPE_CORPUS_LINES) -> list[str]:
    """A deterministic training corpus: lines of seeded pseudo-words (some capitalised),
    numbers, punctuation and U+FFFD.

    U+FFFD is in it so that, as in large vocabularies, the replacement character that
    decoding stray bytes produces is one token: a random id sequence then decodes and
    re-encodes to a stable length, and vLLM's length adjustment converges.
    """
    rng = random.Random(seed)  # noqa: S311 -- a reproducible corpus, not secrets

    def pseudo_word() -> str:
        syllables = rng.choice((1, 1, 2, 2, 3))
        text = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(syllables))
        r = rng.random()
        if r < 0.10:
            return text.capitalize()
        if r < 0.13:
            return str(rng.randrange(10000))
        if r < 0.16:
            return "\ufffd" * rng.randint(1, 3) + (text if rng.random() < 0.5 else "")
        return text

    out: list[str] = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(5, 20)):
            w = pseudo_word()
            if rng.random() < 0.15:
                w += rng.choice(_PUNCT)
            words.append(w)
        out.append(" ".join(words))
    return out


_BYTE_LEVEL: Final = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True}


def bpe_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """A byte-level BPE ``tokenizer.json`` of ``spec.vocab_size`` ids, trained on
    :func:`bpe_corpus` with the ``tokenizers`` library (needs it installed).

    Only the trained vocabulary and merges are taken from the library; the JSON around
    them is written here, so the file does not change with the library's serialiser.
    """
    if spec.vocab_size <= BPE_MIN_VOCAB:
        raise ValueError(f"a byte-level BPE needs more than {BPE_MIN_VOCAB} ids (the "
                         f"special tokens and 256 bytes), got vocab_size {spec.vocab_size}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size, min_frequency=2, show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(bpe_corpus(spec.seed), trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab_ids: dict[str, int] = trained["vocab"]
    merges = [m if isinstance(m, list) else m.split(" ", 1) for m in trained["merges"]]
    if len(vocab_ids) != spec.vocab_size or sorted(vocab_ids.values()) != list(
            range(spec.vocab_size)):
        raise ValueError(f"BPE training gave {len(vocab_ids)} ids, not {spec.vocab_size}: "
                         f"the corpus has too few distinct pairs")
    if any(vocab_ids[t] != i for i, t in enumerate(SPECIAL_TOKENS)):
        raise ValueError("BPE training did not put the special tokens at ids 0-3")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(),
        "normalizer": None,
        "pre_tokenizer": dict(_BYTE_LEVEL),
        "post_processor": None,
        "decoder": {**_BYTE_LEVEL, "add_prefix_space": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab_ids.items(), key=lambda kv: kv[1])),
                  "merges": [list(m) for m in merges]},
    }


TOKENIZER_KINDS: Final = ("bpe", "word")


def model_tokenizer_json(spec: TinyLlamaSpec) -> dict[str, Any]:
    """The ``tokenizer.json`` of the model directory: the kind ``spec.tokenizer`` names."""
    if spec.tokenizer == "bpe":
        return bpe_tokenizer_json(spec)
    if spec.tokenizer == "word":
        return word_level_tokenizer_json(spec)
    raise ValueError(f"unknown tokenizer kind {spec.tokenizer!r} (known: "
                     f"{', '.join(TOKENIZER_KINDS)})")


def tokenizer_config(spec: TinyLlamaSpec) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "add_bos_token": False, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": spec.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }
