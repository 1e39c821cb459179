"""A standby's CPU priority: lowered while it starts and warms up, restored when it takes over a rank.

A standby is speculative work. Its start (a process, its imports, the warm-up) competes for the
node's CPUs with the ranks that are running, and where CPUs are scarce that slows every step for as
long as it lasts (on this project's 2-core test machine, steps ran about 30 % slower for the 8 s a
standby took to start). At a lower priority it takes what the ranks leave.

Two levers, both per thread on Linux: the nice value, and the ``SCHED_IDLE`` policy. A nice value
alone does little beside Ray's workers, which Ray starts at nice 15: at 19 a standby still gets about
40 % of a rank's share when they compete, and a rank that wakes up waits for the standby's slice to
end. A ``SCHED_IDLE`` thread runs only when no other thread wants the CPU, and a waking rank preempts
it at once (sched(7)); on the 2-core machine it halved what a standby's start cost the steps beside it.

Every thread of the process is set (threads started later inherit their creator's). Going back needs
``CAP_SYS_NICE`` or an ``RLIMIT_NICE`` that allows the original nice value (for the policy as well:
an unprivileged thread may leave ``SCHED_IDLE`` when its nice value is within that limit): without
either a lowered standby could never be restored, and would serve as a slow rank, so it is not
lowered at all. Elsewhere than on Linux nothing is changed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Lowered", "lower", "restore", "can_restore"]

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


@dataclass(frozen=True)
class Lowered:
    """What :func:`lower` changed, for :func:`restore`: the original nice value and scheduling policy."""

    nice: int
    policy: int | None  # None: the policy was left alone


def lower(increment: int, sched_idle: bool = False) -> Lowered | None:
    """Raise every thread's nice value by ``increment`` (at most to 19) and, with ``sched_idle``, put
    every thread under ``SCHED_IDLE``; returns what to :func:`restore`, or None when nothing was
    changed (nothing asked, not Linux, or no way back)."""
    if (increment <= 0 and not sched_idle) or not sys.platform.startswith("linux"):
        return None
    original = os.getpriority(os.PRIO_PROCESS, 0)  # the calling thread's
    if not can_restore(original):
        return None
    policy = os.sched_getscheduler(0) if sched_idle else None
    if policy == os.SCHED_IDLE:  # already idle (the parent's choice): not ours to undo
        policy = None
    _set_all(min(NICE_MAX, original + max(0, increment)), None if policy is None else os.SCHED_IDLE)
    return Lowered(original, policy)


def restore(lowered: Lowered | None) -> None:
    """Set every thread back to what :func:`lower` found (None: it changed nothing). The nice value
    first: leaving ``SCHED_IDLE`` without privilege needs a nice value within ``RLIMIT_NICE``."""
    if lowered is not None:
        _set_all(lowered.nice, lowered.policy)


def _set_all(nice: int, policy: int | None) -> None:
    for tid in _threads():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            if policy is not None:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
        except ProcessLookupError:  # the thread ended meanwhile
            pass
