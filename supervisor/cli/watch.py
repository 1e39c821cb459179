"""Ctrl-C for the ``--watch`` loops of ``supervisor status`` and ``supervisor events``."""

from __future__ import annotations

import signal
import time
from types import FrameType, TracebackType

__all__ = ["WatchStop"]

# How often a waiting watch looks at its flag: the delay between a Ctrl-C and the end of the watch.
_POLL_S = 0.05


class WatchStop:
    """The first SIGINT ends the loop at its next update boundary; a second one interrupts at once.

    An interrupt raised inside a cluster call can unwind through Ray's client while it holds a lock
    that ``ray.shutdown()`` then waits for, so the watch's exit could hang; a flag the loop reads
    between updates never lands inside one. The handler only sets a plain attribute: anything that
    takes a lock (``threading.Event.set``) could deadlock with the main thread it interrupted.
    """

    def __init__(self) -> None:
        self._stopped = False
        self._previous: object = None

    def __enter__(self) -> WatchStop:
        self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
        return kind is KeyboardInterrupt  # the second Ctrl-C ends the watch too, quietly

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._stopped:
            raise KeyboardInterrupt
        self._stopped = True

    def wait(self, seconds: float) -> bool:
        """Sleep until the next update; True once the watch should end."""
        deadline = time.monotonic() + seconds
        while not self._stopped and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(_POLL_S, left))
        return self._stopped
