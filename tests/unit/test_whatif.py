"""The what-if analyzer: formula equality, tokenizer counts, custom replays, never raising."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import tokenizer as tk
from prefixbench.engines.cachesim import PrefixCacheSim
from prefixbench.engines.custom import prepare, texts_in_order
from prefixbench.engines.prefix_repetition import generate_prompts
from prefixbench.engines.workloads import Workload, tutorial_workloads
from prefixbench.measure.ratios import block_aligned_expected
from prefixbench.predict import whatif
from prefixbench_sim import tinytokenizer


def pr_workload(**values: object) -> Workload:
    return Workload.from_dict({"name": "w", **values})


@settings(max_examples=60, deadline=None)
@given(prefix=st.integers(0, 300), suffix=st.integers(0, 200), prefixes=st.integers(1, 6),
       extra=st.integers(0, 12), block=st.sampled_from([1, 2, 16, 32, 100, 128]),
       pre=st.integers(0, 2), ready=st.booleans(), seed=st.integers(0, 2**32 - 1),
       shuffle=st.booleans(), bos=st.integers(0, 3))
def test_prefix_repetition_prediction_equals_the_block_aligned_formula(  # noqa: PLR0917 - hypothesis draws
        prefix: int, suffix: int, prefixes: int, extra: int, block: int, pre: int,
        ready: bool, seed: int, shuffle: bool, bos: int) -> None:
    if prefix + suffix < 1:
        suffix = 1
    w = pr_workload(prefix_repetition_prefix_len=prefix, prefix_repetition_suffix_len=suffix,
                    prefix_repetition_num_prefixes=prefixes, prefix_repetition_output_len=4,
                    num_prompts=prefixes + extra, seed=seed, num_warmups=pre,
                    ready_check_timeout_sec=5 if ready else None,
                    disable_shuffle=not shuffle)
    pred = whatif.predict_prefix_repetition(w, block_size=block, bos_tokens=bos)
    want = block_aligned_expected(prefixes + extra, prefixes, prefix, suffix, block,
                                  pre_requests=w.pre_requests, bos_tokens=bos)
    assert (pred.hit_tokens, pred.query_tokens, pred.requests) == (
        want.hit_tokens, want.query_tokens, want.requests)
    assert pred.ratio == want.ratio == pred.formula_ratio


def test_prefix_repetition_tokens_are_vllms_draws_with_a_2_32_vocabulary() -> None:
    w = tutorial_workloads()[0].with_seed(1001)
    w = Workload.from_dict({**w.to_dict(), "prefix_repetition_prefix_len": 40,
                            "prefix_repetition_suffix_len": 8})
    ours = whatif.prefix_repetition_tokens(w)
    theirs = generate_prompts(1001, w.num_prompts, 5, prefix_len=40, suffix_len=8,
                              vocab_size=whatif.VOCAB)
    assert [list(p) for p in ours] == [list(p.tokens) for p in theirs]


def test_bounded_capacity_evicts_and_predicts_less() -> None:
    w = tutorial_workloads()[0].with_seed(3)
    free = whatif.predict(w, block_size=128, capacity_blocks=None)
    tight = whatif.predict(w, block_size=128, capacity_blocks=200)
    assert free.ratio == pytest.approx(0.675) and free.evicted_blocks == 0
    assert tight.ratio is not None and tight.ratio < free.ratio and tight.evicted_blocks > 0
    tiny = whatif.predict(w, block_size=128, capacity_blocks=3)
    assert tiny.ratio is None and tiny.note and "does not fit" in tiny.note


def test_large_prefix_repetition_falls_back_to_the_formula(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(whatif, "MAX_REPLAY_TOKENS", 1000)
    w = tutorial_workloads()[0]
    pred = whatif.predict(w, block_size=128)
    assert pred.method == "block-aligned formula" and pred.ratio == pytest.approx(0.675)
    assert whatif.predict(w, block_size=128, capacity_blocks=100).ratio is None


def test_tokenizer_counts_match_the_tiny_models_words(tmp_path: Path) -> None:
    tok = tk.load(write_tokenizer(tmp_path / "tok"))
    words = " ".join(tinytokenizer.word(i) for i in range(4, 504))
    assert tok.encode(words) == list(range(4, 504))
    assert tok.special_tokens_added() == (0, 0)
    assert tok.vocab_size == 2048
    assert tok.special_tokens()["bos_token"] == "<s>"  # noqa: S105 - a token, not a secret
    assert tk.load(tmp_path / "tok" / "tokenizer.json").chat_template is not None


def test_tokenizer_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(tk.TokenizerError, match="no such file"):
        tk.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(tk.TokenizerError, match="not a tokenizers"):
        tk.load(tmp_path)
    tok = tk.load(write_tokenizer(tmp_path / "ok"))
    tok.chat_template = None
    with pytest.raises(tk.TokenizerError, match="no chat template"):
        tok.render_chat([{"role": "user", "content": "x"}])


def test_chat_template_rendering_like_transformers(tmp_path: Path) -> None:
    tok = tk.load(write_tokenizer(tmp_path / "tok"))
    tok.chat_template = (
        "{{ bos_token }}{% for m in messages %}\n"
        "  {% if m['role'] == 'user' %}U:{{ m['content'] | tojson }}{% endif %}\n"
        "{% endfor %}{% if add_generation_prompt %}A:{% endif %}")
    text = tok.render_chat([{"role": "user", "content": "<é>"}])
    assert text == '<s>U:"<é>"A:'  # trim/lstrip blocks; tojson does not escape
    tok.chat_template = "{{ raise_exception('nope') }}"
    tok._template = None
    with pytest.raises(tk.TokenizerError, match="refused the conversation: nope"):
        tok.render_chat([])


def test_custom_prediction_replays_the_server_order(tmp_path: Path) -> None:
    tokdir = write_tokenizer(tmp_path / "tok")
    shared = " ".join(tinytokenizer.word(i) for i in range(100, 164))  # 64 shared tokens
    lines = [{"prompt": f"{shared} {tinytokenizer.word(500 + i)} {tinytokenizer.word(900 + i)}"}
             for i in range(10)]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    w = Workload.from_dict({"name": "mine", "dataset_name": "custom",
                            "dataset_path": str(path), "seed": 4, "max_concurrency": 1,
                            "num_warmups": 1})
    pred = whatif.predict(w, block_size=16, tokenizer_dir=tokdir)
    # 11 requests of 66 tokens; the warmup is cold; the measured copy of it hits 64 (its
    # last token is never a hit), every other prompt hits the shared 64.
    assert (pred.requests, pred.query_tokens, pred.hit_tokens) == (11, 11 * 66, 10 * 64)
    assert pred.note is None and pred.formula_ratio is None
    sim = PrefixCacheSim(16)
    tok = tk.load(tokdir)
    texts, _ = texts_in_order(prepare(w), 4, pre_requests=1)
    assert sim.replay([tuple(tok.encode(t)) for t in texts]).total_hit_tokens == 640
    again = whatif.predict(w, block_size=16, tokenizer_dir=tokdir,
                           prompts_file=path)
    assert again.hit_tokens == pred.hit_tokens


def test_predict_never_raises_for_missing_inputs(tmp_path: Path) -> None:
    w = Workload.from_dict({"name": "mine", "dataset_name": "custom",
                            "dataset_path": str(tmp_path / "absent.jsonl")})
    for kwargs, note in (
            ({"tokenizer_dir": None}, "no tokenizer directory"),
            ({"tokenizer_dir": tmp_path / "nothing"}, "no tokenizer"),
            ({"tokenizer_dir": write_tokenizer(tmp_path / "tok")}, "prompts unavailable"),
            ({"tokenizer_dir": None, "block_size": 0}, "must be positive")):
        args: dict[str, object] = {"block_size": 16, **kwargs}
        pred = whatif.predict(w, **args)  # type: ignore[arg-type]
        assert pred.ratio is None and pred.note and note in pred.note
    # prefix_repetition ignores an unusable tokenizer
    assert whatif.predict(tutorial_workloads()[0], block_size=128,
                          tokenizer_dir=tmp_path / "nothing").ratio == pytest.approx(0.675)
