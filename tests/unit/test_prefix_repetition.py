"""vLLM's prefix_repetition dataset regenerated without numpy, checked against numpy."""

from __future__ import annotations

import pytest

from prefixbench.engines.prefix_repetition import (
    LegacyNumpyRandom,
    cold_flags,
    generate_prompts,
    prefix_order,
)

# Golden values recorded with numpy 2.4 (np.random.seed(s); np.random.randint(0, hi, n)).
GOLDEN = {
    (0, 2048): [684, 559, 1653, 1216, 835, 763, 1731, 1383],
    (12345, 201088): [77285, 130333, 133249, 85412, 109993, 135166, 86398, 159077],
}


@pytest.mark.parametrize(("key", "expected"), sorted(GOLDEN.items()))
def test_legacy_randint_matches_numpy_golden(key: tuple[int, int], expected: list[int]) -> None:
    seed, high = key
    assert LegacyNumpyRandom(seed).randint(high, len(expected)) == expected


def test_stream_continues_across_calls_like_numpy() -> None:
    gen = LegacyNumpyRandom(0)
    first = gen.randint(2048, 3072)
    assert first[-3:] == [26, 703, 1435]
    assert gen.randint(2048, 3) == [2027, 1773, 1961]
    # Rejection sampling (201088 is not a power of two), far into the stream.
    gen = LegacyNumpyRandom(7)
    gen.randint(201088, 10000)
    assert gen.randint(201088, 6) == [193147, 4121, 37725, 69649, 70919, 56822]


def test_matches_numpy() -> None:
    # numpy is a pinned controller test dependency (requirements/controller.in): a missing
    # numpy is an error here, not a skip.
    import numpy as np  # noqa: PLC0415

    for seed in (0, 1, 12345, 2**32 - 1):
        gen = LegacyNumpyRandom(seed)
        np.random.seed(seed)
        for high, size in ((2048, 500), (201088, 700), (7, 50), (1, 3), (2**32, 9),
                           (2**31 + 1, 40), (100, 1000)):
            assert gen.randint(high, size) == np.random.randint(0, high, size=size).tolist()


def test_generate_prompts_matches_vllm_procedure_with_numpy() -> None:
    # vLLM's PrefixRepetitionRandomDataset (no round trip): random.seed + np.random.seed,
    # one prefix then its suffixes from the global numpy stream, then random.shuffle.
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    seed, num_prompts, num_prefixes, prefix_len, suffix_len, vocab = 3, 12, 3, 40, 9, 201088
    saved = random.getstate()
    random.seed(seed)
    np.random.seed(seed)
    requests = []
    for _ in range(num_prefixes):
        prefix = np.random.randint(0, vocab, size=prefix_len).tolist()
        for _ in range(num_prompts // num_prefixes):
            suffix = np.random.randint(0, vocab, size=suffix_len).tolist()
            requests.append(tuple(prefix + suffix))
    random.shuffle(requests)
    random.setstate(saved)
    prompts = generate_prompts(seed, num_prompts, num_prefixes, prefix_len=prefix_len,
                               suffix_len=suffix_len, vocab_size=vocab)
    assert [p.tokens for p in prompts] == requests


def test_empty_range_draws_nothing() -> None:
    a, b = LegacyNumpyRandom(3), LegacyNumpyRandom(3)
    assert a.randint(1, 5) == [0] * 5
    assert a.randint(100, 4) == b.randint(100, 4)


def test_seed_must_fit_numpy_legacy_range() -> None:
    with pytest.raises(ValueError, match="2\\*\\*32"):
        LegacyNumpyRandom(2**32)


def test_prompt_structure_and_order() -> None:
    prompts = generate_prompts(0, 50, 5, prefix_len=64, suffix_len=32, vocab_size=2048)
    assert len(prompts) == 50
    assert all(len(p.tokens) == 96 for p in prompts)
    by_prefix: dict[int, set[tuple[int, ...]]] = {}
    for p in prompts:
        by_prefix.setdefault(p.prefix_index, set()).add(p.tokens[:64])
    assert sorted(by_prefix) == [0, 1, 2, 3, 4]
    assert all(len(v) == 1 for v in by_prefix.values())
    assert [(p.prefix_index, p.suffix_index) for p in prompts] == prefix_order(0, 50, 5)
    unshuffled = generate_prompts(0, 50, 5, prefix_len=64, suffix_len=32, vocab_size=2048,
                                  shuffle=False)
    assert [p.prefix_index for p in unshuffled] == [p for p in range(5) for _ in range(10)]


def test_same_seed_shares_the_stream_start_across_workloads() -> None:
    # The tutorial's contamination: no-overlap prompt 0 == high-overlap (prefix 0, suffix 0)
    # and no-overlap prompt 13 == high-overlap (prefix 4, suffix 0).
    kw = {"prefix_len": 3072, "suffix_len": 1024, "vocab_size": 2048, "shuffle": False}
    high = generate_prompts(0, 50, 5, **kw)  # type: ignore[arg-type]
    low = generate_prompts(0, 50, 50, **kw)  # type: ignore[arg-type]
    high_set = {p.tokens for p in high}
    shared = [i for i, p in enumerate(low) if p.tokens in high_set]
    assert shared == [0, 13]
    assert low[13].tokens == high[40].tokens  # prefix 4, suffix 0


def test_roundtrip_hook_trims_and_tops_up_like_vllm() -> None:
    def drop_zeros(ids: list[int]) -> list[int]:  # a lossy "tokenizer"
        return [i for i in ids if i % 7]

    prompts = generate_prompts(5, 4, 2, prefix_len=50, suffix_len=20, vocab_size=100,
                               roundtrip=drop_zeros)
    assert all(len(p.tokens) == 70 for p in prompts)
    assert all(t % 7 for p in prompts for t in p.tokens)


def test_cold_flags_mark_first_use_of_each_prefix() -> None:
    assert cold_flags([4, 0, 4, 2, 0]) == [True, True, False, True, False]
    order = [p for p, _ in prefix_order(0, 50, 5)]
    assert sum(cold_flags(order)) == 5


def test_prompts_are_aligned_to_the_server_only_when_the_first_one_disagrees() -> None:
    from prefixbench.engines.prefix_repetition import align_to_server  # noqa: PLC0415

    # A test double of a server tokenizer: one token per character, except that "ab"
    # is one token (so "a" + "b" drawn as two tokens re-encode as one).
    def encode(text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            if text.startswith("ab", i):
                ids.append(1000)
                i += 2
            else:
                ids.append(ord(text[i]))
                i += 1
        return ids

    def decode(ids: list[int]) -> str:
        return "".join("ab" if i == 1000 else chr(i) for i in ids)

    # The first prompt encodes to its drawn length: nothing changes, even where a later
    # prompt would encode longer.
    assert align_to_server(["xyz", "xxxx"], [3, 3], encode, decode) == ["xyz", "xxxx"]
    # The first disagrees: every prompt longer than drawn is cut to its length in server
    # tokens; shorter ones are sent as they are.
    assert align_to_server(["xab", "xxxx", "ab"], [3, 3, 2], encode, decode) == \
        ["xab", "xxx", "ab"]
    assert align_to_server([], [], encode, decode) == []
