"""Whether a supervisor's daemon is alive, judged without trusting any clock but the reader's own (pure).

Two hosts' wall clocks may disagree by minutes, and a paused VM's clock jumps, so a heartbeat's
wall-clock time says little to a reader on another host. What does hold: a heartbeat carries a
sequence number that its daemon increments on every write, and a reader that watches it on its own
monotonic clock knows for how long it has *seen* no beat (:class:`HeartbeatWatch`). The owner fence
(:mod:`.fence`), which every record write passes through, is that reader for everyone; a reader that
cannot reach it falls back to the record's wall-clock age, and says so.

A pid means something only in the pid namespace it came from, on the boot it came from: two
containers with one hostname must not judge each other's pids (:class:`ProcessIdentity`).
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass

__all__ = ["Liveness", "HeartbeatWatch", "judge", "ProcessIdentity", "pid_alive"]


class Liveness(enum.Enum):
    """How a supervisor's heartbeat looks to a reader.

    ALIVE: beating. STALE: missed a few beats, not yet past the grace period (a daemon busy, or just
    killed). ORPHANED: silent for longer than the grace period; the daemon is gone and ``gc`` may
    collect what it owns. DETACHED: the daemon exited on purpose and left its job running for the
    next start (``stop --detach``, ``on_sigterm = "detach"``); ``gc`` leaves it alone.
    """

    ALIVE = "alive"
    STALE = "stale"
    ORPHANED = "orphaned"
    DETACHED = "detached"


# A daemon that missed this many beats in a row is shown as stale.
_STALE_BEATS = 3


def judge(silent_s: float, interval_s: float, grace_s: float, detached: bool = False) -> Liveness:
    """The liveness of a heartbeat not seen to advance for ``silent_s`` (on one clock)."""
    if detached:
        return Liveness.DETACHED
    if silent_s > grace_s:
        return Liveness.ORPHANED
    if silent_s > _STALE_BEATS * interval_s:
        return Liveness.STALE
    return Liveness.ALIVE


@dataclass
class HeartbeatWatch:
    """One reader's view of a heartbeat: its last sequence number, and when (on the reader's
    monotonic clock) the reader saw it change. The writer's clocks never enter."""

    seq: int | None = None
    changed_at: float | None = None

    def observe(self, seq: int, now: float) -> None:
        if seq != self.seq or self.changed_at is None:
            self.seq, self.changed_at = seq, now

    def silent_for(self, now: float) -> float:
        """For how long no new beat was seen (0 before the first observation)."""
        return 0.0 if self.changed_at is None else max(0.0, now - self.changed_at)


@dataclass(frozen=True)
class ProcessIdentity:
    """Where a pid is meaningful: the host, its boot, and the pid namespace the process runs in."""

    host: str
    boot_id: str
    pid_namespace: str
    pid: int

    @classmethod
    def current(cls) -> ProcessIdentity:
        return cls(socket.gethostname(), _read_boot_id(), _pid_namespace(), os.getpid())

    def shares_pid_space(self, other: ProcessIdentity) -> bool:
        """Both pids live in one pid namespace on one boot (unknown namespaces never match)."""
        return bool(self.boot_id and self.pid_namespace) and (self.host, self.boot_id, self.pid_namespace) == (
            other.host,
            other.boot_id,
            other.pid_namespace,
        )

    def provably_gone(self, reader: ProcessIdentity | None = None) -> bool:
        """True only when the reader can check this pid (same pid space) and it has no process. A
        reused pid makes a gone daemon look alive, never the reverse: the caller then waits the grace."""
        reader = reader or ProcessIdentity.current()
        if not reader.shares_pid_space(self) or self.pid == reader.pid:
            return False
        return not pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists in this pid namespace (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
