"""vLLM's ``prefix_repetition`` dataset, regenerated in pure Python (no numpy).

``vllm bench serve --dataset-name prefix_repetition`` (``PrefixRepetitionRandomDataset``,
vLLM 0.32, ``vllm/benchmarks/datasets/datasets.py``) does, with ``seed = --seed``
(default 0):

1. ``random.seed(seed)`` and ``np.random.seed(seed)`` (the legacy global generators).
2. ``prompts_per_prefix = num_prompts // num_prefixes``; for each prefix in turn: draw
   ``prefix_len`` tokens, then for each of its prompts draw ``suffix_len`` tokens. Every
   draw is ``np.random.randint(0, tokenizer.vocab_size, size=n)`` from the one global
   stream, followed by a decode -> encode round trip that may trim the list or append
   more draws until the length is exact (at most 10 rounds).
3. ``random.shuffle(requests)`` unless ``--disable-shuffle``.

So all prefixes and suffixes come from one seeded stream, in order: two runs with the
same seed share their stream's beginning, which is how the tutorial's no-overlap run
(seed 0) finds cache entries left by its high-overlap run (seed 0).

Reproduction here:

* numpy's legacy ``RandomState`` seeded with an int is MT19937 initialised by Knuth's
  ``init_genrand`` (``mt19937_seed``); Python's ``random.Random`` is the same MT19937, so
  loading that state with ``setstate`` yields the identical 32-bit stream.
  ``randint(0, high, size)`` (int64, ``high - 1 < 2**32``) draws one 32-bit word per
  value, masks it to the next power of two minus one and rejects values ``>= high``.
  This module does exactly that, 32 words at a time in C via ``getrandbits``. Checked
  value for value against numpy 2.x (see the unit tests' golden vectors).
* The shuffle uses Python's own ``random.Random(seed).shuffle``: the permutation depends
  only on the seed and the number of requests, never on the tokenizer.
* The round trip depends on the tokenizer. With a tokenizer whose decode -> encode is the
  identity on the drawn ids (the simulated fleet's word-level tokenizer), the default
  reproduces the prompts exactly. For any other tokenizer pass ``roundtrip`` (decode
  then encode, as ``tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False)``)
  and ``vocab_size = tokenizer.vocab_size``; the adjustment loop below mirrors vLLM's
  ``gen_prompt_decode_to_target_len``.

Then the bench aligns the prompts to the server's tokenizer (vLLM 0.32
``vllm/benchmarks/serve.py`` ``_align_prompts_to_server_tokenizer``, for the random and
prefix_repetition datasets): when the server's ``/tokenize`` of the first prompt (no
special tokens) is not the length the dataset drew, every prompt the server encodes
longer than its drawn length is cut to that many server tokens and detokenized; the
others are sent as they are. :func:`align_to_server` does the same with the server's
tokenizer, which decides whether a re-split at the prefix/suffix junction of the first
prompt is cut away from every prompt.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "LegacyNumpyRandom",
    "PromptSpec",
    "align_to_server",
    "cold_flags",
    "generate_prompts",
    "prefix_order",
    "prefix_repetition_cold_flags",
]

_MT_N = 624
_MASK32 = 0xFFFFFFFF


class LegacyNumpyRandom:
    """``np.random.seed(seed)`` + ``np.random.randint(0, high, size)`` without numpy."""

    def __init__(self, seed: int) -> None:
        if not 0 <= seed <= _MASK32:
            raise ValueError(f"numpy's legacy seed must be in [0, 2**32), got {seed}")
        mt = [0] * _MT_N
        s = seed
        for i in range(_MT_N):
            mt[i] = s
            s = (1812433253 * (s ^ (s >> 30)) + i + 1) & _MASK32
        self._rng = random.Random()  # noqa: S311 - mirrors numpy's MT19937, not for secrets
        # pos = 624: the next draw regenerates the whole state, as numpy's does.
        self._rng.setstate((3, (*mt, _MT_N), None))

    def words(self, n: int) -> array[int]:
        """The next ``n`` raw 32-bit outputs of the generator."""
        out: array[int] = array("I")
        if n <= 0:
            return out
        big = self._rng.getrandbits(32 * n)
        out.frombytes(big.to_bytes(4 * n, "little"))
        if out.itemsize != 4:  # pragma: no cover - 'I' is 4 bytes on every platform we run
            raise RuntimeError("array('I') is not 32-bit here")
        return out

    def randint(self, high: int, size: int) -> list[int]:
        """``np.random.randint(0, high, size=size).tolist()`` for ``1 <= high <= 2**32``."""
        if high < 1 or high > 1 << 32:
            raise ValueError(f"high must be in [1, 2**32], got {high}")
        rng = high - 1
        if rng == 0:
            return [0] * size  # numpy draws nothing for an empty range
        mask = (1 << rng.bit_length()) - 1
        out: list[int] = []
        need = size
        while need > 0:
            batch = [w & mask for w in self.words(need)]
            if rng != mask:
                batch = [v for v in batch if v <= rng]
            out.extend(batch)
            need = size - len(out)
        return out


Roundtrip = Callable[[list[int]], list[int]]


@dataclass(frozen=True)
class PromptSpec:
    """One generated request: which prefix and which of its suffixes, and its tokens."""

    prefix_index: int
    suffix_index: int
    tokens: tuple[int, ...]


def _exact_length(
    gen: LegacyNumpyRandom, vocab_size: int, target: int, roundtrip: Roundtrip | None
) -> list[int]:
    tokens = gen.randint(vocab_size, target)
    if roundtrip is None:
        return tokens
    # vLLM's gen_prompt_decode_to_target_len, max_retry=10.
    remaining = 10
    while True:
        tokens = list(roundtrip(tokens))
        if remaining <= 0 or len(tokens) == target:
            return tokens
        if len(tokens) < target:
            tokens.extend(gen.randint(vocab_size, target - len(tokens)))
        else:
            tokens = tokens[:target]
        remaining -= 1


def prefix_order(
    seed: int, num_prompts: int, num_prefixes: int, *, shuffle: bool = True
) -> list[tuple[int, int]]:
    """``(prefix_index, suffix_index)`` of each request in the order vLLM sends them.

    Needs only the seed and the counts, not the tokenizer. Raises like vLLM when
    ``num_prompts < num_prefixes``.
    """
    if num_prefixes <= 0 or num_prompts < num_prefixes:
        raise ValueError(
            f"num_prompts ({num_prompts}) must be >= num_prefixes ({num_prefixes}) > 0")
    ppp = num_prompts // num_prefixes
    order = [(p, j) for p in range(num_prefixes) for j in range(ppp)]
    if shuffle:
        random.Random(seed).shuffle(order)  # noqa: S311 - replays vLLM's own shuffle
    return order


def cold_flags(prefix_indices: Sequence[int]) -> list[bool]:
    """True for each request that is the first use of its prefix in the sequence."""
    seen: set[int] = set()
    flags: list[bool] = []
    for p in prefix_indices:
        flags.append(p not in seen)
        seen.add(p)
    return flags


def generate_prompts(
    seed: int,
    num_prompts: int,
    num_prefixes: int,
    *,
    prefix_len: int,
    suffix_len: int,
    vocab_size: int,
    shuffle: bool = True,
    roundtrip: Roundtrip | None = None,
) -> list[PromptSpec]:
    """The requests of one ``vllm bench serve`` prefix_repetition run, in send order."""
    order = prefix_order(seed, num_prompts, num_prefixes, shuffle=shuffle)
    ppp = num_prompts // num_prefixes
    gen = LegacyNumpyRandom(seed)
    built: dict[tuple[int, int], tuple[int, ...]] = {}
    for p in range(num_prefixes):
        prefix = _exact_length(gen, vocab_size, prefix_len, roundtrip)
        for j in range(ppp):
            suffix = _exact_length(gen, vocab_size, suffix_len, roundtrip)
            built[(p, j)] = tuple(prefix + suffix)
    return [PromptSpec(p, j, built[(p, j)]) for p, j in order]


def prefix_repetition_cold_flags(
    seed: int,
    num_prompts: int,
    num_prefixes: int,
    *,
    shuffle: bool = True,
    pre_requests: int = 0,
) -> list[bool]:
    """For each measured request of a prefix_repetition run (send order): is it cold?

    ``pre_requests`` > 0 (a ready check or warmups, which send the first prompt before
    the measured run) makes the first request warm.
    """
    order = [p for p, _ in prefix_order(seed, num_prompts, num_prefixes, shuffle=shuffle)]
    flags = cold_flags(order)
    if pre_requests > 0 and flags:
        flags[0] = False
    return flags


def align_to_server(texts: Sequence[str], lengths: Sequence[int],
                    encode: Callable[[str], list[int]],
                    decode: Callable[[list[int]], str]) -> list[str]:
    """The prompts ``vllm bench serve`` sends after aligning them to the server's
    tokenizer (the module's docstring): ``texts`` in send order with the lengths the
    dataset drew, ``encode`` the server's encoding without special tokens, ``decode`` its
    detokenization."""
    if not texts or len(encode(texts[0])) == lengths[0]:
        return list(texts)
    out = []
    for text, length in zip(texts, lengths, strict=True):
        ids = encode(text)
        out.append(decode(ids[:length]) if len(ids) > length else text)
    return out
