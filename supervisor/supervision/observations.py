"""What a group's reconcile loop observes between two passes (the input of :func:`~.reconcile.decide`).

Failures of running ranks, the outcomes of recovery tasks (:mod:`.recovery`), where the group's
bundles and standbys are, and which of its nodes drain. Plain frozen data: the supervisor builds
them from Ray, tests build them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..placement.standby import BundleRef
from .init_policy import RankAttempt
from .restart_policy import Failure

__all__ = ["RankFailed", "ReplacementDone", "InitDone", "TaskCrashed", "PlacementSeen", "DrainSeen", "Observation"]


@dataclass(frozen=True)
class RankFailed:
    """A running rank's current incarnation failed (the observer already dropped stale reports).
    ``during_update``: a call that changes state (not idempotent) was running on the group."""

    failure: Failure
    during_update: bool = False


@dataclass(frozen=True)
class ReplacementDone:
    """A replacement task ended: the actor is up (``error`` and ``fatal`` None), or it failed for a
    transient reason (``error``: tried again), or for good (``fatal``: the group fails)."""

    rank: int
    error: str | None = None
    fatal: str | None = None


@dataclass(frozen=True)
class InitDone:
    """The init task ended: every step of its order ran (``attempts`` all ok, nothing ``unreachable``,
    no ``error``), or it stopped at the first step that did not.

    Attributes:
        ranks: the order's ranks.
        attempts: the init call on each rank that ran it (its outcome; empty: no init ran).
        unreachable: survivors that could not take the new rendezvous (dead or stuck): replaced next.
        error: a transient error of the task itself (the same ranks try again after a backoff).
        fatal: the group cannot recover (e.g. its state is lost).
        carried: what the task captured for a stateful restore, kept for the next round when this one
            failed (opaque here: the executor hands it back).
    """

    ranks: tuple[int, ...]
    attempts: tuple[RankAttempt, ...] = ()
    unreachable: tuple[int, ...] = ()
    error: str | None = None
    fatal: str | None = None
    carried: Any = field(default=None, compare=False)

    @property
    def complete(self) -> bool:
        return not self.unreachable and self.error is None and self.fatal is None and all(a.outcome.ok for a in self.attempts)


@dataclass(frozen=True)
class TaskCrashed:
    """A recovery task raised where it never should (a bug): the ranks it owned cannot recover."""

    task: str
    ranks: tuple[int, ...]
    error: str


@dataclass(frozen=True)
class PlacementSeen:
    """Where the group's bundles and ready standbys are now (for choosing where replacements go)."""

    rank_bundles: Mapping[int, BundleRef]
    bundle_nodes: Mapping[BundleRef, str | None]
    standbys: Mapping[BundleRef, str]
    free: tuple[BundleRef, ...]
    starting: tuple[BundleRef, ...] = ()  # standbys not ready yet (successors on their way)


@dataclass(frozen=True)
class DrainSeen:
    """Nodes being drained, and the ranks on them (observed on every pass while any drains).

    Attributes:
        ranks: each rank on a draining node (running or not: one being re-initialised is still there),
            with its node's deadline (loop clock; None: none).
        nodes: every draining node (no successor goes there).
        at_boundary: no call of the group is in flight and new ones are held (a hand-over may start).
        can_start_successors: standbys can be started for the group (a Worker subclass that created
            its actors): a free spare bundle is then room for a successor.
    """

    ranks: Mapping[int, float | None]
    nodes: frozenset[str]
    at_boundary: bool = False
    can_start_successors: bool = True


Observation = RankFailed | ReplacementDone | InitDone | TaskCrashed | PlacementSeen | DrainSeen
