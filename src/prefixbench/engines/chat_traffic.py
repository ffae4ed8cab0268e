"""Multi-turn chat traffic: a seeded conversation model, written as a custom workload's
JSONL file (``{"messages": [...], "output_tokens": N}`` lines in send order).

**The model.** One system prompt shared by every user (``system_words`` words; none when
0), ``users`` users, each with a number of turns drawn from ``turns``. At each turn the
user sends a message of ``user_words`` words; the request is the chat so far: the system
prompt, the earlier user messages and assistant replies alternating, then the new user
message. After each turn a reply of ``reply_words`` words is written into that user's
history. **The replies are synthetic**: a replayed file cannot contain the live server's
answers, so the history holds fixed text drawn here, and the next turn carries that text
where a real chat would carry the model's answer. The request asks for as many output
tokens as its reply has words (``output_tokens``), so the server holds about as much KV
for the answer as the history then shows.

**Think time as interleaving.** vLLM's custom dataset sends the lines in file order (with
the workload's ``disable_shuffle: true``; otherwise it shuffles them), so time between a
user's turns can only be expressed as other requests sent meanwhile: after each turn but
the last a think time is drawn from ``think``, in *requests of other users*, and the
user's next turn is due once that many other requests have been sent. The send order is
built one request at a time: the most overdue user goes next (ties: the lower user
number); when no user is due, the next user not yet started begins; when every user has
started and none is due, the one due soonest goes anyway, its think time shortened
(there is no other request left to put in between). So a realised gap is the think time
drawn, less only when shortened and more only when several users are due at once;
:class:`Summary` counts both.

**Randomness.** Everything is drawn before the order is built, in a fixed order (user by
user: turns, then per turn the message's length, the reply's, the think time), so a seed
gives the same file on every run. The structure (every count and think time) comes from
``random.Random(seed)`` and the words from a second generator of the same seed, so the
structure does not depend on the vocabulary: the same seed gives the same conversations,
requests and lengths with the built-in words and with a tokenizer's (a word drawn from a
larger vocabulary takes more random bits). Words come from a :class:`Vocabulary` the
caller gives (a list, or a callable index -> word): nothing here knows any tokenizer.

**Distributions** (:func:`parse_dist`): ``N`` or ``fixed:N``; ``uniform:A:B`` (integers,
both ends included); ``geometric:MEAN`` and ``poisson:MEAN``, shifted so that no draw is
below the option's minimum (1 for turns and word counts, 0 for think time) and the mean
is the one given: ``minimum + X`` with ``X`` geometric (failures before a success) or
Poisson of mean ``MEAN - minimum``.

The hit ratio this structure implies, without a cache model, is
:func:`prefixbench.predict.chat_estimate.structural_estimate`.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BUILTIN_WORDS",
    "ChatSpec",
    "ChatTraffic",
    "ChatTrafficError",
    "Conversation",
    "Dist",
    "Request",
    "Summary",
    "Turn",
    "Vocabulary",
    "generate",
    "parse_dist",
]

#: The largest value (or mean) a distribution may have, and the most users or system words.
MAX_VALUE: Final = 100_000
KINDS: Final = "N, fixed:N, uniform:A:B, geometric:MEAN, poisson:MEAN"

_BUILTIN_TEXT: Final = """
able acid aged also area army away baby back ball band bank base bath bear beat bell
belt best bird blow blue boat body bone book boot born both bowl bulk burn bush busy
cake call calm camp card care case cash cast cell chat chip city clay club coal coat
code cold cook cool cope copy core corn cost crew crop dark data date dawn deal dear
deep deer desk diet disk dock door dose down draw drop drum dual duck dust duty each
earn ease east easy edge else even ever exam face fact fair fall farm fast fear feed
feel file fill film find fine fire firm fish five flag flat flow folk food foot form
fort four free from fuel full fund gain game gate gear gift girl give glad goal gold
golf good gray grid grow gulf hair half hall hand hard harm head hear heat help herb
hero high hill hint hold hole home hope horn host hour huge idea inch into iron item
join jump jury just keen keep kind king knee lake lamp land lane last late lawn lead
leaf lean left lend lens life lift like line link list live load loan lock long look
loop lord loud love luck made mail main make mall many mark mass meal meat menu mild
milk mind mine mode moon more most move much nail name near neck need nest news next
nice nine node none noon norm nose note oven pace pack page pain pair palm park part
"""
#: A neutral vocabulary for when no tokenizer's is given: plain lowercase English words.
BUILTIN_WORDS: Final = tuple(_BUILTIN_TEXT.split())


class ChatTrafficError(ValueError):
    """A bad parameter of the traffic model; one line naming it."""


@dataclass(frozen=True)
class Dist:
    """An integer distribution: ``fixed`` (``a``), ``uniform`` (``a`` .. ``b``), or
    ``geometric`` / ``poisson`` of mean ``mean`` starting at ``a`` (the minimum)."""

    kind: str
    a: int
    b: int = 0
    mean: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.randint(self.a, self.b)
        extra = self.mean - self.a
        if extra <= 0:
            return self.a
        if self.kind == "geometric":  # failures before a success, p = 1 / (extra + 1)
            return self.a + math.floor(math.log(1.0 - rng.random())
                                       / math.log(extra / (extra + 1)))
        count, clock = 0, rng.expovariate(1.0)  # Poisson: arrivals of rate 1 by `extra`
        while clock <= extra:
            count += 1
            clock += rng.expovariate(1.0)
        return self.a + count

    @property
    def expected(self) -> float:
        """The distribution's mean."""
        if self.kind == "fixed":
            return float(self.a)
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        return self.mean


