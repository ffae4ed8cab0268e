"""Own-prompts what-if as a stream: the same predictions as reading the whole file, for
any number of workers; prompts read back in bounded jobs; the file's errors as before."""

from __future__ import annotations

import io
import json
import os
import random
import re
import threading
import tracemalloc
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.engines import custom, custom_index, custom_read
from prefixbench.engines import tokenizer as tk
from prefixbench.engines.cachesim import CapacityError, PrefixCacheSim
from prefixbench.engines.custom import prepare_file
from prefixbench.engines.custom_index import index_file
from prefixbench.engines.custom_read import CustomPromptsError, read_user_file
from prefixbench.engines.progress import ENCODING, READING, ProgressBar
from prefixbench.engines.workloads import Workload
from prefixbench.predict import replay, whatif
from prefixbench_sim import tinytokenizer


def words(*ids: int) -> str:
    return " ".join(tinytokenizer.word(i) for i in ids)


SHARED_A = words(*range(100, 180))  # 80 tokens
SHARED_B = words(*range(300, 340))  # 40 tokens


def mixed_file(path: Path, count: int = 60) -> Path:
    """Prompt and chat lines sharing prefixes, with JSON escapes, non-ASCII text, a raw
    U+2028 inside a string, blank lines, CRLF endings and a lone CR between two lines."""
    rng = random.Random(7)  # noqa: S311 - test data
    out = io.BytesIO()
    for i in range(count):
        shared = SHARED_A if i % 3 else SHARED_B
        tail = words(*(rng.randrange(400, 2000) for _ in range(rng.randrange(1, 30))))
        item: dict[str, Any]
        if i % 11 == 5:
            item = {"messages": [{"role": "system", "content": shared},
                                 {"role": "user", "content": tail}]}
        else:
            extra = ["", ' "quoted"', " back\\slash", "\nnew line", " \u00e9t\u00e9",
                     " \u2028sep"][i % 6]
            item = {"prompt": f"{shared} {tail}{extra}"}
        if i % 4 == 0:
            item["output_tokens"] = 1 + i % 37
        text = json.dumps(item, ensure_ascii=i % 2 == 0)
        out.write(text.encode("utf-8"))
        out.write([b"\n", b"\r\n", b"\n\n", b"\r"][i % 4] if i < count - 1 else b"\n")
    path.write_bytes(out.getvalue())
    return path


def reference(path: Path, tok: tk.Tokenizer, *, block_size: int, capacity: int | None,
              seed: int, shuffle: bool, pre: int, num_prompts: int, out_len: int
              ) -> tuple[int, int, int, int] | str:
    """The whole-file computation: every line in memory (text mode), vLLM's order, one
    prompt encoded at a time, replayed; (hits, queries, requests, evicted)."""
    with path.open(encoding="utf-8") as handle:
        items = [json.loads(line) for line in handle if line.strip()]
    texts = [item["prompt"] if "prompt" in item else tok.render_chat(item["messages"])
             for item in items]
    outs = [item["output_tokens"] if out_len == -1 else out_len for item in items]  # vLLM's
    order = list(range(len(items)))
    if shuffle:
        random.Random(seed).shuffle(order)  # noqa: S311 - vLLM's shuffle
    order = order[:num_prompts] if num_prompts else order
    order = [order[0]] * pre + order
    sim = PrefixCacheSim(block_size, capacity)
    hits = 0
    try:
        for i in order:
            hits += sim.run(array("I", tok.encode(texts[i])),
                            outs[i] if capacity is not None else 0)
    except CapacityError as exc:
        return f"a request does not fit the cache: {exc}"
    return hits, sim.query_tokens_total, len(order), sim.evicted_blocks


def workload(path: Path, **extra: object) -> Workload:
    return Workload.from_dict({"name": "mine", "dataset_name": "custom",
                               "dataset_path": str(path), "max_concurrency": 1,
                               "custom_output_len": 9, **extra})


