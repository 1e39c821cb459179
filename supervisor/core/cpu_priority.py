"""A standby's CPU priority: lowered while it starts and warms up, restored when it takes over a rank.

A standby is speculative work. Its start (a process, its imports, the warm-up) competes for the
node's CPUs with the ranks that are running, and where CPUs are scarce that slows every step for as
long as it lasts (on this project's 2-core test machine, steps ran about 30 % slower for the 8 s a
standby took to start). At a lower priority it takes what the ranks leave.

Linux gives each thread its own nice value, so every thread of the process is set (threads started
later inherit their creator's). Raising the priority back needs ``CAP_SYS_NICE`` or an
``RLIMIT_NICE`` that allows it: without either a lowered standby could never be restored, and would
serve as a slow rank, so it is not lowered at all. Elsewhere than on Linux nothing is changed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["lower", "restore", "can_restore"]

NICE_MAX = 19
CAP_SYS_NICE = 23  # bit of the capability sets in /proc/self/status


def _threads() -> list[int]:
    return [int(tid) for tid in os.listdir("/proc/self/task")]


def can_restore(original: int) -> bool:
    """Whether this process may set its nice value back to ``original`` once it raised it."""
    if _has_cap_sys_nice():
        return True
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    # RLIMIT_NICE allows a nice value down to 20 - limit (getrlimit(2)); RLIM_INFINITY allows any.
    return soft == resource.RLIM_INFINITY or 20 - soft <= original


def _has_cap_sys_nice() -> bool:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    return False


def lower(increment: int) -> int | None:
    """Raise every thread's nice value by ``increment`` (at most to 19); returns the value to
    :func:`restore`, or None when nothing was changed (no increment, not Linux, or no way back)."""
    if increment <= 0 or not sys.platform.startswith("linux"):
        return None
    original = os.getpriority(os.PRIO_PROCESS, 0)  # the calling thread's
    if not can_restore(original):
        return None
    lowered = min(NICE_MAX, original + increment)
    _set_all(lowered)
    return original


def restore(original: int | None) -> None:
    """Set every thread's nice value back to ``original`` (None: it was never lowered)."""
    if original is not None:
        _set_all(original)


def _set_all(nice: int) -> None:
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:  # the thread ended meanwhile
            pass
