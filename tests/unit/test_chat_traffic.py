"""Multi-turn chat traffic (prefixbench.engines.chat_traffic): seeded, growing histories,
think time as interleaving, the distributions; its structural estimate
(prefixbench.predict.chat_estimate) against the what-if replay; the chat-traffic command."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import chat_traffic as ct
from prefixbench.engines import tokenizer as tk
from prefixbench.engines.workloads import Workload
from prefixbench.frontend import cli
from prefixbench.frontend.cli_chat import tokenizer_words
from prefixbench.predict import chat_estimate as ce
from prefixbench.predict import whatif
from prefixbench_sim import tinytokenizer

#: The tiny model's words, without the ids its chat template uses as markers (t10-t13).
VOCAB = ct.Vocabulary(tinytokenizer.word, 14, 2048)


def spec(**values: Any) -> ct.ChatSpec:
    given = {"users": 5, "turns": "uniform:2:6", "system_words": 40,
             "user_words": "uniform:3:12", "reply_words": "uniform:2:9",
             "think": "uniform:0:4", "seed": 1, **values}
    return ct.ChatSpec(
        users=given["users"], system_words=given["system_words"], seed=given["seed"],
        turns=ct.parse_dist(given["turns"], minimum=1, option="--turns"),
        user_words=ct.parse_dist(given["user_words"], minimum=1, option="--user-words"),
        reply_words=ct.parse_dist(given["reply_words"], minimum=1, option="--reply-words"),
        think=ct.parse_dist(given["think"], minimum=0, option="--think"))


def test_a_seed_gives_the_same_file_and_another_seed_another() -> None:
    first = ct.generate(spec(seed=3), VOCAB).jsonl()
    assert ct.generate(spec(seed=3), VOCAB).jsonl() == first
    assert ct.generate(spec(seed=4), VOCAB).jsonl() != first
    # A list of words draws as the callable over the same range does.
    words = [tinytokenizer.word(i) for i in range(14, 2048)]
    assert ct.generate(spec(seed=3), words).jsonl() == first


def test_every_request_extends_its_users_previous_request() -> None:
    traffic = ct.generate(spec(users=6, seed=5), VOCAB)
    lines = [json.loads(line) for line in traffic.jsonl().decode().splitlines()]
    assert len(lines) == len(traffic.order) == sum(len(c.turns) for c in traffic.conversations)
    system = traffic.conversations[0].system
    assert len(system.split()) == 40
    previous: dict[int, list[dict[str, str]]] = {}
    for req, line in zip(traffic.order, lines, strict=True):
        conv, messages = traffic.conversations[req.user], line["messages"]
        assert messages[0] == {"role": "system", "content": system}  # shared by every user
        assert [m["role"] for m in messages] == (
            ["system"] + ["user", "assistant"] * req.turn + ["user"])
        assert messages[-1]["content"] == conv.turns[req.turn].user
        if req.turn == 0:
            assert req.user not in previous
        else:  # the previous request, its synthetic reply, the new message
            before = previous[req.user]
            assert len(before) == len(messages) - 2 and messages[:len(before)] == before
            assert messages[-2] == {"role": "assistant",
                                    "content": conv.turns[req.turn - 1].reply}
        assert line["output_tokens"] == len(conv.turns[req.turn].reply.split())
        previous[req.user] = messages
    assert {u: len(m) // 2 for u, m in previous.items()} == {
        u: len(c.turns) for u, c in enumerate(traffic.conversations)}


def order(traffic: ct.ChatTraffic) -> list[int]:
    return [r.user for r in traffic.order]


def test_think_time_becomes_that_many_other_requests_in_between() -> None:
    # Think 2 with 3 users: each user's next turn comes after exactly two other requests.
    even = ct.generate(spec(users=3, turns="4", think="2"), VOCAB)
    assert order(even) == [0, 1, 2] * 4
    assert {r.gap for r in even.order if r.turn} == {2}
    # Think 0: a user's turns follow each other; the next user starts when it is done.
    solo = ct.generate(spec(users=4, think="0"), VOCAB)
    assert order(solo) == sorted(order(solo)) and {r.gap for r in solo.order} == {None, 0}
    # One user has nobody to interleave with: every think time is cut to 0.
    alone = ct.generate(spec(users=1, turns="4", think="3"), VOCAB)
    assert [r.gap for r in alone.order] == [None, 0, 0, 0]
    assert alone.summary().shortened == 3


def test_drawn_think_times_are_respected_unless_no_user_is_left() -> None:
    traffic = ct.generate(spec(users=12, turns="uniform:1:8", think="geometric:3", seed=9),
                          VOCAB)
    users = order(traffic)
    everyone = users.index(len(traffic.conversations) - 1)  # the last user's first request
    last: dict[int, int] = {}
    shortened = lengthened = 0
    for position, req in enumerate(traffic.order):
        if req.turn:
            assert req.gap == position - last[req.user] - 1  # other users' requests only
            drawn = traffic.conversations[req.user].turns[req.turn - 1].think
            if req.gap < drawn:  # too early only once every user has started
                assert position > everyone
                shortened += 1
            lengthened += req.gap > drawn
        last[req.user] = position
    summary = traffic.summary()
    assert (summary.shortened, summary.lengthened) == (shortened, lengthened)
    assert summary.requests == len(users) and summary.users == 12


def test_distributions_are_parsed_and_drawn_in_range() -> None:
    rng = random.Random(0)  # noqa: S311 - seeded draws
    assert ct.parse_dist("5", minimum=1, option="-x") == ct.parse_dist("fixed:5", minimum=1,
                                                                      option="-x")
    uniform = ct.parse_dist("uniform:2:6", minimum=1, option="-x")
    assert {uniform.draw(rng) for _ in range(500)} == {2, 3, 4, 5, 6}
    for text, minimum, mean in (("geometric:3", 1, 3.0), ("geometric:0.5", 0, 0.5),
                                ("poisson:2.5", 0, 2.5), ("poisson:40", 1, 40.0)):
        dist = ct.parse_dist(text, minimum=minimum, option="-x")
        draws = [dist.draw(rng) for _ in range(20000)]
        assert min(draws) >= minimum and dist.expected == mean
        assert sum(draws) / len(draws) == pytest.approx(mean, rel=0.03), text
    assert {ct.parse_dist("geometric:1", minimum=1, option="-x").draw(rng)
            for _ in range(50)} == {1}


@pytest.mark.parametrize(("text", "minimum", "message"), [
    ("", 1, "no distribution"),
    ("zipf:2", 1, "unknown distribution 'zipf'"),
    ("many", 1, "unknown distribution 'many'"),
    ("uniform:6:2", 1, "uniform needs A <= B"),
    ("uniform:1", 1, "uniform takes 2 values"),
    ("uniform:1.5:3", 1, "'1.5' is not an integer"),
    ("geometric:0.5", 1, "the mean must be >= 1"),
    ("fixed:-1", 0, "values must be >= 0"),
    ("0", 1, "values must be >= 1"),
    ("poisson:abc", 0, "'abc' is not a number"),
    ("geometric:inf", 0, "out of range"),
    ("poisson:nan", 0, "out of range"),
    ("200000", 1, "out of range"),
])
def test_bad_distributions_are_refused(text: str, minimum: int, message: str) -> None:
    with pytest.raises(ct.ChatTrafficError, match=re.escape(message)) as caught:
        ct.parse_dist(text, minimum=minimum, option="--turns")
    assert str(caught.value).startswith(f"--turns {text!r}: ")


def test_bad_specs_are_refused() -> None:
    for values, message in (({"users": 0}, "users must be 1 to"),
                            ({"system_words": -1}, "system words must be 0 to")):
        with pytest.raises(ct.ChatTrafficError, match=message):
            spec(**values)
    with pytest.raises(ct.ChatTrafficError, match="vocabulary is empty"):
        ct.generate(spec(), [])


def replayed(path: Path, tok: Path, block: int, capacity: int | None = None
             ) -> whatif.Prediction:
    workload = Workload.from_dict({
        "name": "chat", "dataset_name": "custom", "dataset_path": str(path),
        "custom_output_len": -1, "max_concurrency": 1, "disable_shuffle": True})
    return whatif.predict(workload, block_size=block, capacity_blocks=capacity,
                          tokenizer_dir=tok)


def test_the_structural_estimate_is_the_replay_when_its_assumptions_hold(
        tmp_path: Path) -> None:
    tok_dir = write_tokenizer(tmp_path / "tok")
    tok = tk.load(tok_dir)
    traffic = ct.generate(spec(users=7, turns="uniform:2:5", system_words=100,
                               user_words="uniform:20:80", reply_words="uniform:10:60",
                               think="uniform:0:3", seed=11), VOCAB)
    path = tmp_path / "chat.jsonl"
    path.write_bytes(traffic.jsonl())
    lengths, shared = ce.token_counts(traffic, tok)
    assert shared == 1 + 100 + 2  # t12, the system prompt, t13, then every user's t10
    for block in (1, 16, 32):
        # Unbounded cache, a prefix-stable template (the tiny one), one at a time: the
        # estimate counted in tokens is the replay's hit count exactly (tolerance 0).
        pred = replayed(path, tok_dir, block)
        est = ce.structural_estimate(traffic, block, prompt_tokens=lengths,
                                     shared_tokens=shared)
        assert (est.hit_tokens, est.query_tokens) == (pred.hit_tokens, pred.query_tokens)
        assert est.system_hit_tokens + est.history_hit_tokens == est.hit_tokens
        # Counted in words (the template's tokens left out): within 2 percentage points.
        words = ce.structural_estimate(traffic, block)
        assert pred.ratio is not None and words.ratio is not None
        assert abs(words.ratio - pred.ratio) <= 0.02, block
    # A KV capacity that evicts breaks the first assumption: the replay counts fewer hits.
    # (Against the estimate at the same block size, 16: the loop's last one is 32.)
    tight = replayed(path, tok_dir, 16, capacity=50)
    est16 = ce.structural_estimate(traffic, 16, prompt_tokens=lengths, shared_tokens=shared)
    assert tight.evicted_blocks > 0 and tight.hit_tokens < est16.hit_tokens


def test_the_tokenizers_words_leave_out_special_tokens_and_template_markers(
        tmp_path: Path) -> None:
    words = tokenizer_words(tk.load(write_tokenizer(tmp_path / "tok")))
    assert words[:2] == ["t4", "t5"] and "t2047" in words and len(words) == 2048 - 8
    assert not {"t10", "t11", "t12", "t13", "<s>", "</s>", "<unk>"} & set(words)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["chat-traffic", *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def field(text: str, label: str) -> str:
    found = re.search(rf"^{label}: +(.*)$", text, re.MULTILINE)
    assert found, (label, text)
    return found.group(1)


def test_the_command_writes_the_file_and_prints_both_ratios(tmp_path: Path) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    path = tmp_path / "chat.jsonl"
    code, out, err = run(str(path), "--users", "8", "--turns", "uniform:2:5",
                         "--tokenizer", str(tok), "--block-size", "16")
    assert (code, err) == (0, "")
    lines = path.read_text().splitlines()
    assert f"8 users, 2-5 turns each, {len(lines)} requests" in field(out, "traffic")
    assert all(json.loads(line)["messages"][0]["role"] == "system" for line in lines)
    predicted = field(out, "predicted ratio").split()[0]
    structural = field(out, "structural").split()[0]
    assert predicted == structural and float(predicted.rstrip("%")) > 50
    assert field(out, "difference") == "+0.00 pp (replay - structural)"
    assert "why:" not in out
    assert "disable_shuffle: true" in field(out, "workload")
    assert field(out, "vocabulary") == f"2,040 words of the tokenizer {tok}"
    # The same arguments write the same bytes.
    again = tmp_path / "again.jsonl"
    assert run(str(again), "--users", "8", "--turns", "uniform:2:5", "--tokenizer",
               str(tok), "--block-size", "16")[0] == 0
    assert again.read_bytes() == path.read_bytes()
    # A capacity that evicts: the two differ, and the command says why.
    code, out, _ = run(str(path), "--users", "8", "--turns", "uniform:2:5", "--tokenizer",
                       str(tok), "--block-size", "16", "--capacity-blocks", "80", "--force")
    assert code == 0 and "blocks evicted" in field(out, "predicted ratio")
    assert field(out, "why").startswith("the replay evicts")
    # It is the replay of the file in file order (with eviction, order matters).
    in_order = replayed(path, tok, 16, capacity=80).ratio
    assert in_order is not None
    assert field(out, "predicted ratio").startswith(f"{in_order:.2%} ")
    # No tokenizer: built-in words, the estimate in words, no replay.
    code, out, _ = run(str(path), "--users", "3", "--force")
    assert code == 0 and field(out, "vocabulary").startswith("the built-in list")
    assert "words counted as tokens" in field(out, "structural")
    assert field(out, "predicted ratio").startswith("not computed")


def test_the_command_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    tok = write_tokenizer(tmp_path / "tok")
    out = str(tmp_path / "c.jsonl")
    for argv, message in (
            ([out, "--turns", "uniform:6:2"], "--turns 'uniform:6:2': uniform needs A <= B"),
            ([out, "--think", "zipf:1"], "--think 'zipf:1': unknown distribution 'zipf'"),
            ([out, "--user-words", "0"], "--user-words '0': values must be >= 1"),
            ([out, "--users", "0"], "users must be 1 to 100,000, got 0"),
            ([out, "--system-words", "-5"], "system words must be 0 to"),
            ([out, "--block-size", "0"], "--block-size and --capacity-blocks must be >= 1"),
            ([out, "--capacity-blocks", "10"], "needs --tokenizer DIR"),
            ([out, "--tokenizer", str(tmp_path / "none")], "no such file or directory"),
            ([str(tmp_path), "--tokenizer", str(tok)], "is a directory"),
            ([str(tmp_path / "no" / "c.jsonl")], "the directory"),
            ([out, "--tokenizer", str(tok), "--block-size", "16", "--capacity-blocks", "2"],
             "does not fit")):
        code, _, err = run(*argv)
        assert code == 2, argv
        assert err.startswith("prefixbench chat-traffic: error: ") and message in err, err
        assert err.count("\n") == 1


def test_a_template_that_rewrites_the_history_is_told_apart(tmp_path: Path) -> None:
    # A header that depends on the number of messages (as a date or a turn counter would):
    # no turn's prompt is a prefix of the next one's, so the history is never hit.
    tok = write_tokenizer(tmp_path / "tok")
    config = json.loads((tok / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ 't' ~ (4 + messages | length) }} " + config["chat_template"]
    (tok / "tokenizer_config.json").write_text(json.dumps(config))
    code, out, _ = run(str(tmp_path / "c.jsonl"), "--users", "4", "--turns", "3",
                       "--tokenizer", str(tok), "--block-size", "16")
    assert code == 0
    predicted = float(field(out, "predicted ratio").split("%")[0])
    assert predicted < float(field(out, "structural").split("%")[0]) - 20
    assert field(out, "why").startswith("no eviction: the rendered turns are not prefix")


def test_an_existing_file_is_not_overwritten_without_force(tmp_path: Path) -> None:
    mine = tmp_path / "prompts.jsonl"
    mine.write_text('{"prompt": "my own prompt"}\n')
    code, _, err = run(str(mine), "--users", "2")
    assert code == 2 and "exists: --force overwrites it" in err and err.count("\n") == 1
    assert mine.read_text() == '{"prompt": "my own prompt"}\n'
    assert run(str(mine), "--users", "2", "--force")[0] == 0
    assert mine.read_text() != '{"prompt": "my own prompt"}\n'
    missing = tmp_path / "not-made" / "c.jsonl"
    code, _, err = run(str(missing))
    assert code == 2 and "does not exist" in err and not missing.parent.exists()


def test_a_seed_gives_the_same_structure_with_and_without_a_tokenizer(tmp_path: Path) -> None:
    """The cheap run (built-in words) previews the real one (the tokenizer's): the same
    requests, users, turns and lengths in words; only the words differ."""
    tok = write_tokenizer(tmp_path / "tok")
    argv = ("--users", "12", "--seed", "7", "--block-size", "16")
    assert run(str(tmp_path / "plain.jsonl"), *argv)[0] == 0
    assert run(str(tmp_path / "tok.jsonl"), *argv, "--tokenizer", str(tok))[0] == 0

    def shape(path: Path) -> list[tuple[int, list[tuple[str, int]]]]:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return [(r["output_tokens"], [(m["role"], len(m["content"].split()))
                                      for m in r["messages"]]) for r in rows]

    plain, with_tok = shape(tmp_path / "plain.jsonl"), shape(tmp_path / "tok.jsonl")
    assert len(plain) == len(with_tok) and plain == with_tok
    assert (tmp_path / "plain.jsonl").read_text() != (tmp_path / "tok.jsonl").read_text()


def test_the_structure_does_not_depend_on_the_vocabulary_size() -> None:
    """A real tokenizer's vocabulary (gpt-oss's o200k: about 200,000 ids) against the
    built-in list: a word from a larger range takes more random bits (and, for a size
    just above a power of two, more rejected draws), which must not move the structure."""
    given = spec(users=12, turns="uniform:2:6", system_words=400,
                 user_words="uniform:20:80", reply_words="uniform:20:120", seed=7)
    small = ct.generate(given, list(ct.BUILTIN_WORDS))
    large = ct.generate(given, [f"w{i}" for i in range(200_000)])
    assert small.order == large.order
    assert [[(t.user_words, t.reply_words, t.think) for t in c.turns]
            for c in small.conversations] == [[(t.user_words, t.reply_words, t.think)
                                               for t in c.turns]
                                              for c in large.conversations]
