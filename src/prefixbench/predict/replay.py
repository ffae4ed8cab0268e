"""The replay engine of the what-if: requests, in send order, through a fresh
:class:`prefixbench.engines.cachesim.PrefixCacheSim` (or, for a server running vLLM's hybrid
KV-cache manager, :class:`prefixbench.engines.hybridsim.HybridCacheSim`: every function takes
a ``cache_model``, default full attention), counted as a :class:`Prediction`. Every function
also takes a ``serving`` (:class:`prefixbench.engines.schedconfig.Serving`, default one request
at a time); above concurrency 1 the requests go through the scheduler model,
:class:`prefixbench.engines.schedsim.SchedulerSim` (or its hybrid-manager subclass,
:class:`prefixbench.engines.schedhybrid.HybridSchedulerSim`).

:func:`replay_requests` replays token id arrays already built (prefix_repetition, the
served expectation). :func:`replay_sent` encodes custom prompts on worker threads and
replays them on the calling thread, in send order:

Custom prompts are read as a stream, twice:
:func:`prefixbench.engines.custom_index.index_file` checks every line and keeps only where
each prompt is (~25 bytes a line), then the prompts are read back in send order, a job of
up to :data:`JOB_BYTES` / :data:`JOB_PROMPTS` at a time, encoded and replayed. At most
``2 * workers`` jobs are in flight, so memory is the index and the send order (about 65
bytes a line), those jobs' texts and encodings, and the cache model (bounded by
``capacity_blocks``, or growing with the distinct blocks when unbounded), not the file: a
million-line, 190 MB file peaks at ~110 MB of RSS.
``workers`` threads encode (the tokenizers library releases the GIL;
:func:`prefixbench.engines.tokenizer.serial_batches` keeps each batch on its thread)
while the calling thread replays, in send order; the result does not depend on
``workers``. ``workers=1`` runs everything on the calling thread.

"""

from __future__ import annotations

import os
from array import array
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

from prefixbench.engines.cachemodel import FULL_ATTENTION, CacheModel
from prefixbench.engines.cachesim import CapacityError
from prefixbench.engines.platforms import scheduler_model
from prefixbench.engines.progress import ENCODING, Progress
from prefixbench.engines.schedconfig import SERIAL, Serving
from prefixbench.engines.tokenizer import Tokenizer, serial_batches
from prefixbench.predict.notes import concurrency_note, serving_note
from prefixbench.predict.segments import PrefillChunks, PrefillCount

if TYPE_CHECKING:
    from prefixbench.engines.schedsim import SchedulerSim

__all__ = [
    "JOB_BYTES",
    "JOB_PROMPTS",
    "Kept",
    "Prediction",
    "concurrency_note",
    "default_workers",
    "new_scheduler",
    "replay_curve",
    "replay_requests",
    "replay_sent",
    "replay_sent_curve",
    "serving_note",
    "usable_cores",
]

#: Custom prompts are read, encoded and handed to the replay in jobs of at most this many
#: bytes of prompt text (and :data:`JOB_PROMPTS` prompts): big enough that a batch call
#: costs nothing extra (the tokenizer is as fast on 8 prompts a batch as on 256), small
#: enough that the jobs in flight take little memory and short runs keep every thread
#: busy (on 2 cores, 300 ~1800-token prompts took 1.30x the tokenizer alone with 256 KiB
#: jobs, 1.44x with 1 MiB; 5,000 took 1.18x with either).
JOB_BYTES: Final = 1 << 18
JOB_PROMPTS: Final = 256


