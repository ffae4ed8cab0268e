"""The tiny gpt-oss (:mod:`prefixbench.sim.tinygptoss`) with o200k_harmony's tokenizer,
built offline, served by the fleet's vLLM on CPU (the venv of
``tests/integration/vllm_venv.py``, no fleet): the tokenizer equals harmony's encoder id
for id; the server runs vLLM's hybrid KV-cache manager, counts prefix hits on
completions, and renders chat through harmony (which needs the real vocabulary).

One server start with ``--enforce-eager`` (the fleet's compiled start is measured in
the module's docstring); on loopback, stopped by its PID.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_venv import vllm_python

from prefixbench.sim import tinygptoss

pytestmark = pytest.mark.integration

__all__ = ["vllm_python"]  # the fixture, imported for pytest

BUILDER = Path(__file__).resolve().parent / "helpers" / "build_harmony_tokenizer.py"
BLOCK = 128


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def model_dir(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tinygptoss.write_model(tmp_path_factory.mktemp("tiny-gptoss"))
    proc = subprocess.run([str(vllm_python), str(BUILDER), str(out), "--check", "400"],
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    print(f"o200k_harmony tokenizer against harmony's encoder: {report['strings']} strings, "
          f"{report['tokens']} tokens, {report['mismatched']} mismatched")
    assert report["mismatched"] == 0, report["first_mismatch"]
    assert report["tokens"] > 20000
    assert report["vocab"] == tinygptoss.TinyGptOssSpec().vocab_size
    assert report["special_ids"] == {"<|startoftext|>": tinygptoss.BOS_ID,
                                     "<|return|>": tinygptoss.EOS_IDS[0],
                                     "<|endoftext|>": tinygptoss.PAD_ID,
                                     "<|call|>": tinygptoss.EOS_IDS[2]}
    return out


@pytest.fixture(scope="module")
def server(vllm_python: Path, model_dir: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(log.parent / "cache")}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [str(vllm_python.parent / "vllm"), "serve", str(model_dir), "--host", "127.0.0.1",
             "--port", str(port), "--max-model-len", "2048", "--max-num-seqs", "4",
             "--max-num-batched-tokens", "1024", "--enable-prefix-caching",
             "--enforce-eager"], stdout=sink, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        start = time.monotonic()
        while True:
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() - start < 900, "not healthy in 900 s"
            try:
                fetch(f"{url}/health", timeout=5)
                break
            except OSError:
                time.sleep(0.5)
        print(f"tiny gpt-oss healthy in {time.monotonic() - start:.0f} s (eager)")
        yield url, log
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fetch(url: str, body: dict[str, Any] | None = None, timeout: float = 300) -> bytes:
    """GET, or POST ``body`` as JSON, to the test's own loopback server."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"content-type": "application/json"})  # noqa: S310 -- http to loopback
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 -- loopback
        return bytes(response.read())


def post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(fetch(f"{url}{path}", body))
    return result


def hits(url: str) -> tuple[float, float]:
    values = {}
    for line in fetch(f"{url}/metrics").decode().splitlines():
        name = line.split("{", 1)[0]
        if name in {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}:
            values[name] = float(line.rsplit(" ", 1)[1])
    return values["vllm:prefix_cache_hits_total"], values["vllm:prefix_cache_queries_total"]


def test_served_with_the_hybrid_manager_and_prefix_hits(server: tuple[str, Path],
                                                       model_dir: Path) -> None:
    url, log = server
    assert f"kv cache group sizes ({BLOCK}, {BLOCK})" in log.read_text()
    rng = random.Random(3)  # noqa: S311 -- reproducible prompts
    shared = [rng.randrange(1000, 190000) for _ in range(600)]
    before = hits(url)
    for tail in range(2):
        prompt = shared + [rng.randrange(1000, 190000) for _ in range(40)]
        out = post(url, "/v1/completions", {"model": str(model_dir), "prompt": prompt,
                                             "max_tokens": 4})
        assert out["usage"]["prompt_tokens"] == 640, (tail, out["usage"])
    after = hits(url)
    # The second prompt reuses the shared prefix's whole blocks, in both groups.
    assert after[0] - before[0] == len(shared) // BLOCK * BLOCK
    assert after[1] - before[1] == 2 * 640


def test_chat_is_rendered_with_harmony_and_reuses_the_system_prompt(
        server: tuple[str, Path], model_dir: Path) -> None:
    url, _ = server
    system = " ".join(f"rule {i} matters" for i in range(150))
    before = hits(url)
    prompts = []
    for question in ("first question", "second question"):
        out = post(url, "/v1/chat/completions", {
            "model": str(model_dir), "max_tokens": 4,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]})
        assert out["choices"][0]["finish_reason"] == "length"
        prompts.append(out["usage"]["prompt_tokens"])
    hit = hits(url)[0] - before[0]
    # The shared system message's whole blocks, and nothing of the differing question.
    assert hit > 0 and hit % BLOCK == 0 and hit <= min(prompts) - 4, (hit, prompts)

