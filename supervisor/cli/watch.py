"""Ctrl-C for the ``--watch`` loops of ``supervisor status`` and ``supervisor events``."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

__all__ = ["WatchStop"]


class WatchStop:
    """The first SIGINT ends the loop at its next update boundary; a second one interrupts at once.

    An interrupt raised inside a cluster call can unwind through Ray's client while it holds a lock
    that ``ray.shutdown()`` then waits for, so the watch's exit could hang; a flag the loop reads
    between updates never lands inside one.
    """

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._previous: object = None

    def __enter__(self) -> WatchStop:
        self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]
        return kind is KeyboardInterrupt  # the second Ctrl-C ends the watch too, quietly

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._stopped.is_set():
            raise KeyboardInterrupt
        self._stopped.set()

    def wait(self, seconds: float) -> bool:
        """Sleep until the next update; True once the watch should end."""
        return self._stopped.wait(seconds)
