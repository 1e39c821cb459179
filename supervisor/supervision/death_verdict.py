"""What a death or a silence means: the verdict on a rank whose death watch fired, and how long an
unreachable rank is given before it counts as hung. (What an error *is* is :mod:`supervisor.failure`'s.)

* ``ActorUnavailableError``: unreachable, not known dead (a partition, a busy raylet). Transient for
  at most ``probe_timeout_s`` (:class:`UnavailableClock`), then a hang.
* ``RayActorError`` raised by the actor's creation task: its constructor failed (``init_failed``).
* Any other ``RayActorError``: the process died. Whether it died with its node is asked of the GCS
  (:func:`judge_death`): a death the GCS has not recorded yet, on a node it still calls alive, is
  usually a node being lost, so it is judged again until the GCS knows, for at most
  ``probe_timeout_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..failure import ErrorKind, FailureReason

__all__ = ["DeathVerdict", "judge_death", "UnavailableClock"]


@dataclass(frozen=True)
class DeathVerdict:
    """The cause of a death once known (``reason``), or None while the GCS has not confirmed it."""

    reason: FailureReason | None
    detail: str


def judge_death(
    kind: ErrorKind,
    detail: str,
    node_id: str | None,
    alive_nodes: Collection[str],
    actor_dead_in_gcs: bool,
    waited_s: float,
    patience_s: float,
) -> DeathVerdict:
    """Why a rank died, from the GCS's view of its node and its actor (pure).

    Args:
        kind, detail: what Ray said when it failed the rank's death watch (:func:`classify_error`).
        node_id: the node it ran on (None: unknown).
        alive_nodes: nodes the GCS calls alive now.
        actor_dead_in_gcs: the GCS records the actor as DEAD.
        waited_s: how long this death has been waiting for the GCS to confirm it.
        patience_s: how long to wait for that (then it is a plain death).
    """
    if node_id is not None and node_id not in alive_nodes:
        return DeathVerdict(FailureReason.NODE_LOST, detail)
    if kind is ErrorKind.INIT_FAILED:
        return DeathVerdict(FailureReason.INIT_FAILED, detail)
    if actor_dead_in_gcs or waited_s >= patience_s:
        return DeathVerdict(FailureReason.DIED, detail)
    return DeathVerdict(None, detail)


@dataclass
class UnavailableClock:
    """How long each incarnation has been reported unavailable in a row; past ``patience_s`` it is a hang.

    Keys are whatever names one incarnation (``(rank, generation)``).
    """

    patience_s: float
    clock: Callable[[], float]
    _since: dict[object, float] = field(default_factory=dict)

    def unavailable(self, key: object) -> float | None:
        """Record an "unavailable" answer; returns how long it has lasted once that is a hang, else None."""
        now = self.clock()
        since = self._since.setdefault(key, now)
        if now - since < self.patience_s:
            return None
        del self._since[key]
        return now - since

    def answered(self, key: object) -> None:
        self._since.pop(key, None)

    def forget(self, predicate: Callable[[object], bool]) -> None:
        for key in [k for k in self._since if predicate(k)]:
            del self._since[key]
