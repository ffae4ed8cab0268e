"""Progress of long steps: a callback type, and a one-line bar for a terminal.

Long steps take ``progress: Progress | None``, a callable ``progress(stage, done, total)``
(called from the thread that runs the step, now and then, never per item):

* :data:`READING`: a file is checked, ``done`` / ``total`` in bytes;
* :data:`ENCODING`: prompts are encoded and replayed, ``done`` / ``total`` in requests.

:class:`ProgressBar` is such a callable. It draws on its stream (stderr by default) only
when that is a terminal (or when forced), and only once the run has taken ``delay``
seconds, so short runs, pipes and tests see nothing::

    with ProgressBar() as bar:
        whatif.predict(workload, block_size=16, tokenizer_dir=tok, progress=bar)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self, TextIO

__all__ = ["ENCODING", "READING", "Progress", "ProgressBar"]

#: ``progress(stage, done, total)``.
Progress = Callable[[str, int, int], None]

READING: Final = "reading"
ENCODING: Final = "encoding"

#: How each stage is shown: label, unit, units per count.
_STAGES: Final[dict[str, tuple[str, str, int]]] = {
    READING: ("reading", "MiB", 1 << 20),
    ENCODING: ("encoding + replaying", "prompts", 1),
}


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class ProgressBar:
    """A :data:`Progress` callback drawing ``label [#####-----] 50% done/total unit, rate,
    time left`` on one line (carriage returns, no escape sequences), cleared by
    :meth:`close`.

    ``force`` draws even when the stream is not a terminal; ``delay`` is how long a run
    goes before the bar appears; ``interval`` the least time between redraws.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        force: bool = False,
        delay: float = 2.0,
        interval: float = 0.2,
        width: int = 24,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.enabled = force or _isatty(self.stream)
        self.delay = delay
        self.interval = interval
        self.width = width
        self._clock = clock
        self._started = clock()
        self._drawn_at: float | None = None
        self._shown = 0
        self._stage: str | None = None
        self._stage_at = self._started
        self._stage_done = 0

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if stage != self._stage:
            self._stage, self._stage_at, self._stage_done = stage, now, done
        if now - self._started < self.delay:
            return
        if (self._drawn_at is not None and now - self._drawn_at < self.interval
                and done < total):
            return
        self._drawn_at = now
        self._draw(self.line(stage, done, total, now))

    def line(self, stage: str, done: int, total: int, now: float) -> str:
        """The text drawn for ``done`` of ``total`` at time ``now``."""
        label, unit, scale = _STAGES.get(stage, (stage, "", 1))
        fraction = min(done / total, 1.0) if total > 0 else 1.0
        filled = int(fraction * self.width)
        text = (f"{label} [{'#' * filled}{'-' * (self.width - filled)}] {fraction:4.0%} "
                f"{done / scale:,.0f}/{total / scale:,.0f} {unit}").rstrip()
        elapsed = now - self._stage_at
        rate = (done - self._stage_done) / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            text += f", {rate / scale:,.0f} {unit}/s".rstrip()
            if done < total:
                text += f", {_duration((total - done) / rate)} left"
        return text

    def _draw(self, text: str) -> None:
        pad = " " * max(self._shown - len(text), 0)
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self._shown = len(text)

    def close(self) -> None:
        """Erase the bar (if it was drawn)."""
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
