"""The reconcile loop's state and its plans: what :func:`~.reconcile.decide` reads and returns.

:class:`LoopState` is the one record of a group's supervision (each rank's :class:`RankView`, the
restart history, the recovery in progress); :class:`Plan` is what one pass decided, for the
supervisor to carry out. A rank's recovery is the sequence REPLACE (a replacement per rank) ->
:class:`RecoveryStep` CAPTURE, RENDEZVOUS, INIT, RESTORE, REPLAY (one :class:`InitOrder`) -> SERVE.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..placement.standby import Replacement
from .drain import DrainOutcome
from .init_policy import RankAttempt
from .restart_policy import Failure, RestartRecord
from .states import GroupState, WorkerState

__all__ = [
    "RankView", "LoopState", "initial_state", "RankMove", "StateRestore", "RecoveryStep", "InitOrder", "DrainNote", "Plan",
]  # fmt: skip


@dataclass(frozen=True)
class RankView:
    """What the loop knows of one rank.

    Attributes:
        failure: what the rank is being recovered from (None while it runs).
        failed_at: when that failure was observed (loop clock).
        not_before: FAILED: earliest start of its replacement (backoff).
        charged: its replacements count against the budget (False: rebuilt because of another rank).
        replaced: runs a new actor that has not served yet (its generation changes when it runs).
        in_task: a recovery task owns the rank now (its replacement, or the init it is part of).
        handover: its recovery is a hand-over (its node drains; its old actor runs until the successor serves).
        drain_said: the outcome of its node's notice already reported for this actor (said once).
        init_done: INITIALIZING: its init succeeded; it serves with the other ranks of its recovery.
        init_failures: failed init calls since it last served (charged against ``init_policy.attempts``).
        last_attempt: its latest init call in this recovery (the failure message lists them).
        plain_start: its next replacement starts as a plain process (its init failed: a fork may be why).
        generation: its incarnation: one more each time a new actor of it starts serving (calls and
            reports name the incarnation they saw, so a stale one is told apart).
        restarts: replacements started for it so far (the ``restarts`` column of ``status``).
        last_failure: ``"reason: detail"`` of its latest failure.
    """

    rank: int
    state: WorkerState = WorkerState.RUNNING
    failure: Failure | None = None
    failed_at: float = 0.0
    not_before: float = 0.0
    charged: bool = True
    replaced: bool = False
    in_task: bool = False
    handover: bool = False
    drain_said: DrainOutcome | None = None
    init_done: bool = False
    init_failures: int = 0
    last_attempt: RankAttempt | None = None
    plain_start: bool = False
    generation: int = 0
    restarts: int = 0
    last_failure: str | None = None


@dataclass(frozen=True)
class LoopState:
    group: GroupState
    ranks: tuple[RankView, ...]
    history: tuple[RestartRecord, ...] = ()  # the restarts inside the restart window (older ones are dropped)
    rendezvous_stale: bool = False  # rank 0 runs a new rendezvous that the other ranks have not learnt
    init_running: bool = False
    init_not_before: float = 0.0  # after a transient init error
    failure: str | None = None
    unsettled: frozenset[int] = frozenset()  # ranks not RUNNING (a pass over a large group looks at these only)
    rollback_needed: bool = False  # a stateful group lost state no peer holds: the next init rolls back
    # A stateful re-formation whose init round failed on some rank: its next round restores the same
    # way, from the state captured before the first round (the survivors have re-initialised since).
    pending_restore: StateRestore | None = None
    pending_survivors: tuple[int, ...] = ()


def initial_state(world_size: int, history: Sequence[RestartRecord] = (), restarts: Mapping[int, int] | None = None) -> LoopState:
    """A running group's state; ``history`` and ``restarts`` (per rank) carry over an earlier supervisor's."""
    ranks = tuple(RankView(r, restarts=(restarts or {}).get(r, 0)) for r in range(world_size))
    return LoopState(GroupState.RUNNING, ranks, tuple(history))


@dataclass(frozen=True)
class RankMove:
    rank: int
    source: WorkerState
    target: WorkerState
    failure: Failure | None  # the failure the rank is being recovered from
    new_failure: bool = False  # the move records a failure just observed (not a retry)


class StateRestore(enum.Enum):
    """How a stateful group's state comes back after its init (NONE: a group without state)."""

    NONE = "none"
    PEER = "peer"  # copied from a live rank (taken before it re-initialises)
    ROLLBACK = "rollback"  # every stateful group of the job goes back to the newest common snapshot
    # This group alone goes back to its own newest snapshot and runs its logged mutating calls again.
    REPLAY = "replay"
    # Every rank keeps its own live state across the re-formation: a handed-over rank gets its
    # predecessor's, a survivor its own, a replaced replica a live peer's (taken before the init).
    LIVE = "live"


