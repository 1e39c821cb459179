"""A stateful group's replay log: the calls that changed its state since its newest snapshot.

A group's state is a function of its snapshot and the mutating calls made on it since, so a group that
lost a rank at an unknown step can go back to its own newest complete snapshot and run those calls
again, in order, on every rank: no other group is touched and the driver is not told.

Each call is logged under the step of the snapshot requested before it (its *epoch*): a snapshot at
step ``s`` captures every rank before the calls of epoch ``s``, so a restore of step ``s`` replays the
calls of epochs ``s`` and later. Calls are logged when they complete (the call in flight when a rank
dies is retried by its caller, never replayed). The log keeps references to the arguments the driver
already holds (no copy); it drops what precedes the newest complete snapshot, and remembers from which
epoch it is complete, so a restore of an older snapshot (the newest one's copies lost) is refused
rather than replayed with a gap.

Pure: no Ray, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.state_tree import state_nbytes

__all__ = ["LoggedCall", "ReplayLog", "ReplayGap", "arguments_nbytes"]

PerRank = Mapping[int, tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True)
class LoggedCall:
    """One completed mutating call: the method and each rank's arguments, as they were submitted."""

    method: str
    per_rank: PerRank
    epoch: int  # the step of the snapshot requested before the call
    nbytes: int  # what its arguments hold in the driver (shared arguments counted once)


class ReplayGap(Exception):
    """The log cannot bring a restore of ``step`` forward: calls made after it were dropped."""

    def __init__(self, step: int, complete_from: int | None) -> None:
        self.step, self.complete_from = step, complete_from
        since = (
            "nothing was logged"
            if complete_from is None
            else f"the log holds the calls since step {complete_from} only"
        )
        super().__init__(f"a restore of step {step} cannot be replayed forward: {since}")


class ReplayLog:
    """The mutating calls of one group since its newest complete snapshot (see the module)."""

    def __init__(self) -> None:
        self._calls: list[LoggedCall] = []
        self._epoch: int | None = None  # the step of the newest snapshot requested (None: none yet)
        self._complete_from: int | None = None  # every call of this epoch and later is here

    @property
    def calls(self) -> tuple[LoggedCall, ...]:
        return tuple(self._calls)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._calls)

    def __len__(self) -> int:
        return len(self._calls)

    def snapshot_requested(self, step: int) -> None:
        """A snapshot of step ``step`` was submitted: the calls that follow belong to its epoch."""
        self._epoch = step
        if self._complete_from is None:  # the first snapshot: the log is complete from here on
            self._complete_from = step

    def append(self, method: str, per_rank: PerRank) -> LoggedCall | None:
        """Log a completed call (None, not logged: no snapshot was requested yet, so no restore
        could use it)."""
        if self._epoch is None:
            return None
        call = LoggedCall(method, dict(per_rank), self._epoch, arguments_nbytes(per_rank))
        self._calls.append(call)
        return call

    def snapshot_complete(self, step: int) -> None:
        """The snapshot of ``step`` is complete: the calls before its epoch are no longer needed."""
        if self._complete_from is not None and step > self._complete_from:
            self._calls = [c for c in self._calls if c.epoch >= step]
            self._complete_from = step

    def rolled_back(self, step: int) -> None:
        """The job went back to step ``step`` (a job-wide rollback): the driver makes the calls of
        epoch ``step`` and later again, and they are logged again."""
        self._calls = [c for c in self._calls if c.epoch < step]
        # Every rank holds the snapshot of ``step`` now: the log is complete from there on (at least).
        self._epoch = step
        self._complete_from = step if self._complete_from is None else min(self._complete_from, step)

    def since(self, step: int) -> tuple[LoggedCall, ...]:
        """The calls to replay, in order, after a restore of step ``step``.

        Raises:
            ReplayGap: calls made after ``step`` are no longer (or were never) logged.
        """
        if self._complete_from is None or step < self._complete_from:
            raise ReplayGap(step, self._complete_from)
        return tuple(c for c in self._calls if c.epoch >= step)


def arguments_nbytes(per_rank: PerRank) -> int:
    """Bytes of tensors and arrays the arguments hold in the driver, each object counted once (a
    one-to-all call passes one batch to every rank). Object references count nothing: their values
    live in the object store."""
    seen: set[int] = set()
    total = 0
    for args, kwargs in per_rank.values():
        for value in (*args, *kwargs.values()):
            if id(value) in seen:
                continue
            seen.add(id(value))
            total += _value_nbytes(value)
    return total


def _value_nbytes(value: Any) -> int:
    batch = getattr(value, "batch", None)
    if batch is not None and hasattr(value, "non_tensor_batch"):  # a DataProto: its TensorDict and its arrays
        tensors = dict(batch.items()) if hasattr(batch, "items") else {}
        return state_nbytes(tensors) + state_nbytes(dict(value.non_tensor_batch))
    return state_nbytes(value)
