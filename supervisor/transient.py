"""Which errors of a recovery step are transient: retried with backoff and charged to the restart
budget, never a failure of the group by themselves (one place, so detection, recovery and adoption
agree).

A recovery step talks to the GCS and to actors that are being created: a name Ray has not released
yet, a placement group still being re-placed, a GCS that answers late, an actor that dies while it
starts. None of these says the group cannot run; an exhausted restart budget does.
"""

from __future__ import annotations

__all__ = ["is_transient"]


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