class RecoveryStep(enum.Enum):
    """The steps of a rank's recovery after its replacement, in the order an init task runs them."""

    CAPTURE = "capture"  # copy the live state a restore will load (before anyone re-initialises)
    RENDEZVOUS = "rendezvous"  # pick a new rendezvous (rank 0 lives on) and/or give it to the ranks
    INIT = "init"  # one round of the init method
    RESTORE = "restore"  # load the state back (a stateful group)
    REPLAY = "replay"  # run the group's logged mutating calls again, in order (after its own snapshot)


@dataclass(frozen=True)
class InitOrder:
    """Run on ``ranks``: first the new rendezvous (``propagate``: to every rank but 0), then the init
    method, then the state restore (and, restoring a group's own snapshot, the replay of its logged
    calls). ``fresh_rendezvous``: rank 0 lives on, yet the collective is
    re-formed, so a new rendezvous is picked on its node and given to every rank. ``survivors``: the
    ranks that ran until this init (a peer restore copies one of them first). ``recapture``: the
    restore's source is captured now (False: a retried round reuses what the first one captured)."""

    ranks: tuple[int, ...]
    propagate: bool
    run_init: bool
    restore: StateRestore = StateRestore.NONE
    fresh_rendezvous: bool = False
    survivors: tuple[int, ...] = ()
    recapture: bool = True
    prior_calls: tuple[int, ...] = ()  # init calls each of ``ranks`` made earlier in this recovery

    @property
    def steps(self) -> tuple[RecoveryStep, ...]:
        """What the task does, in order."""
        steps: list[RecoveryStep] = []
        if self.restore in (StateRestore.PEER, StateRestore.LIVE) and self.recapture:
            steps.append(RecoveryStep.CAPTURE)
        if self.fresh_rendezvous or self.propagate:
            steps.append(RecoveryStep.RENDEZVOUS)
        if self.run_init:
            steps.append(RecoveryStep.INIT)
        if self.restore is not StateRestore.NONE:
            steps.append(RecoveryStep.RESTORE)
        if self.restore is StateRestore.REPLAY:
            steps.append(RecoveryStep.REPLAY)
        return tuple(steps)


@dataclass(frozen=True)
class DrainNote:
    """What became of the notice for one rank (reported once per rank and actor)."""

    rank: int
    outcome: DrainOutcome
    detail: str


@dataclass(frozen=True)
class Plan:
    state: LoopState  # the state once the plan is carried out
    moves: tuple[RankMove, ...] = ()
    restarts: tuple[RestartRecord, ...] = ()  # charged now (replacements started, ranks the init rebuilt)
    replacements: tuple[Replacement, ...] = ()  # start these replacement tasks
    init: InitOrder | None = None  # start this init task
    serving: tuple[int, ...] = ()  # ranks that run again (they are watched again)
    renewed: tuple[int, ...] = ()  # those of them that run a new actor (a new generation)
    escalation: str | None = None  # the group is FAILED, because of this
    wake_at: float | None = None  # the earliest backoff that ends (nothing is due before)
    hold_calls: bool = False  # a hand-over waits for a call boundary: new calls wait until it starts
    successors_wanted: int = 0  # standbys to start off the draining nodes for ranks to hand over
    drain_notes: tuple[DrainNote, ...] = ()
    handed_over: tuple[int, ...] = ()  # of ``renewed``: ranks whose successor took over from a drained node

    @property
    def empty(self) -> bool:
        return not (
            self.moves or self.restarts or self.replacements or self.init or self.serving or self.escalation
            or self.drain_notes
        )
