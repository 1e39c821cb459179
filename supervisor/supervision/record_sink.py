"""Where a supervised group's state is persisted: a sink the loop writes through, never a hook.

The daemon keeps a record of every rank's state and of each group's rendezvous, so that a daemon
SIGKILLed at any moment re-adopts a consistent job. The supervision loop calls
:meth:`RecordSink.write_through` at every change of rank state or rendezvous, *before* the change is
visible (to a call, to an actor, to a recovery task): an explicit step of the loop, so the guarantee
does not depend on which hooks an owner installed. A group without an owner record uses
:data:`NO_RECORD`.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["RecordSink", "NO_RECORD"]


class RecordSink(Protocol):
    def write_through(self, group: str) -> None:
        """Persist ``group``'s supervision state now (the supervisor's rank views and the group's
        rendezvous, read by the owner); a failed write is the owner's to report and retry."""
        ...


class _NoRecord:
    def write_through(self, group: str) -> None:
        pass


NO_RECORD: RecordSink = _NoRecord()
