"""States of a supervised group and of its ranks, and the only transitions allowed between them.

Rank (:class:`WorkerState`)::

    RUNNING --(failed)--> FAILED --(replacement started)--> RESTARTING --(actor up)--> INITIALIZING
    RUNNING --(its node drains: hand-over at a call boundary)--> RESTARTING (--(successor failed)--> RUNNING)
       ^  \\                 ^                                   |                         |
       |   \\                +---(transient error: retried)------+                         |
       |    +--(rank 0 got a new rendezvous: re-init)--> INITIALIZING ---(init done)------+--> RUNNING

Group (:class:`GroupState`): RUNNING while every rank runs, RECOVERING while any does not, FAILED
when the restart budget runs out or a replacement cannot initialise, STOPPED when supervision ends.
FAILED and STOPPED are terminal.

:func:`check_rank_transition` and :func:`check_group_transition` are the one place that says which
moves are legal; the reconcile loop calls them for every move it plans.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..placement.drift import is_drifted

__all__ = [
    "GroupState",
    "WorkerState",
    "InvalidTransition",
    "check_rank_transition",
    "check_group_transition",
]


class GroupState(enum.StrEnum):
    RUNNING = "running"
    RECOVERING = "recovering"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in (GroupState.FAILED, GroupState.STOPPED)


class WorkerState(enum.StrEnum):
    RUNNING = "running"
    FAILED = "failed"  # observed failed; its replacement waits for a backoff or the budget
    RESTARTING = "restarting"  # its replacement is being placed and started
    INITIALIZING = (
        "initializing"  # its actor is up; the init method (or a new rendezvous) is pending or running
    )


class InvalidTransition(AssertionError):
    """A move the state machine does not allow: a bug in the loop, never a runtime condition."""


_RANK_MOVES: dict[WorkerState, frozenset[WorkerState]] = {
    # RUNNING -> RESTARTING: a hand-over (its node drains; the old actor serves until its successor is in).
    WorkerState.RUNNING: frozenset({WorkerState.FAILED, WorkerState.INITIALIZING, WorkerState.RESTARTING}),
    WorkerState.FAILED: frozenset({WorkerState.RESTARTING}),
    # RESTARTING -> RUNNING: a hand-over whose successor failed; the rank keeps its old actor.
    WorkerState.RESTARTING: frozenset({WorkerState.FAILED, WorkerState.INITIALIZING, WorkerState.RUNNING}),
    WorkerState.INITIALIZING: frozenset(
        {WorkerState.RUNNING, WorkerState.FAILED}
    ),  # FAILED: its init ran out of attempts
}

_GROUP_MOVES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.RUNNING: frozenset({GroupState.RECOVERING, GroupState.FAILED, GroupState.STOPPED}),
    GroupState.RECOVERING: frozenset({GroupState.RUNNING, GroupState.FAILED, GroupState.STOPPED}),
    GroupState.FAILED: frozenset(),
    GroupState.STOPPED: frozenset(),
}


def check_rank_transition(rank: int, current: WorkerState, target: WorkerState) -> None:
    if target not in _RANK_MOVES[current]:
        raise InvalidTransition(f"rank {rank}: {current.value} -> {target.value} is not a transition")


def check_group_transition(current: GroupState, target: GroupState) -> None:
    if target is not current and target not in _GROUP_MOVES[current]:
        raise InvalidTransition(f"group: {current.value} -> {target.value} is not a transition")


@dataclass
class RankStatus:
    """What is known of one rank: the supervisor's live view, and what the daemon's record stores (one
    class for both; the record keeps ``state`` as its value)."""

    rank: int
    state: WorkerState = WorkerState.RUNNING
    generation: int = 0
    node_id: str | None = None
    original_node: str | None = None
    restarts: int = 0
    last_failure: str | None = None

    @property
    def drifted(self) -> bool:
        return is_drifted(self.original_node, self.node_id)
