"""The hit ratio a chat traffic's structure implies (:mod:`prefixbench.engines.chat_traffic`),
without a cache model: the estimate the ``chat-traffic`` command shows next to the what-if
replay (:mod:`prefixbench.predict.whatif`).

A user's turn after the first reuses its previous request whole (the history); a first
turn reuses the shared system prompt when any request came before it; the rest is
computed: the new messages and the partial last block. Assumptions:

* the cache is unbounded: nothing is evicted;
* hits come in whole blocks of ``block_size`` tokens, at most
  ``(prompt - 1) // block_size`` of them (vLLM computes the last prompt token);
* each turn's rendered prompt starts with the previous turn's tokens (a chat template
  that rewrites earlier turns, or a tokenizer merging across the junction, breaks this);
* requests run one at a time (at higher concurrency a user's next turn is still behind
  its previous one only when the think time leaves room); no warmups;
* different users' messages share nothing but the system prompt.

Lengths are each request's token counts when given (:func:`token_counts`: the chat
template rendered and encoded as the server does), else its words (template tokens not
counted). Where the replay disagrees with the estimate, one assumption does not hold: the
replay's evicted blocks tell the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prefixbench.engines.chat_traffic import ChatTraffic, ChatTrafficError
from prefixbench.engines.tokenizer import Tokenizer

__all__ = ["Estimate", "structural_estimate", "token_counts"]


@dataclass(frozen=True)
class Estimate:
    """The structural estimate: hit tokens over prompt tokens, and where the hits are."""

    ratio: float | None
    hit_tokens: int
    query_tokens: int
    system_hit_tokens: int
    history_hit_tokens: int
    block_size: int
    unit: str


def structural_estimate(traffic: ChatTraffic, block_size: int, *,
                        prompt_tokens: Sequence[int] | None = None,
                        shared_tokens: int | None = None) -> Estimate:
    """The hit ratio the structure implies (assumptions: the module's docstring).
    ``prompt_tokens``: each request's tokens in send order, and ``shared_tokens`` the
    tokens every first turn starts with (:func:`token_counts`); default: words, the
    system prompt's words shared."""
    if block_size < 1:
        raise ChatTrafficError(f"block size must be >= 1, got {block_size}")
    unit = "tokens" if prompt_tokens is not None else "words"
    lengths = list(prompt_tokens) if prompt_tokens is not None else traffic.prompt_words()
    shared = traffic.spec.system_words if shared_tokens is None else shared_tokens
    if len(lengths) != len(traffic.order):
        raise ChatTrafficError(f"{len(lengths)} prompt lengths for {len(traffic.order)} "
                               f"requests")
    previous: dict[int, int] = {}  # user -> its previous request's length
    system = history = 0
    for index, (req, length) in enumerate(zip(traffic.order, lengths, strict=True)):
        reuse = previous.get(req.user, shared if index else 0)
        hit = min(reuse, length - 1) // block_size * block_size
        if req.user in previous:
            history += hit
        else:
            system += hit
        previous[req.user] = length
    queries = sum(lengths)
    return Estimate(ratio=(system + history) / queries if queries else None,
                    hit_tokens=system + history, query_tokens=queries,
                    system_hit_tokens=system, history_hit_tokens=history,
                    block_size=block_size, unit=unit)


def token_counts(traffic: ChatTraffic, tokenizer: Tokenizer) -> tuple[list[int], int]:
    """Each request's prompt tokens as the server counts them (rendered with the chat
    template, encoded), and the tokens every user's first request starts with (the
    system prompt and what the template puts around it; 0 with one user)."""
    lengths: list[int] = []
    firsts: list[list[int]] = []
    for start in range(0, len(traffic.order), 256):
        batch = range(start, min(start + 256, len(traffic.order)))
        encoded = tokenizer.encode_batch([tokenizer.render_chat(traffic.messages(i))
                                        for i in batch])
        lengths += map(len, encoded)
        firsts += [ids for i, ids in zip(batch, encoded, strict=True)
                   if traffic.order[i].turn == 0]
    shared = 0
    if len(firsts) > 1:
        shared = min(map(len, firsts))
        for ids in firsts[1:]:
            shared = next((k for k in range(shared) if ids[k] != firsts[0][k]), shared)
    return lengths, shared
