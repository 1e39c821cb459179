"""Which errors of a recovery step are transient: retried with backoff and charged to the restart
budget, never a failure of the group by themselves (one place, so detection, recovery and adoption
agree).

A recovery step talks to the GCS and to actors that are being created: a name Ray has not released
yet, a placement group still being re-placed, a GCS that answers late, an actor that dies while it
starts. None of these says the group cannot run; an exhausted restart budget does.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["is_transient", "UnavailableClock"]


def is_transient(exc: BaseException) -> bool:
    """True for errors a later attempt of the same recovery step may not meet."""
    import ray

    from .lifecycle import ActorStartError

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


class UnavailableClock:
    """How long each rank (or incarnation: any key) has answered "unavailable" in a row.

    Ray's ``ActorUnavailableError`` means unreachable, not known dead (a partition, a busy raylet):
    transient for at most ``limit_s``, after which the rank is hung. One rule for the supervisor's
    sentinels and probes and for supervised calls.
    """

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._since: dict[Hashable, float] = {}

    def unavailable(self, key: Hashable, now: float) -> float | None:
        """Note one "unavailable" answer; returns how long it has lasted once that exceeds the limit
        (and starts over for the key), else None."""
        since = self._since.setdefault(key, now)
        if now - since < self.limit_s:
            return None
        del self._since[key]
        return now - since

    def answered(self, key: Hashable) -> None:
        """The key answered (or was replaced): its next "unavailable" starts a new run."""
        self._since.pop(key, None)