@dataclass(frozen=True)
class Prediction:
    """A predicted token hit ratio, or why there is none (``ratio`` None, ``note``)."""

    ratio: float | None
    hit_tokens: int = 0
    query_tokens: int = 0
    requests: int = 0
    evicted_blocks: int = 0
    method: str = "none"
    block_size: int | None = None
    capacity_blocks: int | None = None
    #: prefix_repetition only: the block-aligned formula (unbounded cache).
    formula_ratio: float | None = None
    note: str | None = None
    #: Blocks the cache holds after the last request; unbounded, the working set: every
    #: distinct full prompt block the workload ever cached.
    cached_blocks: int | None = None
    #: Above concurrency 1: the lowest and highest ratio over arrival timings
    #: (:func:`prefixbench.predict.arrivals.arrival_band`), and which timings gave them.
    band: tuple[float, float] | None = None
    band_note: str | None = None
    #: Neuron (``Serving.prefill_segment``): the prefill chunks run and skipped, and
    #: their padded tokens (:mod:`prefixbench.predict.segments`).
    prefill: PrefillChunks | None = None
    #: Requests the server would refuse (a prompt longer than ``Serving.max_model_len``):
    #: not replayed, counted here.
    rejected: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Replay:
    """Requests replayed one at a time through a fresh cache, counted as a Prediction."""

    serving: Serving = SERIAL

    def __init__(self, block_size: int, capacity_blocks: int | None,
                 cache_model: CacheModel = FULL_ATTENTION, serving: Serving = SERIAL) -> None:
        self.sim = cache_model.sim(block_size, capacity_blocks)
        self.segments = PrefillCount(serving.prefill_segment, serving.prefill_buckets)
        self.cache_model = cache_model
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.hits = 0
        self.requests = 0
        self.rejected = 0
        self.max_model_len = serving.max_model_len

    def refuses(self, tokens: array[int]) -> bool:
        """Whether the server refuses it (prompt over ``max_model_len``): counted only."""
        refused = self.max_model_len is not None and len(tokens) > self.max_model_len
        self.rejected += refused
        return refused

    def run(self, tokens: array[int], output_len: int) -> None:
        if self.refuses(tokens):
            return
        hit = self.sim.run(tokens, output_len if self.capacity_blocks is not None else 0)
        self.hits += hit
        self.requests += 1
        self.segments.add(len(tokens), hit)

    def finish(self) -> None:
        """Serve what was sent and not yet served (nothing, one at a time)."""

    def _method(self, method: str) -> str:
        if self.serving.scheduled or self.serving.async_scheduling:
            method = f"{method}, {self.serving.describe()}"
        if self.cache_model.kind == "full":
            return method
        return f"{method}, {self.cache_model.describe()} KV-cache model"

    def _totals(self) -> tuple[int, int, int, int | None]:
        """Hit tokens, query tokens, evicted blocks and cached blocks so far."""
        sim = self.sim
        return self.hits, sim.query_tokens_total, sim.evicted_blocks, sim.cached_blocks

    def prediction(self, method: str, note: str | None) -> Prediction:
        method = self._method(method)
        hits, queries, evicted, cached = self._totals()
        return Prediction(ratio=hits / queries if queries else 0.0, hit_tokens=hits,
                          query_tokens=queries, requests=self.requests,
                          evicted_blocks=evicted, method=method,
                          block_size=self.block_size, capacity_blocks=self.capacity_blocks,
                          note=note, cached_blocks=cached, prefill=self.segments.totals(),
                          rejected=self.rejected)

    def refused(self, method: str, exc: CapacityError) -> Prediction:
        return Prediction(ratio=None, method=self._method(method), block_size=self.block_size,
                          capacity_blocks=self.capacity_blocks,
                          note=f"a request does not fit the cache: {exc}")


def new_scheduler(block_size: int, capacity_blocks: int | None, cache_model: CacheModel,
                  serving: Serving) -> SchedulerSim:
    """A fresh scheduler model of the server ``cache_model`` and ``serving`` describe
    (:func:`prefixbench.engines.platforms.scheduler_model`)."""
    return scheduler_model(block_size, capacity_blocks, cache_model, serving)


class _SchedReplay(_Replay):
    """Requests sent by a client at ``serving.concurrency`` to a fresh server modelled
    step by step (:class:`prefixbench.engines.schedsim.SchedulerSim`): the ready check
    one at a time, then the warmups, then the rest, each phase finished before the next.
    Hits are counted at first admission, as vLLM's counters count them."""

    def __init__(self, block_size: int, capacity_blocks: int | None,
                 cache_model: CacheModel, serving: Serving) -> None:
        self.sched = new_scheduler(block_size, capacity_blocks, cache_model, serving)
        self.serving = serving
        self.cache_model = cache_model
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.hits = 0
        self.requests = 0
        self.rejected = 0
        self.max_model_len = serving.max_model_len
        self.segments = PrefillCount(serving.prefill_segment, serving.prefill_buckets)
        self.prompt_lens = array("I")  # each request's, for the prefill chunks

    def run(self, tokens: array[int], output_len: int) -> None:
        if self.refuses(tokens):
            return
        self.prompt_lens.append(len(tokens))
        serving, sched, n = self.serving, self.sched, self.requests
        if n and n in (serving.ready, serving.ready + serving.warmups):
            sched.drain()  # the ready check and the warmups end before what follows
        sched.send(tokens, output_len,
                   concurrency=1 if n < serving.ready else serving.concurrency)
        self.requests += 1

    def finish(self) -> None:
        self.sched.drain()
        if self.segments.chunk is not None:  # each request's hit at first admission
            for i, prompt_len in enumerate(self.prompt_lens):
                self.segments.add(prompt_len, self.sched.hit_tokens(i))

    def _totals(self) -> tuple[int, int, int, int | None]:
        """As one at a time, but an unbounded cache's cached blocks are not the working
        set here (generated tokens' blocks and copies count too): ``None``."""
        sched = self.sched
        return (sched.hit_tokens_total, sched.query_tokens_total, sched.evicted_blocks,
                None if self.capacity_blocks is None else sched.cached_blocks)


