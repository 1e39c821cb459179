"""What this process knows of GCS outages: whether the GCS is away now, and how many outages ended.

A daemon's GCS watch (:mod:`supervisor.daemon.gcs_watch`) reports every ping here. Detection reads it
before judging heartbeats: while the GCS is away, nobody is judged; once an outage ends, every rank's
silence restarts from then, because a rank's own heartbeat writes waited for the GCS too (and may
resume a few seconds after the reader's reads do). Without a watch (the library alone), a heartbeat
read that fails does the same for the reader's own outages.
"""

from __future__ import annotations

import threading

__all__ = ["note", "state"]

_lock = threading.Lock()
_ended = 0  # outages that ended
_away = False


def note(reachable: bool) -> None:
    """One ping's result."""
    global _ended, _away
    with _lock:
        if reachable and _away:
            _ended += 1
        _away = not reachable


def state() -> tuple[int, bool]:
    """``(outages ended, away now)``."""
    with _lock:
        return _ended, _away
