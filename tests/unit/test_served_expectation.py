"""prefix_repetition as the server counts it: vLLM's prompt texts re-encoded by the server.

With the tiny model's byte-level BPE a warm request can lose its last prefix block where
the prefix text meets the suffix text; with the word-level tokenizer (exact round trip)
the served counters are the block-aligned formula's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer as tk
from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.prefix_repetition import generate_prompts
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.measure.ratios import block_aligned_expected
from prefixbench.predict.served import served_expectation
from prefixbench_sim import tinyconfig, tinytokenizer

#: sha256 of "\0".join(prompt texts) of vLLM 0.32's own PrefixRepetitionRandomDataset
#: (random_seed 0, 50 prompts, 5 prefixes, 3072 + 1024 tokens) sampled with
#: ``vllm.tokenizers.get_tokenizer`` on the tiny model's BPE (tokenizers 0.23.3).
VLLM_TEXTS_SEED0 = "2125259fdea744806cc24cb5379f5b2b5a8aad14d91f2bfd82ac2d06627e8546"


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> tk.Tokenizer:
    return tk.load(write_tokenizer(tmp_path_factory.mktemp("bpe"), kind="bpe"))


@pytest.fixture(scope="module")
def word(tmp_path_factory: pytest.TempPathFactory) -> tk.Tokenizer:
    return tk.load(write_tokenizer(tmp_path_factory.mktemp("word")))


def pr_workload(**values: object) -> Workload:
    return Workload.from_dict({"name": "w", **values})


def test_bpe_prompt_texts_are_vllms(bpe: tk.Tokenizer) -> None:
    # vocab_size is what transformers reports (no added tokens): 2048, the draws' bound.
    assert bpe.base_vocab_size == 2048
    assert bpe.special_tokens_added() == (0, 0)  # no BOS: the server adds nothing
    specs = generate_prompts(0, 50, 5, prefix_len=3072, suffix_len=1024,
                             vocab_size=bpe.base_vocab_size, roundtrip=bpe.roundtrip)
    assert all(len(p.tokens) == 4096 for p in specs)  # vLLM's length adjustment converged
    texts = "\0".join(bpe.decode(p.tokens) for p in specs)
    assert hashlib.sha256(texts.encode()).hexdigest() == VLLM_TEXTS_SEED0


def test_bpe_resplits_at_the_junction(bpe: tk.Tokenizer) -> None:
    specs = generate_prompts(0, 50, 5, prefix_len=3072, suffix_len=1024,
                             vocab_size=bpe.base_vocab_size, roundtrip=bpe.roundtrip)
    first_diffs = []
    for p in specs:
        served = bpe.encode(bpe.decode(p.tokens))
        if served != list(p.tokens):
            first_diffs.append(next(i for i, (a, b) in enumerate(
                zip(served, p.tokens, strict=False)) if a != b))
    assert first_diffs, "no prompt re-split: the BPE shows no junction effect"
    # Every re-split starts at the last prefix token (3071) or just before it: the merge
    # happens where the prefix text meets the suffix text, never elsewhere.
    assert all(3060 <= i <= 3071 for i in first_diffs), first_diffs


def test_served_expectation_is_below_the_formula_by_the_lost_blocks(
        bpe: tk.Tokenizer) -> None:
    w = tutorial_workloads()[0].with_seed(0)  # high_overlap, 50 prompts, 5 prefixes
    got = served_expectation(w, bpe, 128)
    want = block_aligned_expected(50, 5, 3072, 1024, 128)
    assert (got.formula_hit_tokens, got.formula_query_tokens) == (
        want.hit_tokens, want.query_tokens)
    assert got.junction_resplits == 6 and got.lost_requests == 5 and got.lost_blocks == 5
    assert got.gained_blocks == 0
    assert got.hit_tokens == want.hit_tokens - got.lost_blocks * 128
    assert got.unbounded_hit_tokens == got.hit_tokens
    assert got.ratio < got.formula_ratio
    # The same prompts replayed by hand through the cache model.
    specs = generate_prompts(0, 50, 5, prefix_len=3072, suffix_len=1024,
                             vocab_size=2048, roundtrip=bpe.roundtrip)
    served = [tuple(ids) for ids in bpe.encode_batch([bpe.decode(p.tokens) for p in specs])]
    result = PrefixCacheSim(128).replay(served)
    assert (result.total_hit_tokens, result.query_tokens) == (got.hit_tokens,
                                                                got.query_tokens)
    # A ready check: one more copy of the first prompt, still lost blocks x block size.
    pre = served_expectation(w, bpe, 128, pre_requests=1)
    assert pre.requests == 51 and pre.formula_hit_tokens == block_aligned_expected(
        50, 5, 3072, 1024, 128, pre_requests=1).hit_tokens
    assert pre.formula_hit_tokens - pre.hit_tokens == (
        pre.lost_blocks - pre.gained_blocks) * 128
    assert pre.lost_blocks > 0


def test_bounded_capacity_keeps_the_junction_accounting_unbounded(
        bpe: tk.Tokenizer) -> None:
    w = tutorial_workloads()[0].with_seed(0)
    free = served_expectation(w, bpe, 128)
    tight = served_expectation(w, bpe, 128, capacity_blocks=200)
    assert tight.evicted_blocks > 0 and tight.hit_tokens < free.hit_tokens
    assert (tight.unbounded_hit_tokens, tight.lost_blocks) == (free.hit_tokens,
                                                               free.lost_blocks)
    with pytest.raises(ValueError, match="does not fit"):
        served_expectation(w, bpe, 128, capacity_blocks=3)


@settings(max_examples=25, deadline=None)
@given(prefix=st.integers(1, 200), suffix=st.integers(1, 100), prefixes=st.integers(1, 4),
       extra=st.integers(0, 8), block=st.sampled_from([16, 32, 100, 128]),
       pre=st.integers(0, 2), seed=st.integers(0, 2**32 - 1), shuffle=st.booleans())
def test_word_level_served_expectation_equals_the_formula(  # noqa: PLR0917 - hypothesis draws
        word: tk.Tokenizer, prefix: int, suffix: int, prefixes: int, extra: int,
        block: int, pre: int, seed: int, shuffle: bool) -> None:
    # Blocks of >= 16 tokens: with 2048 ids, two random blocks of 1 or 2 tokens can be
    # equal by chance (a hit the formula does not count), whatever the tokenizer.
    w = pr_workload(prefix_repetition_prefix_len=prefix, prefix_repetition_suffix_len=suffix,
                    prefix_repetition_num_prefixes=prefixes, prefix_repetition_output_len=4,
                    num_prompts=prefixes + extra, seed=seed, disable_shuffle=not shuffle)
    got = served_expectation(w, word, block, pre_requests=pre)
    want = block_aligned_expected(prefixes + extra, prefixes, prefix, suffix, block,
                                  pre_requests=pre)
    assert (got.hit_tokens, got.query_tokens, got.requests) == (
        want.hit_tokens, want.query_tokens, want.requests)
    assert got.ratio == want.ratio == got.formula_ratio
    assert (got.junction_resplits, got.lost_requests, got.lost_blocks,
            got.gained_blocks) == (0, 0, 0, 0)


def test_workload_defaults_and_refusals(word: tk.Tokenizer, tmp_path: Path) -> None:
    w = pr_workload(prefix_repetition_prefix_len=64, prefix_repetition_suffix_len=16,
                    prefix_repetition_num_prefixes=2, prefix_repetition_output_len=4,
                    num_prompts=6, num_warmups=1,
                    ready_check_timeout_sec=5, max_concurrency=4)
    got = served_expectation(w, write_tokenizer(tmp_path / "tok"), 16)
    assert got.requests == 6 + w.pre_requests == 8  # the workload's ready check + warmup
    assert got.note and "one request at a time" in got.note
    custom = Workload.from_dict({"name": "c", "dataset_name": "custom",
                                 "dataset_path": str(tmp_path / "p.jsonl")})
    with pytest.raises(ValueError, match="prefix_repetition only"):
        served_expectation(custom, word, 16)
    with pytest.raises(ValueError, match="must be positive"):
        served_expectation(w, word, 0)
    with pytest.raises(tk.TokenizerError, match="no such file"):
        served_expectation(w, tmp_path / "nothing", 16)


def _bpe_digest_in_a_fresh_process(hash_seed: str) -> str:
    code = ("import hashlib, json; "
            "from prefixbench_sim import tinyconfig as c, tinytokenizer as t; "
            "print(hashlib.sha256(json.dumps(t.bpe_tokenizer_json(c.TinyLlamaSpec()))"
            ".encode()).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "RAYON_NUM_THREADS": hash_seed}
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_bpe_build_is_deterministic() -> None:
    spec = tinyconfig.TinyLlamaSpec()
    data = tinytokenizer.bpe_tokenizer_json(spec)
    digest = hashlib.sha256(json.dumps(data).encode()).hexdigest()
    # Other hash seeds and thread counts (the trainer counts pairs in parallel).
    assert _bpe_digest_in_a_fresh_process("1") == digest
    assert _bpe_digest_in_a_fresh_process("2") == digest
    vocab = data["model"]["vocab"]
    assert len(vocab) == spec.vocab_size == sorted(vocab.values())[-1] + 1
    assert [vocab[t] for t in tinyconfig.SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert len(data["model"]["merges"]) == spec.vocab_size - tinytokenizer.BPE_MIN_VOCAB
    corpus = tinytokenizer.bpe_corpus
    assert corpus(0, 50) == corpus(0, 50) != corpus(1, 50)
    with pytest.raises(ValueError, match="more than 260 ids"):
        tinytokenizer.bpe_tokenizer_json(tinyconfig.TinyLlamaSpec(vocab_size=260))