def _replay_for(block_size: int, capacity_blocks: int | None, cache_model: CacheModel,
                serving: Serving) -> _Replay:
    """A fresh replay: one request at a time, or through the scheduler model above
    concurrency 1 (and for the hybrid manager under async scheduling, whose admission
    cap and sliding-window frees differ even one request at a time)."""
    if serving.scheduled or (serving.async_scheduling and cache_model.kind == "hybrid"):
        return _SchedReplay(block_size, capacity_blocks, cache_model, serving)
    return _Replay(block_size, capacity_blocks, cache_model, serving)


def replay_requests(
    prompts: Sequence[array[int]],
    output_lens: Sequence[int],
    *,
    block_size: int,
    capacity_blocks: int | None,
    method: str,
    note: str | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
) -> Prediction:
    """Replay requests (token id arrays, in send order) through a fresh cache, as
    ``serving`` sends them (default one at a time)."""
    replay = _replay_for(block_size, capacity_blocks, cache_model, serving)
    try:
        for tokens, out in zip(prompts, output_lens, strict=True):
            replay.run(tokens, out)
        replay.finish()
    except CapacityError as exc:
        return replay.refused(method, exc)
    return replay.prediction(method, note)


def usable_cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)  # pragma: no cover - no sched_getaffinity


def default_workers() -> int:
    """Threads that encode custom prompts by default: one more than :func:`usable_cores`
    (a thread waiting for the GIL, to read prompts or hand its token ids over, then
    leaves no core idle: measured 3-5% faster on 2 cores), or 1 on a single core (all
    on the calling thread)."""
    cores = usable_cores()
    return cores + 1 if cores > 1 else 1


def _jobs(order: Sequence[int], sizes: Sequence[int]) -> list[Sequence[int]]:
    """``order`` cut into consecutive jobs of at most JOB_BYTES (one prompt at least) and
    JOB_PROMPTS prompts."""
    jobs: list[Sequence[int]] = []
    start = size = 0
    for end, i in enumerate(order, start=1):
        size += sizes[i]
        if size >= JOB_BYTES or end - start >= JOB_PROMPTS:
            jobs.append(order[start:end])
            start, size = end, 0
    if start < len(order):
        jobs.append(order[start:])
    return jobs


Encoded = list[array[int]]


def _encoded(jobs: Sequence[Sequence[int]], encode: Callable[[Sequence[int]], Encoded],
             workers: int) -> Generator[Encoded]:
    """``encode(job)`` of every job, in order: on the calling thread for one worker,
    else on ``workers`` threads with at most ``2 * workers`` jobs in flight."""
    if workers <= 1 or len(jobs) <= 1:
        yield from map(encode, jobs)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="whatif-encode") as pool:
        todo = iter(jobs)
        pending: deque[Future[Encoded]] = deque(
            pool.submit(encode, job) for job in islice(todo, 2 * workers))
        try:
            while pending:
                result = pending.popleft().result()
                pending.extend(pool.submit(encode, job) for job in islice(todo, 1))
                yield result
        finally:
            for future in pending:
                future.cancel()


