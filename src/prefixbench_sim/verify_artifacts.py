"""Slow end-to-end checks of the simulated fleet's artifacts (``make sim-verify``).

1. build everything into ``<www>`` (no-op when up to date);
2. the apt repository's signatures verify with ``gpgv`` and its indexes match;
3. the simulated ``neuron-ls -j`` (unpacked from its deb) lists 16 devices / 64 logical
   NeuronCores for trn2.48xlarge;
4. a clean Python 3.11 venv installs from the served index with this machine's pip
   configuration kept out, and ``import vllm`` / ``vllm --version`` work;
5. the tiny tokenizer (a byte-level BPE, like gpt-oss's) loads in that venv and
   decode -> encode is stable on its own output;
6. ``vllm serve`` of the tiny model on loopback becomes healthy, ``vllm bench serve``
   with ``prefix_repetition`` (8 prompts, prefix 256 + suffix 128) reports exactly
   8 * 384 input tokens (the client's count), and the server's own prompt-token counter
   equals the tokens :func:`prefixbench.predict.served.served_expectation` says the server sees
   (the prompts re-encoded whole, where prefix and suffix may re-split).

Prints one JSON object of measured figures on stdout. Needs no network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from prefixbench.engines.workloads import Workload
from prefixbench.predict.served import served_expectation
from prefixbench_sim import apt_packages, artifacts, artifacts_apt, artifacts_pip, tinymodel
from prefixbench_sim._build import BuildError, cache_dir, log, run

PORT: Final = 8011
PREFIX_LEN: Final = 256
SUFFIX_LEN: Final = 128
NUM_PROMPTS: Final = 8
HEALTH_TIMEOUT_S: Final = 600


def default_www() -> Path:
    state = os.environ.get("PREFIXBENCH_SIM_STATE")
    root = Path(state) if state else Path(__file__).resolve().parents[2] / ".simfleet"
    return root / "www"


def check_neuron_ls(www: Path, python: Path) -> int:
    debs = sorted((www / "neuron-apt" / "pool").rglob("aws-neuronx-tools_*.deb"))
    with tempfile.TemporaryDirectory(prefix="pb-tools-") as tmp:
        run(["dpkg-deb", "-x", str(debs[-1]), tmp])
        ident = Path(tmp) / "instance.json"
        ident.write_text(json.dumps({"instance_type": "trn2.48xlarge", "family": "trn2"}))
        env = {"PATH": "/usr/bin:/bin", "PREFIXBENCH_SIM_INSTANCE_FILE": str(ident),
               "PREFIXBENCH_SIM_CATALOG": f"{tmp}{apt_packages.CATALOG_PATH}"}
        out = run([str(python), f"{tmp}/opt/aws/neuron/bin/neuron-ls", "-j"], env=env).stdout
    devices = json.loads(out)
    cores = sum(int(d["nc_count"]) for d in devices)
    if len(devices) != 16 or cores != 64:
        raise BuildError(f"neuron-ls -j: {len(devices)} devices / {cores} cores, want 16 / 64")
    return cores


_ROUNDTRIP: Final = """
import random, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
rng = random.Random(0)
for _ in range(200):
    ids = [rng.randrange(tok.get_vocab_size()) for _ in range(rng.randrange(1, 400))]
    once = tok.encode(tok.decode(ids), add_special_tokens=False).ids
    twice = tok.encode(tok.decode(once), add_special_tokens=False).ids
    assert twice == once, (once[:10], twice[:10])