def _number(option: str, text: str, value: str, *, integer: bool) -> float:
    try:
        number = int(value) if integer else float(value)
    except ValueError:
        raise ChatTrafficError(f"{option} {text!r}: {value!r} is not "
                               f"{'an integer' if integer else 'a number'}") from None
    if not math.isfinite(number) or abs(number) > MAX_VALUE:
        raise ChatTrafficError(f"{option} {text!r}: {value} is out of range (at most "
                               f"{MAX_VALUE:,})")
    return number


def parse_dist(text: str, *, minimum: int, option: str) -> Dist:
    """A distribution from its compact form (``5``, ``fixed:5``, ``uniform:2:6``,
    ``geometric:3``, ``poisson:2.5``); no draw is below ``minimum``. ``option`` names
    the setting in the one-line :class:`ChatTrafficError`."""
    kind, *params = text.strip().split(":")
    if not kind:
        raise ChatTrafficError(f"{option} {text!r}: no distribution (known: {KINDS})")
    if not params and kind.lstrip("+-").isdigit():
        kind, params = "fixed", [kind]
    arity = {"fixed": 1, "uniform": 2, "geometric": 1, "poisson": 1}.get(kind)
    if arity is None:
        raise ChatTrafficError(f"{option} {text!r}: unknown distribution {kind!r} "
                               f"(known: {KINDS})")
    if len(params) != arity:
        raise ChatTrafficError(f"{option} {text!r}: {kind} takes {arity} value"
                               f"{'s' if arity > 1 else ''} (known: {KINDS})")
    if kind in ("geometric", "poisson"):
        mean = _number(option, text, params[0], integer=False)
        if mean < minimum:
            raise ChatTrafficError(f"{option} {text!r}: the mean must be >= {minimum}")
        return Dist(kind, minimum, mean=mean)
    a, b = (int(_number(option, text, p, integer=True)) for p in (*params, params[-1])[:2])
    if a < minimum:
        raise ChatTrafficError(f"{option} {text!r}: values must be >= {minimum}")
    if a > b:
        raise ChatTrafficError(f"{option} {text!r}: uniform needs A <= B")
    return Dist(kind, a, b)


@dataclass(frozen=True)
class Vocabulary:
    """Words drawn uniformly: ``word(i)`` for ``i`` in ``[start, stop)``."""

    word: Callable[[int], str]
    start: int
    stop: int

    @classmethod
    def of(cls, words: Sequence[str]) -> Vocabulary:
        return cls(words.__getitem__, 0, len(words))

    def text(self, rng: random.Random, count: int) -> str:
        word, start, stop = self.word, self.start, self.stop
        return " ".join([word(rng.randrange(start, stop)) for _ in range(count)])


@dataclass(frozen=True)
class ChatSpec:
    """The parameters of the conversation model (see the module's docstring)."""

    users: int
    turns: Dist
    system_words: int
    user_words: Dist
    reply_words: Dist
    think: Dist
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.users <= MAX_VALUE:
            raise ChatTrafficError(f"users must be 1 to {MAX_VALUE:,}, got {self.users}")
        if not 0 <= self.system_words <= MAX_VALUE:
            raise ChatTrafficError(f"system words must be 0 to {MAX_VALUE:,}, got "
                                   f"{self.system_words}")
        for name, dist, low in (("turns", self.turns, 1), ("user words", self.user_words, 1),
                                ("reply words", self.reply_words, 1),
                                ("think", self.think, 0)):
            if dist.a < low:
                raise ChatTrafficError(f"{name}: values must be >= {low}")


@dataclass(frozen=True)
class Turn:
    """One turn: the user's message, the synthetic reply written into the history after
    it, and the think time drawn before the user's next turn (0 after the last)."""

    user: str
    user_words: int
    reply: str
    reply_words: int
    think: int


@dataclass(frozen=True)
class Conversation:
    system: str
    system_words: int
    turns: tuple[Turn, ...]

    def messages(self, turn: int) -> list[dict[str, str]]:
        """The request of turn ``turn`` (0-based): the chat so far, then its message."""
        out = [{"role": "system", "content": self.system}] if self.system else []
        for t in self.turns[:turn]:
            out += [{"role": "user", "content": t.user},
                    {"role": "assistant", "content": t.reply}]
        out.append({"role": "user", "content": self.turns[turn].user})
        return out

    def words(self, turn: int) -> int:
        """Words of turn ``turn``'s request (template tokens not counted)."""
        return (self.system_words + self.turns[turn].user_words
                + sum(t.user_words + t.reply_words for t in self.turns[:turn]))