@pytest.fixture
def small_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs of a few prompts, so even small files take many jobs (and threads)."""
    monkeypatch.setattr(replay, "JOB_BYTES", 2000)
    monkeypatch.setattr(replay, "JOB_PROMPTS", 3)


@pytest.mark.usefixtures("small_jobs")
@pytest.mark.parametrize(
    "case",  # seed, shuffle, warmups, num_prompts, block size, capacity blocks
    [(0, True, 0, 0, 16, None), (11, True, 2, 0, 16, 60), (5, False, 1, 25, 8, None),
     (3, True, 0, 40, 32, 24), (9, True, 1, 0, 16, 12), (1, True, 0, 0, 16, 5)])
def test_streamed_prediction_equals_the_whole_file_computation_for_any_workers(
        tmp_path: Path, case: tuple[int, bool, int, int, int, int | None]) -> None:
    seed, shuffle, warmups, num_prompts, block, capacity = case
    path = mixed_file(tmp_path / "p.jsonl")
    tokdir = write_tokenizer(tmp_path / "tok")
    tok = tk.load(tokdir)
    w = workload(path, seed=seed, disable_shuffle=not shuffle, num_warmups=warmups,
                 num_prompts=num_prompts)
    want = reference(path, tok, block_size=block, capacity=capacity, seed=seed,
                     shuffle=shuffle, pre=warmups, num_prompts=num_prompts, out_len=9)
    preds = [whatif.predict(w, block_size=block, capacity_blocks=capacity,
                            tokenizer_dir=tokdir, workers=n) for n in (1, 2, 3, 8)]
    assert all(p == preds[0] for p in preds)
    pred = preds[0]
    if isinstance(want, str):
        assert pred.ratio is None and pred.note == want
    else:
        assert (pred.hit_tokens, pred.query_tokens, pred.requests, pred.evicted_blocks) == want
        assert pred.hit_tokens > 0 and pred.ratio == want[0] / want[1]
        if capacity is not None:
            assert pred.evicted_blocks > 0
    # the in-memory entry point agrees
    prepared = prepare_file(path, num_prompts=num_prompts, custom_output_len=9, tokenizer=tok)
    assert whatif.predict_prepared(prepared, tok, block_size=block, capacity_blocks=capacity,
                                   seed=seed, shuffle=shuffle, pre_requests=warmups,
                                   workload=w, workers=2) == pred


def test_the_index_points_at_each_prompt_text_or_line(tmp_path: Path) -> None:
    path = mixed_file(tmp_path / "p.jsonl")
    tok = tk.load(write_tokenizer(tmp_path / "tok"))
    index = index_file(path, custom_output_len=9, tokenizer=tok)
    prepared = prepare_file(path, custom_output_len=9, tokenizer=tok)
    assert len(index) == len(prepared.texts) == 60 and index.num_prompts == 60
    assert list(index.output_tokens) == list(prepared.output_tokens)
    assert index.chat_lines == prepared.chat_lines == 5
    # escaped prompts and chats are read back from their line, plain ones from their text
    assert 0 < sum(index.verbatim) < len(index)
    with index.reader(tok) as reader:
        assert reader.texts(range(len(index))) == list(prepared.texts)
        assert reader.texts([7, 3, 7]) == [prepared.texts[i] for i in (7, 3, 7)]


def test_prompts_are_read_back_in_bounded_jobs_once_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_jobs: None) -> None:
    path = mixed_file(tmp_path / "p.jsonl")
    tokdir = write_tokenizer(tmp_path / "tok")
    jobs: list[list[int]] = []
    real = custom_index.PromptReader.texts

    def texts(self: custom_index.PromptReader, indices: Sequence[int]) -> list[str]:
        jobs.append(list(indices))
        return real(self, indices)

    monkeypatch.setattr(custom_index.PromptReader, "texts", texts)
    w = workload(path, seed=2, num_warmups=3, num_prompts=50)
    pred = whatif.predict(w, block_size=16, tokenizer_dir=tokdir, workers=2)
    assert pred.requests == 53
    sent = [i for job in jobs for i in job]
    assert sorted(sent) == sorted(custom.send_order(60, 50, 2))  # warmups not re-read
    assert max(map(len, jobs)) <= 3


def test_encoding_keeps_at_most_two_jobs_per_worker_in_flight() -> None:
    lock = threading.Lock()
    started: list[int] = []
    consumed = 0
    most = 0

    def encode(job: Sequence[int]) -> list[array[int]]:
        nonlocal most
        with lock:
            started.append(job[0])
            most = max(most, len(started) - consumed)
        return [array("I", job)]

    jobs = [[i] for i in range(40)]
    out = []
    for result in replay._encoded(jobs, encode, 3):
        out.append(result[0][0])
        consumed += 1
    assert out == list(range(40)) and most <= 6
    # closing early cancels what is not started
    gen = replay._encoded(jobs, encode, 2)
    next(gen)
    gen.close()
    assert len(started) < 80


def test_memory_does_not_grow_with_the_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay, "JOB_BYTES", 32 << 10)
    path = tmp_path / "big.jsonl"
    shared = words(*range(100, 700))
    with path.open("w") as handle:
        for i in range(1500):
            handle.write(json.dumps({"prompt": f"{shared} {words(800 + i % 1000)}"}) + "\n")
    size = path.stat().st_size
    assert size > 4 << 20
    tokdir = write_tokenizer(tmp_path / "tok")
    tracemalloc.start()
    try:
        index = index_file(path, custom_output_len=4)
        _, peak_index = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        pred = whatif.predict_indexed(index, tk.load(tokdir), block_size=16, workers=2)
        _, peak_predict = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pred.requests == 1500 and pred.ratio is not None and pred.ratio > 0.9
    # The index: the read buffer and ~25 bytes a prompt. Predicting: the jobs in flight
    # (texts and token arrays) and the unbounded cache's keys, not the file's texts.
    assert peak_index < (1 << 20) + 200_000, peak_index
    assert peak_predict < size // 4, (peak_predict, size)


def test_a_file_changed_after_indexing_is_refused(tmp_path: Path) -> None:
    path = mixed_file(tmp_path / "p.jsonl", count=12)
    tok = tk.load(write_tokenizer(tmp_path / "tok"))
    index = index_file(path, custom_output_len=9, tokenizer=tok)
    with path.open("ab") as handle:
        handle.write(b'{"prompt": "t5"}\n')
    with pytest.raises(CustomPromptsError, match="changed since it was checked"):
        whatif.predict_indexed(index, tok, block_size=16)


def test_errors_keep_the_whole_file_order(tmp_path: Path) -> None:
    def lines(*items: object) -> Path:
        path = tmp_path / "e.jsonl"
        path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n"
                                for i in items))
        return path

    # an unparsable line is reported before an earlier line without output tokens
    path = lines({"prompt": "t5"}, {"prompt": "t6", "output_tokens": 2}, "{bad")
    for call in (prepare_file, index_file):
        with pytest.raises(CustomPromptsError, match=r"e\.jsonl:3: not valid JSON"):
            call(path, custom_output_len=-1)
    # num_prompts before a missing output_tokens or a chat without tokenizer
    path = lines({"messages": [{"role": "user", "content": "t5"}]}, {"prompt": "t6"})
    for call in (prepare_file, index_file):
        with pytest.raises(CustomPromptsError, match="exceeds the 2 prompts"):
            call(path, num_prompts=3, custom_output_len=-1)
        with pytest.raises(CustomPromptsError, match=r":1: no output_tokens"):
            call(path, custom_output_len=-1)
        with pytest.raises(CustomPromptsError, match=r":1: a chat .* no tokenizer given"):
            call(path, custom_output_len=1)
    path.write_bytes(b'{"prompt": "t5"}\n{"prompt": "\xff"}\n')
    with pytest.raises(CustomPromptsError, match=r"e\.jsonl:2: not UTF-8 text"):
        index_file(path, custom_output_len=1)


def test_lines_split_as_text_mode_splits_them(tmp_path: Path) -> None:
    path = tmp_path / "n.jsonl"
    raw = (b'{"prompt": "t5"}\r\n\r{"prompt": "t6"}\r{"prompt": "t7 \xe2\x80\xa8 t8"}\n'
           b'\n{"prompt": "t9"}')
    path.write_bytes(raw)
    with path.open(encoding="utf-8") as handle:  # universal newlines
        want = [(n, json.loads(line)["prompt"])
                for n, line in enumerate(handle, start=1) if line.strip()]
    assert [(p.line, p.prompt) for p in read_user_file(path)] == want
    assert [n for n, _ in want] == [1, 3, 4, 6]
    index = index_file(path, custom_output_len=1)
    with index.reader() as reader:
        assert reader.texts(range(4)) == [t for _, t in want]
    # an error message is text mode's, whatever ends the line
    for bad in (b'{"prompt": }\r\n', b'{"prompt": "t6"\r', b'{"prompt": "t6"\r\n'):
        path.write_bytes(b'{"prompt": "t5"}\r' + bad + b'{"prompt": "t7"}\n')
        with path.open(encoding="utf-8") as handle:
            second = list(handle)[1]
        with pytest.raises(json.JSONDecodeError) as error:
            json.loads(second)
        message = f"n.jsonl:2: not valid JSON ({error.value.msg}, column {error.value.colno})"
        for call in (read_user_file, lambda p: index_file(p, custom_output_len=1)):
            with pytest.raises(CustomPromptsError, match=re.escape(message)):
                call(path)


def test_progress_is_reported_for_reading_and_encoding(
        tmp_path: Path, small_jobs: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(custom_read, "_REPORT_BYTES", 1000)
    path = mixed_file(tmp_path / "p.jsonl")
    calls: list[tuple[str, int, int]] = []
    pred = whatif.predict(workload(path, num_warmups=1), block_size=16,
                          tokenizer_dir=write_tokenizer(tmp_path / "tok"), workers=2,
                          progress=lambda *call: calls.append(call))
    reading = [c for c in calls if c[0] == READING]
    encoding = [c for c in calls if c[0] == ENCODING]
    assert calls == reading + encoding and len(reading) > 2 and len(encoding) > 10
    assert reading[-1] == (READING, path.stat().st_size, path.stat().st_size)
    assert encoding[-1] == (ENCODING, 61, 61) == (ENCODING, pred.requests, pred.requests)
    assert [c[1] for c in encoding] == sorted(c[1] for c in encoding)


class FakeTTY(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_bar_draws_only_on_a_terminal_after_the_delay() -> None:
    now = [0.0]
    stream = FakeTTY(tty=True)
    bar = ProgressBar(stream, delay=2.0, interval=0.5, width=10, clock=lambda: now[0])
    bar(ENCODING, 0, 1000)
    now[0] = 1.0
    bar(ENCODING, 100, 1000)
    assert stream.getvalue() == ""  # a short run shows nothing
    now[0] = 2.0
    bar(ENCODING, 200, 1000)
    assert stream.getvalue() == ("\rencoding + replaying [##--------]  20% 200/1,000 prompts, "
                                 "100 prompts/s, 8 s left")
    now[0] = 2.1
    bar(ENCODING, 210, 1000)  # within the interval: not redrawn
    assert stream.getvalue().count("\r") == 1
    now[0] = 3.0
    bar(ENCODING, 1000, 1000)  # the end is drawn, padded over the longer line before
    last = "encoding + replaying [##########] 100% 1,000/1,000 prompts, 333 prompts/s"
    assert stream.getvalue().endswith(f"\r{last}        ")
    bar.close()
    assert stream.getvalue().endswith("\r" + " " * len(last) + "\r")
    quiet = FakeTTY(tty=False)  # a pipe, a log file, pytest's capture
    with ProgressBar(quiet, delay=0.0) as off:
        off(READING, 1 << 20, 4 << 20)
    assert quiet.getvalue() == ""
    forced = FakeTTY(tty=False)
    ProgressBar(forced, delay=0.0, force=True)(READING, 3 << 20, 4 << 20)
    assert "reading [" in forced.getvalue() and "3/4 MiB" in forced.getvalue()


def test_encoding_ignores_padding_and_truncation_of_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer as Backend  # noqa: PLC0415 - as the module does

    tokdir = write_tokenizer(tmp_path / "tok")
    backend = Backend.from_file(str(tokdir / "tokenizer.json"))
    backend.enable_padding(pad_id=3, pad_token="<pad>", length=None)  # noqa: S106
    backend.enable_truncation(max_length=2)
    backend.save(str(tokdir / "tokenizer.json"))
    assert Backend.from_file(str(tokdir / "tokenizer.json")).encode_batch(
        ["t5", "t5 t6 t7"])[0].ids == [5, 3]  # as configured
    tok = tk.load(tokdir)
    assert tok.encode_batch(["t5", "t5 t6 t7"]) == [[5], [5, 6, 7]]
    assert [a.tolist() for a in tok.encode_arrays(["t5 t6 t7", "t5"])] == [[5, 6, 7], [5]]


def test_serial_batches_sets_and_restores_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    with tk.serial_batches():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert "TOKENIZERS_PARALLELISM" not in os.environ
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    with pytest.raises(RuntimeError), tk.serial_batches():
        raise RuntimeError
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"


def test_workers_must_be_positive_and_default_to_one_more_than_the_cores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mixed_file(tmp_path / "p.jsonl", count=6)
    pred = whatif.predict(workload(path), block_size=16,
                          tokenizer_dir=write_tokenizer(tmp_path / "tok"), workers=0)
    assert pred.ratio is None and pred.note == "workers must be >= 1, got 0"
    assert replay.usable_cores() >= 1
    for cores, workers in ((1, 1), (2, 3), (16, 17)):
        monkeypatch.setattr(replay, "usable_cores", lambda cores=cores: cores)
        assert replay.default_workers() == workers