print("ok")
"""


def _get(url: str, timeout: float = 5) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 -- loopback http
        body: bytes = resp.read()
    return body.decode()


def prompt_tokens(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if re.match(r"^vllm:prompt_tokens_total[{ ]", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def serve_and_bench(bindir: Path, model: Path, workdir: Path) -> dict[str, Any]:
    env = artifacts_pip.clean_env(workdir)
    env.update({"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin"})
    log_path = workdir / "serve.log"
    argv = [str(bindir / "vllm"), "serve", str(model), "--host", "127.0.0.1",
            "--port", str(PORT), "--max-model-len", "8192", "--max-num-seqs", "4",
            "--max-num-batched-tokens", "1024"]
    start = time.monotonic()
    with log_path.open("wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  cwd=workdir)
    base = f"http://127.0.0.1:{PORT}"
    try:
        while True:
            if server.poll() is not None:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise BuildError(f"vllm serve exited {server.returncode}:\n{tail}")
            if time.monotonic() - start > HEALTH_TIMEOUT_S:
                raise BuildError(f"vllm serve not healthy after {HEALTH_TIMEOUT_S} s")
            try:
                _get(f"{base}/health")
                break
            except (urllib.error.URLError, OSError):
                time.sleep(1)
        healthy_s = time.monotonic() - start
        log(f"vllm serve healthy after {healthy_s:.1f} s (pid {server.pid})")
        before = prompt_tokens(_get(f"{base}/metrics"))
        results = workdir / "results"
        bench_start = time.monotonic()
        run([str(bindir / "vllm"), "bench", "serve", "--backend", "vllm",
             "--dataset-name", "prefix_repetition",
             "--prefix-repetition-prefix-len", str(PREFIX_LEN),
             "--prefix-repetition-suffix-len", str(SUFFIX_LEN),
             "--prefix-repetition-num-prefixes", "2",
             "--prefix-repetition-output-len", "8",
             "--num-prompts", str(NUM_PROMPTS), "--tokenizer", str(model),
             "--base-url", base, "--model", str(model), "--ignore-eos",
             "--save-result", "--result-dir", str(results), "--result-filename", "bench.json"],
            env=env, cwd=workdir)
        bench_s = time.monotonic() - bench_start
        after = prompt_tokens(_get(f"{base}/metrics"))
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    result = json.loads((results / "bench.json").read_text())
    want = NUM_PROMPTS * (PREFIX_LEN + SUFFIX_LEN)
    got = int(result["total_input_tokens"])
    server_tokens = int(after - before)
    if got != want:
        raise BuildError(f"total_input_tokens {got} != {want}")
    workload = Workload(name="verify", prefix_repetition_prefix_len=PREFIX_LEN,
                        prefix_repetition_suffix_len=SUFFIX_LEN,
                        prefix_repetition_num_prefixes=2, prefix_repetition_output_len=8,
                        num_prompts=NUM_PROMPTS, seed=0, ready_check_timeout_sec=None)
    served = served_expectation(workload, model, 128)
    if server_tokens != served.query_tokens:
        raise BuildError(f"the server counted {server_tokens} prompt tokens, the prompts "
                         f"re-encoded give {served.query_tokens}")
    return {"healthy_s": round(healthy_s, 1), "bench_s": round(bench_s, 1),
            "total_input_tokens": got, "expected_input_tokens": want,
            "server_prompt_tokens": server_tokens, "completed": result.get("completed"),
            "junction_resplits": served.junction_resplits}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--www", type=Path, default=default_www())
    parser.add_argument("--no-serve", action="store_true", help="skip vllm serve + bench")
    args = parser.parse_args(argv)
    www = args.www.resolve()
    figures: dict[str, Any] = {"www": str(www)}
    try:
        t0 = time.monotonic()
        artifacts.build_all(www)
        figures["build_all_s"] = round(time.monotonic() - t0, 1)
        artifacts_apt.verify_repo(www / "neuron-apt")
        python = artifacts_pip.find_host_python()
        figures["neuron_ls_cores_trn2_48xlarge"] = check_neuron_ls(www, python)
        t0 = time.monotonic()
        bindir = artifacts_pip.host_like_venv(www, cache_dir() / "venv-py311-vllm", python)
        figures["venv_s"] = round(time.monotonic() - t0, 1)
        figures["vllm_version"] = artifacts_pip.check_venv(bindir)
        model = www / "models" / tinymodel.MODEL_NAME
        run([str(bindir / "python"), "-c", _ROUNDTRIP, str(model / "tokenizer.json")],
            env=artifacts_pip.clean_env(bindir.parent))
        figures["tokenizer_roundtrip"] = "stable"
        if not args.no_serve:
            with tempfile.TemporaryDirectory(prefix="pb-serve-") as tmp:
                figures |= serve_and_bench(bindir, model, Path(tmp))
    except BuildError as exc:
        print(f"verify-sim-artifacts: FAILED: {exc}", file=sys.stderr)
        print(json.dumps(figures))
        return 1
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