@dataclass(frozen=True)
class Request:
    """One line of the file: user ``user``'s turn ``turn``; ``gap``: requests of other
    users sent since that user's previous turn (``None`` for a first turn)."""

    user: int
    turn: int
    gap: int | None


@dataclass(frozen=True)
class Summary:
    """What a traffic is: counts, prompt lengths in words, think times drawn and sent."""

    users: int
    requests: int
    turns_min: int
    turns_max: int
    prompt_words_mean: float
    prompt_words_max: int
    think_mean: float | None
    gap_mean: float | None
    shortened: int
    lengthened: int

    def lines(self) -> list[tuple[str, str]]:
        """``(label, text)`` lines for a person."""
        out = [("traffic", f"{self.users:,} users, {self.turns_min}-{self.turns_max} turns "
                           f"each, {self.requests:,} requests"),
               ("prompt length", f"mean {self.prompt_words_mean:,.0f} words, max "
                                 f"{self.prompt_words_max:,} (template tokens not counted)")]
        if self.think_mean is not None and self.gap_mean is not None:
            out.append(("think time", f"mean {self.think_mean:.2f} requests of other users "
                        f"drawn, {self.gap_mean:.2f} sent; {self.lengthened} turns later "
                        f"than drawn (users due at once), {self.shortened} earlier (no "
                        f"other user left to put in between)"))
        return out


@dataclass(frozen=True)
class ChatTraffic:
    spec: ChatSpec
    conversations: tuple[Conversation, ...]
    order: tuple[Request, ...]

    def messages(self, index: int) -> list[dict[str, str]]:
        req = self.order[index]
        return self.conversations[req.user].messages(req.turn)

    def lines(self) -> Iterator[dict[str, object]]:
        """The file's objects in send order: ``{"messages": [...], "output_tokens": N}``."""
        for req in self.order:
            conv = self.conversations[req.user]
            yield {"messages": conv.messages(req.turn),
                   "output_tokens": conv.turns[req.turn].reply_words}

    def jsonl(self) -> bytes:
        return "".join(json.dumps(line, ensure_ascii=True) + "\n"
                       for line in self.lines()).encode("ascii")

    def prompt_words(self) -> list[int]:
        return [self.conversations[r.user].words(r.turn) for r in self.order]

    def summary(self) -> Summary:
        turns = [len(c.turns) for c in self.conversations]
        words = self.prompt_words()
        later = [(r.gap, self.conversations[r.user].turns[r.turn - 1].think)
                 for r in self.order if r.gap is not None]
        return Summary(
            users=len(turns), requests=len(self.order), turns_min=min(turns),
            turns_max=max(turns), prompt_words_mean=sum(words) / len(words),
            prompt_words_max=max(words),
            think_mean=sum(t for _, t in later) / len(later) if later else None,
            gap_mean=sum(g for g, _ in later) / len(later) if later else None,
            shortened=sum(g < t for g, t in later), lengthened=sum(g > t for g, t in later))


def _conversation(spec: ChatSpec, rng: random.Random, text_rng: random.Random,
                  vocab: Vocabulary, system: str) -> Conversation:
    turns = []
    for k in range(count := spec.turns.draw(rng)):
        user_words = spec.user_words.draw(rng)
        user = vocab.text(text_rng, user_words)
        reply_words = spec.reply_words.draw(rng)
        reply = vocab.text(text_rng, reply_words)
        think = spec.think.draw(rng) if k < count - 1 else 0
        turns.append(Turn(user, user_words, reply, reply_words, think))
    return Conversation(system, spec.system_words, tuple(turns))


def _send_order(conversations: Sequence[Conversation]) -> list[Request]:
    due: list[tuple[int, int]] = []  # (position from which the next turn is due, user)
    next_turn = [0] * len(conversations)
    last = [0] * len(conversations)
    started = 0
    order: list[Request] = []
    total = sum(len(c.turns) for c in conversations)
    for position in range(total):
        if (due and due[0][0] <= position) or started == len(conversations):
            _, user = heapq.heappop(due)
        else:
            user, started = started, started + 1
        turn = next_turn[user]
        order.append(Request(user, turn, position - last[user] - 1 if turn else None))
        last[user], next_turn[user] = position, turn + 1
        if turn + 1 < len(conversations[user].turns):
            heapq.heappush(due, (position + 1 + conversations[user].turns[turn].think, user))
    return order


def generate(spec: ChatSpec, vocabulary: Vocabulary | Sequence[str]) -> ChatTraffic:
    """The conversations of ``spec`` and their send order; deterministic for a seed."""
    vocab = vocabulary if isinstance(vocabulary, Vocabulary) else Vocabulary.of(vocabulary)
    if vocab.stop <= vocab.start:
        raise ChatTrafficError("the vocabulary is empty")
    rng = random.Random(spec.seed)  # noqa: S311 - reproducible traffic, not secrets
    text_rng = random.Random(f"words:{spec.seed}")  # noqa: S311 - the words, apart
    system = vocab.text(text_rng, spec.system_words)
    conversations = tuple(_conversation(spec, rng, text_rng, vocab, system)
                          for _ in range(spec.users))
    return ChatTraffic(spec, conversations, tuple(_send_order(conversations)))
