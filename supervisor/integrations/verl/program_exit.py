"""Supervision ends before Ray does when a verl program exits.

A verl program never tears its groups down: its ``main`` returns and the interpreter exits. Ray's own
atexit handler (registered by ``ray.init``) then disconnects the driver, and a supervision loop still
running sees every call fail and reports its group FAILED: a false alarm at the end of every run.
atexit runs its handlers last-registered first, so one registered when the first group is supervised
(after the program's ``ray.init``) stops every live supervisor, then the process's group host (its
heartbeat would write through a disconnected Ray), before Ray shuts down. The actors are left alone:
their owner (the program's Ray job, or ``supervisor run``) removes them.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

__all__ = ["stop_at_exit"]

_lock = threading.Lock()
_live: weakref.WeakSet[Any] = weakref.WeakSet()
_registered = False


def stop_at_exit(supervisor: Any) -> None:
    """Stop ``supervisor`` (a running GroupSupervisor) when the interpreter exits, before Ray does."""
    global _registered
    with _lock:
        _live.add(supervisor)
        if not _registered:
            atexit.register(_stop_all)
            _registered = True


def _stop_all() -> None:
    with _lock:
        supervisors = list(_live)
    for supervisor in supervisors:
        supervisor.stop()
    from .host import made_host

    host = made_host()
    if host is not None:
        host.close()
