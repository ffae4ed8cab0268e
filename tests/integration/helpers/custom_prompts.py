"""Your-own-traffic test data for the simulated fleet: a chat application's requests,
written in the tiny model's vocabulary (words ``t4`` .. ``t2047``).

Three system prompts shared by many requests, each request adding its own question, and
conversations that grow turn by turn as chat messages (rendered with the tiny model's
chat template). Seeded, so the file is the same on every run. :func:`write_multi_turn_chat`
writes the product's own chat traffic (:mod:`prefixbench.engines.chat_traffic`) instead.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from prefixbench.engines import chat_traffic as ct
from prefixbench_sim import tinytokenizer


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"t{rng.randrange(14, 2048)}" for _ in range(n))


def write_chat_traffic(path: Path, seed: int = 7) -> int:
    """Write the JSONL file; return its number of lines."""
    rng = random.Random(seed)  # noqa: S311 - seeded test data, not a secret
    systems = [_words(rng, rng.randrange(500, 800)) for _ in range(3)]
    lines: list[dict[str, object]] = []
    for _ in range(18):
        system = rng.choice(systems)
        lines.append({"prompt": f"{system} {_words(rng, rng.randrange(40, 300))}"})
    for _ in range(2):
        system = rng.choice(systems)
        messages: list[dict[str, str]] = [{"role": "system", "content": system}]
        for _turn in range(3):
            messages.append({"role": "user", "content": _words(rng, rng.randrange(30, 120))})
            lines.append({"messages": list(messages), "output_tokens": 8})
            messages.append({"role": "assistant", "content": _words(rng, 8)})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return len(lines)


def write_multi_turn_chat(path: Path, seed: int = 7) -> int:
    """Four users' growing conversations over one system prompt, interleaved by think
    time, as ``prefixbench chat-traffic`` writes them; return the number of lines."""
    def dist(text: str, minimum: int = 1) -> ct.Dist:
        return ct.parse_dist(text, minimum=minimum, option=text)

    spec = ct.ChatSpec(users=4, turns=dist("uniform:2:4"), system_words=300,
                       user_words=dist("uniform:20:60"), reply_words=dist("8"),
                       think=dist("uniform:0:2", 0), seed=seed)
    traffic = ct.generate(spec, ct.Vocabulary(tinytokenizer.word, 14, 2048))
    path.write_bytes(traffic.jsonl())
    return len(traffic.order)
