"""One failure classifier: what a Ray error, or a call that did not answer, says about a rank, and
which errors of a recovery step are transient.

Detection (death watches, heartbeats), supervised calls, recovery tasks, ``init_group`` and adoption all ask
here, so they agree on what is a death, a hang, a lost node, a failed constructor, or only a rank
that cannot be reached for now.

* ``ActorUnavailableError``: unreachable, not known dead (a partition, a busy raylet). Transient for
  at most ``probe_timeout_s`` (:class:`UnavailableClock`), then a hang.
* ``RayActorError`` raised by the actor's creation task: its constructor failed (``init_failed``).
* Any other ``RayActorError``: the process died. Whether it died with its node is asked of the GCS
  (:func:`judge_death`): a death the GCS has not recorded yet, on a node it still calls alive, is
  usually a node being lost, so it is judged again until the GCS knows, for at most
  ``probe_timeout_s``.
* A ``RayTaskError`` is the user's exception from the method: not a failure of the rank.

A recovery step talks to the GCS and to actors that are being created: a name Ray has not released
yet, a placement group still being re-placed, a GCS that answers late, an actor that dies while it
starts. None of these says the group cannot run (:func:`is_transient`): they are retried with backoff
and charged to the restart budget; an exhausted budget fails the group.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from ..errors import ActorStartError
from .restart_policy import FailureReason

__all__ = ["ErrorKind", "classify_error", "DeathVerdict", "judge_death", "UnavailableClock", "is_transient"]


class ErrorKind(enum.Enum):
    UNAVAILABLE = "unavailable"  # unreachable for now; maybe alive
    DIED = "died"  # the process is gone
    INIT_FAILED = "init_failed"  # its constructor raised
    USER_ERROR = "user_error"  # the method raised: the rank is fine
    OTHER = "other"  # not an actor error (a GCS or object-store error)


def classify_error(exc: BaseException) -> ErrorKind:
    import ray

    if isinstance(exc, ray.exceptions.ActorUnavailableError):
        return ErrorKind.UNAVAILABLE
    if isinstance(exc, ray.exceptions.RayActorError):
        return ErrorKind.INIT_FAILED if getattr(exc, "actor_init_failed", False) else ErrorKind.DIED
    if isinstance(exc, ray.exceptions.RayTaskError):
        return ErrorKind.USER_ERROR
    return ErrorKind.OTHER


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


def is_transient(exc: BaseException) -> bool:
    """True for errors a later attempt of the same recovery step may not meet."""
    import ray

    transient: tuple[type[BaseException], ...] = (
        TimeoutError,  # a name not released, bundles not re-placed, a rendezvous probe unanswered (and Ray's GetTimeoutError)
        ConnectionError,
        ActorStartError,  # the new actor died or did not come up in time
        ray.exceptions.RayActorError,
        ray.exceptions.RpcError,
        ray.exceptions.RaySystemError,
        ray.exceptions.ObjectLostError,
    )
    return isinstance(exc, transient)
