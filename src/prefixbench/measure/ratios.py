"""Expected prefix-cache hit ratios of a ``prefix_repetition`` workload.

Two forms:

* :func:`tutorial_expected_ratio` is the tutorial's step-9 formula, exactly as written:
  every warm request reuses the whole ``prefix_len``. It is the ceiling the tutorial
  quotes (67.5% for its high-overlap workload).
* :func:`block_aligned_expected` is what vLLM actually counts. Its prefix cache works on
  whole KV blocks: a request hits ``floor(shared_len / block_size)`` full blocks, and
  never its own last token (vLLM recomputes it for the logits, so a fully cached prompt
  hits ``floor((prompt_len - 1) / block_size)`` blocks). With block 128 a 300-token
  prefix gives 256 hit tokens per warm request.

How vLLM builds the workload (``PrefixRepetitionRandomDataset.sample``, vLLM 0.32):
``prompts_per_prefix = num_prompts // num_prefixes`` and exactly
``num_prefixes * prompts_per_prefix`` requests are sent; a remainder is dropped, not
oversampled, and ``num_prompts < num_prefixes`` is an error. Each prompt is its prefix
followed by a fresh random suffix, and the list is shuffled, so at concurrency 1 with no
eviction each prefix has one cold request (its first use) and ``prompts_per_prefix - 1``
warm ones, whatever the order.

``vllm bench serve`` can send extra copies of the *first* (shuffled) prompt before the
measured run: one ready-check request when ``--ready-check-timeout-sec`` > 0 (default 0
in vLLM 0.32, so none), plus ``--num-warmups`` requests (default 0). When the metric
snapshots bracket the whole command these land in the delta: the first copy warms that
prompt's prefix, and every later copy of the same prompt (including the measured one)
is a full-prompt repeat. ``pre_requests`` models that.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ExpectedCache",
    "block_aligned_expected",
    "block_aligned_hit_tokens",
    "prompts_per_prefix",
    "tutorial_expected_ratio",
]


def prompts_per_prefix(num_prompts: int, num_prefixes: int) -> int:
    """``num_prompts // num_prefixes``, rejecting what vLLM rejects."""
    if num_prefixes <= 0:
        raise ValueError(f"num_prefixes must be positive, got {num_prefixes}")
    if num_prompts < num_prefixes:
        raise ValueError(
            f"num_prompts ({num_prompts}) must be greater than or equal to "
            f"num_prefixes ({num_prefixes}), as vLLM's prefix_repetition dataset requires")
    return num_prompts // num_prefixes


def tutorial_expected_ratio(
    num_prompts: int, num_prefixes: int, prefix_len: int, suffix_len: int
) -> float:
    """The tutorial's formula, exactly as written in step 9.

    ``warm = num_prompts - num_prefixes``; ``cold = num_prefixes``;
    ``hits = warm * prefix_len``; ``compute = cold * (prefix_len + suffix_len) +
    warm * suffix_len``; ratio ``hits / (hits + compute)``. Returns 0.0 when there are
    no tokens at all.
    """
    warm = num_prompts - num_prefixes
    cold = num_prefixes
    cache_hit_tokens = warm * prefix_len
    compute_tokens = cold * (prefix_len + suffix_len) + warm * suffix_len
    total = cache_hit_tokens + compute_tokens
    return cache_hit_tokens / total if total else 0.0


def block_aligned_hit_tokens(shared_len: int, prompt_len: int, block_size: int) -> int:
    """Tokens vLLM reports as hits for one request whose first ``shared_len`` tokens are
    cached: whole blocks only, and never the prompt's last token."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    usable = min(shared_len, prompt_len - 1)
    return max(usable, 0) // block_size * block_size


@dataclass(frozen=True)
class ExpectedCache:
    """Expected prefix-cache counters of one workload on an empty cache."""

    requests: int
    cold_requests: int
    warm_requests: int
    hit_tokens: int
    query_tokens: int
    hit_tokens_per_warm_request: int

    @property
    def ratio(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def compute_tokens(self) -> int:
        return self.query_tokens - self.hit_tokens


def block_aligned_expected(
    num_prompts: int,
    num_prefixes: int,
    prefix_len: int,
    suffix_len: int,
    block_size: int,
    *,
    pre_requests: int = 0,
    bos_tokens: int = 0,
) -> ExpectedCache:
    """Block-aligned expected hits of a ``prefix_repetition`` workload.

    Assumes an empty cache (or one holding nothing this workload's prompts share),
    enough KV capacity to keep every prefix, and requests whose prefixes are computed
    before the next request with the same prefix is scheduled (true at concurrency 1;
    under load it is the ideal). ``pre_requests`` is the number of ready-check and warmup
    requests (copies of the first prompt) counted in the same delta; ``bos_tokens`` is
    the number of tokens the server's tokenizer prepends to every prompt (shared by all).
    """
    ppp = prompts_per_prefix(num_prompts, num_prefixes)
    if pre_requests < 0 or bos_tokens < 0:
        raise ValueError("pre_requests and bos_tokens must be >= 0")
    n = num_prefixes * ppp
    prompt_len = bos_tokens + prefix_len + suffix_len
    shared = bos_tokens + prefix_len
    per_warm = block_aligned_hit_tokens(shared, prompt_len, block_size)
    full_repeat = block_aligned_hit_tokens(prompt_len, prompt_len, block_size)
    # Prompts that share only the BOS (num_prefixes distinct prefixes): still a hit of
    # floor(bos / block) blocks, 0 for any real block size.
    per_cold = block_aligned_hit_tokens(bos_tokens, prompt_len, block_size)
    if pre_requests == 0:
        hits = (n - num_prefixes) * per_warm + (num_prefixes - 1) * per_cold
        cold = num_prefixes
    else:
        # The first pre-request is cold; the other pre-requests and the measured copy
        # of prompt 0 repeat it whole; prompt 0's prefix is warm for the measured run.
        hits = pre_requests * full_repeat + (n - num_prefixes) * per_warm
        hits += (num_prefixes - 1) * per_cold
        cold = num_prefixes - 1
    return ExpectedCache(
        requests=n + pre_requests,
        cold_requests=cold + (1 if pre_requests else 0),
        warm_requests=n + pre_requests - cold - (1 if pre_requests else 0),
        hit_tokens=hits,
        query_tokens=(n + pre_requests) * prompt_len,
        hit_tokens_per_warm_request=per_warm,
    )
