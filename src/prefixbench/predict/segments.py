"""What warm requests save on Neuron: the hit tokens that fall in whole prefill segments.

vllm-neuron prefills in segments of ``max_num_batched_tokens`` (equal to
``kv_segment_size_buckets``), and a warm request gains TTFT only for the segments it skips
whole: "If the prefix fit inside a single segment, no segment would be fully cached and
there would be nothing to skip" (aws-neuron/aws-neuron-sdk, tags v2.31.1 and v2.32.0,
vllm-neuron/docs/tutorials/tutorial-prefix-caching-gpt-oss-benchmarking.md, Step 2's key
flags; the report's :data:`prefixbench.report.issues.FIX_NO_GAIN` states the same rule).
So a request's saving is its hit rounded down to a multiple of the segment.
:class:`SegmentCount` adds them up for a replay
(:mod:`prefixbench.predict.replay`, with ``Serving.prefill_segment``).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SegmentCount"]


class SegmentCount:
    """Hit tokens in whole prefill segments of ``segment`` tokens, and the requests that
    skip at least one; counts nothing when ``segment`` is None (no segments: vLLM's CPU
    platform)."""

    def __init__(self, segment: int | None) -> None:
        if segment is not None and segment < 1:
            raise ValueError(f"a prefill segment is at least 1 token, got {segment}")
        self.segment = segment
        self.saved_tokens = 0
        self.requests = 0

    def add(self, hit_tokens: int) -> None:
        """Count one request's hit."""
        if self.segment is not None:
            whole = hit_tokens // self.segment * self.segment
            self.saved_tokens += whole
            self.requests += whole > 0

    def add_all(self, hits: Iterable[int]) -> None:
        for hit in hits:
            self.add(hit)

    def totals(self) -> tuple[int | None, int | None]:
        """Hit tokens in whole segments and the requests that skip one (None, None: not
        counted)."""
        if self.segment is None:
            return None, None
        return self.saved_tokens, self.requests