class Kept:
    """The requests a replay sent, in order, kept for another pass (the range over
    arrival timings: :func:`prefixbench.predict.arrivals.arrival_band`) while they hold
    at most ``budget`` prompt tokens; past it, none (``overflow``)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.prompts: list[array[int]] = []
        self.outputs: list[int] = []
        self.tokens = 0
        self.overflow = False

    def add(self, tokens: array[int], output_len: int) -> None:
        self.tokens += len(tokens)
        if self.overflow or self.tokens > self.budget:
            self.overflow, self.prompts, self.outputs = True, [], []
            return
        self.prompts.append(tokens)
        self.outputs.append(output_len)


class _Fan:
    """The same requests replayed through one fresh cache per capacity at once (a
    capacity curve encodes each prompt once). A capacity too small for a request is
    refused from then on; the others go on."""

    def __init__(self, block_size: int, capacities: Sequence[int | None],
                 cache_model: CacheModel = FULL_ATTENTION, serving: Serving = SERIAL
                 ) -> None:
        self.replays = [_replay_for(block_size, c, cache_model, serving) for c in capacities]
        self.refusals: list[CapacityError | None] = [None] * len(self.replays)
        self.requests = 0

    def run(self, tokens: array[int], output_len: int) -> None:
        for i, replay in enumerate(self.replays):
            if self.refusals[i] is None:
                try:
                    replay.run(tokens, output_len)
                except CapacityError as exc:
                    self.refusals[i] = exc
        self.requests += 1

    def finish(self) -> None:
        for i, replay in enumerate(self.replays):
            if self.refusals[i] is None:
                try:
                    replay.finish()
                except CapacityError as exc:
                    self.refusals[i] = exc

    @property
    def all_refused(self) -> bool:
        return all(r is not None for r in self.refusals)

    def predictions(self, method: str, note: str | None) -> list[Prediction]:
        return [replay.prediction(method, note) if refusal is None
                else replay.refused(method, refusal)
                for replay, refusal in zip(self.replays, self.refusals, strict=True)]


def replay_sent(
    order: Sequence[int],
    sizes: Sequence[int],
    outs: Sequence[int],
    texts_of: Callable[[Sequence[int]], list[str]],
    tokenizer: Tokenizer,
    *,
    block_size: int,
    capacity_blocks: int | None,
    pre_requests: int,
    workers: int | None,
    progress: Progress | None,
    note: str | None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    keep: Kept | None = None,
) -> Prediction:
    """Encode the prompts ``order`` names (``texts_of``; ``sizes`` weigh them into jobs)
    and replay them in that order, the first one ``pre_requests`` more times first, as
    ``serving`` sends them (into ``keep`` too, if given)."""
    return replay_sent_curve(order, sizes, outs, texts_of, tokenizer, block_size=block_size,
                             capacities=[capacity_blocks], pre_requests=pre_requests,
                             workers=workers, progress=progress, note=note,
                             cache_model=cache_model, serving=serving, keep=keep)[0]


def replay_sent_curve(
    order: Sequence[int],
    sizes: Sequence[int],
    outs: Sequence[int],
    texts_of: Callable[[Sequence[int]], list[str]],
    tokenizer: Tokenizer,
    *,
    block_size: int,
    capacities: Sequence[int | None],
    pre_requests: int,
    workers: int | None,
    progress: Progress | None,
    note: str | None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
    keep: Kept | None = None,
) -> list[Prediction]:
    """:func:`replay_sent` through one cache per capacity (``None``: unbounded), each
    prompt encoded once; one prediction per capacity, in order."""
    method = "cachesim replay, custom prompts tokenized"
    fan = _Fan(block_size, capacities, cache_model, serving)

    def send(tokens: array[int], output_len: int) -> None:
        fan.run(tokens, output_len)
        if keep is not None:
            keep.add(tokens, output_len)

    total = len(order) + (pre_requests if order else 0)
    jobs = _jobs(order, sizes)
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")

    def encode(job: Sequence[int]) -> Encoded:
        return tokenizer.encode_arrays(texts_of(job))

    with serial_batches(), closing(_encoded(jobs, encode, workers)) as encoded:
        for job, arrays in zip(jobs, encoded, strict=True):
            if not fan.requests:
                for _ in range(pre_requests):
                    send(arrays[0], outs[job[0]])
            for i, tokens in zip(job, arrays, strict=True):
                send(tokens, outs[i])
            if fan.all_refused:
                break
            if progress is not None:
                progress(ENCODING, fan.requests, total)
    fan.finish()
    return fan.predictions(method, note)


def replay_curve(
    prompts: Sequence[array[int]],
    output_lens: Sequence[int],
    *,
    block_size: int,
    capacities: Sequence[int | None],
    method: str,
    note: str | None = None,
    cache_model: CacheModel = FULL_ATTENTION,
    serving: Serving = SERIAL,
) -> list[Prediction]:
    """:func:`replay_requests` through one cache per capacity, in one pass."""
    fan = _Fan(block_size, capacities, cache_model, serving)
    for tokens, out in zip(prompts, output_lens, strict=True):
        fan.run(tokens, out)
        if fan.all_refused:
            break
    fan.finish()
    return fan.predictions(method, note)
