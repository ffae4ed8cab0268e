"""What warm requests save on Neuron: the prefill chunks a hit spares, and their padded
tokens, as AWS's design of prefix caching on Neuron runs them.

aws-neuron/aws-neuron-sdk, tags v2.31.1 and v2.32.0 (the same text),
``vllm-neuron/docs/design/vllm/prefix-caching.md``:

* "Block Alignment": the cached tokens are block-aligned (``prior_tokens`` a multiple of
  ``block_size``, not of the segment);
* "Scheduler Integration": the next chunk starts at ``num_computed_tokens`` and is
  ``min(remaining, max_num_batched_tokens)`` tokens, padded to the bucket;
* "Partial KV Segment Handling": a partial last prior segment is masked by the kernel,
  not recomputed.

So a request of ``P`` prompt tokens with ``h`` hit tokens runs ``ceil((P - h) / S)``
prefill chunks instead of ``ceil(P / S)`` (``S`` the chunk size), each padded to the
smallest prefill bucket that holds it. The tutorial's sentence ("If the prefix fit inside
a single segment, no segment would be fully cached and there would be nothing to skip",
``tutorial-prefix-caching-gpt-oss-benchmarking.md``, Step 2's key flags) agrees only when
the suffix fills whole segments; the bundle follows the design (:data:`DESIGN_RULE`,
:data:`TUTORIAL_DISAGREES`). Modelled from AWS's design and the plugin's source, never
checked on Trainium.

:class:`PrefillCount` adds the requests of a replay up (:mod:`prefixbench.predict.replay`,
with ``Serving.prefill_segment`` and ``Serving.prefill_buckets``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["DESIGN_RULE", "DESIGN_SOURCE", "TUTORIAL_DISAGREES", "UNCHECKED",
           "PrefillChunks", "PrefillCount", "chunks", "padded_tokens", "warm_request_saving"]

#: Where the rule is stated.
DESIGN_SOURCE: Final = ("aws-neuron/aws-neuron-sdk@v2.31.1 (= v2.32.0) vllm-neuron/docs/"
                        "design/vllm/prefix-caching.md, \"Block Alignment\", \"Partial KV "
                        "Segment Handling\", \"Scheduler Integration\"")
#: The rule, in one line.
DESIGN_RULE: Final = (
    "a warm request of P prompt tokens with h hit tokens (block-aligned) runs "
    "ceil((P - h) / S) prefill chunks instead of ceil(P / S), S the chunk size, each "
    f"padded to its prefill bucket; a partial last prior segment is masked, not "
    f"recomputed ({DESIGN_SOURCE})")
#: Where the tutorial's sentence and the design disagree, said once.
TUTORIAL_DISAGREES: Final = (
    "the tutorial's \"If the prefix fit inside a single segment ... there would be "
    "nothing to skip\" (Step 2's key flags) holds only when the suffix fills whole "
    "segments: followed here is the design")
#: Said once wherever a Neuron figure is printed.
UNCHECKED: Final = ("the Neuron models follow AWS's design and the plugin's source "
                    "(the vllm-neuron of Neuron 2.32), never checked on Trainium")


def chunks(tokens: int, chunk: int) -> int:
    """Prefill chunks of at most ``chunk`` tokens that ``tokens`` computed tokens take."""
    if chunk < 1:
        raise ValueError(f"a prefill chunk is at least 1 token, got {chunk}")
    return -(-max(tokens, 0) // chunk)


def _bucket(count: int, buckets: Sequence[int]) -> int:
    # bucket_utils.get_bucket_for_count: the smallest bucket >= count, else the largest.
    for size in buckets:
        if size >= count:
            return size
    return buckets[-1]


def padded_tokens(tokens: int, chunk: int, buckets: Sequence[int]) -> int:
    """The tokens ``tokens`` computed tokens run on the device: chunks of ``chunk``, each
    padded to the smallest of ``buckets`` (ascending) that holds it."""
    if not buckets:
        raise ValueError("prefill buckets cannot be empty")
    whole, rest = divmod(max(tokens, 0), chunk)
    return whole * _bucket(chunk, buckets) + (_bucket(rest, buckets) if rest else 0)


@dataclass(frozen=True)
class PrefillChunks:
    """A replay's prefill on Neuron: chunks and padded tokens without any hit (cold) and
    as run (with the hits), the requests that skip at least one chunk, and the chunk size
    and buckets used."""

    chunk: int
    buckets: tuple[int, ...]
    requests: int
    cold_chunks: int
    run_chunks: int
    cold_padded: int
    run_padded: int
    skipping_requests: int

    @property
    def skipped_chunks(self) -> int:
        return self.cold_chunks - self.run_chunks

    @property
    def saved_padded(self) -> int:
        return self.cold_padded - self.run_padded

    @property
    def saved_share(self) -> float:
        """The share of the cold prefill (padded tokens, what the device runs) saved."""
        return self.saved_padded / self.cold_padded if self.cold_padded else 0.0

    def lines(self) -> list[tuple[str, str]]:
        """The saving as labelled lines, the first the answer."""
        n = max(self.requests, 1)
        return [
            ("prefill saved", f"{self.skipped_chunks:,} of {self.cold_chunks:,} prefill "
             f"chunks ({self.saved_padded:,} of {self.cold_padded:,} padded tokens, "
             f"{self.saved_share:.2%}); {self.skipping_requests:,} of {self.requests:,} "
             f"requests skip at least one"),
            ("per request", f"{self.run_chunks / n:.2f} chunks run and "
             f"{self.skipped_chunks / n:.2f} skipped ({self.run_padded / n:,.0f} padded "
             f"tokens run, {self.saved_padded / n:,.0f} saved), chunks of {self.chunk} "
             f"tokens padded to buckets {list(self.buckets)}"),
        ]


def warm_request_saving(prefix_len: int, prompt_len: int, block_size: int, chunk: int,
                        buckets: Sequence[int]) -> str | None:
    """Why a warm request of ``prompt_len`` tokens whose first ``prefix_len`` are cached
    saves no prefill on Neuron (its hit, block-aligned and at most ``prompt_len - 1``,
    leaves as many padded chunk tokens to run as a cold one), or None when it saves some."""
    hit = min(prefix_len, prompt_len - 1) // block_size * block_size
    if padded_tokens(prompt_len - hit, chunk, buckets) < padded_tokens(prompt_len, chunk,
                                                                       buckets):
        return None
    return (f"a warm request of {prompt_len} prompt tokens hits {hit} and still runs "
            f"ceil(({prompt_len} - {hit}) / {chunk}) = {chunks(prompt_len - hit, chunk)} "
            f"prefill chunks, as many as a cold one, padded the same: prefix caching saves "
            f"it no prefill on Neuron ({DESIGN_SOURCE})")


class PrefillCount:
    """Counts the prefill chunks of a replay's requests, chunk size ``chunk`` and prefill
    buckets ``buckets``; counts nothing when ``chunk`` is None (vLLM's CPU platform)."""

    def __init__(self, chunk: int | None, buckets: Sequence[int] | None = None) -> None:
        if chunk is not None and chunk < 1:
            raise ValueError(f"a prefill chunk is at least 1 token, got {chunk}")
        self.chunk = chunk
        self.buckets = tuple(buckets) if buckets else ((chunk,) if chunk else ())
        self.requests = self.cold_chunks = self.run_chunks = 0
        self.cold_padded = self.run_padded = self.skipping = 0

    def add(self, prompt_len: int, hit_tokens: int) -> None:
        """Count one request: ``prompt_len`` prompt tokens, ``hit_tokens`` of them hit."""
        if self.chunk is None:
            return
        chunk, buckets = self.chunk, self.buckets
        cold, run = chunks(prompt_len, chunk), chunks(prompt_len - hit_tokens, chunk)
        self.requests += 1
        self.cold_chunks += cold
        self.run_chunks += run
        self.skipping += run < cold
        self.cold_padded += padded_tokens(prompt_len, chunk, buckets)
        self.run_padded += padded_tokens(prompt_len - hit_tokens, chunk, buckets)

    def totals(self) -> PrefillChunks | None:
        if self.chunk is None:
            return None
        return PrefillChunks(self.chunk, self.buckets, self.requests, self.cold_chunks,
                             self.run_chunks, self.cold_padded, self.run_padded,
                             self.skipping)
