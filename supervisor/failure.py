"""What a failure is: the one classification of errors, and the reasons a rank is replaced.

Detection (death watches, heartbeats), supervised calls, recovery tasks, ``init_group``, adoption and
the dispatch metrics all ask :func:`classify_error`, so they agree on what is a death, a hang, a failed
constructor, the user's own exception, or an error a later attempt may not meet. What each kind
means for them is a property of the kind, never an ``isinstance`` test at the caller:

* :attr:`ErrorKind.rank_failed`: the rank itself failed (it died, its constructor raised, or it
  cannot be reached for now: a hang once that lasts, see ``supervision.death_verdict``);
* :attr:`ErrorKind.transient`: a recovery step that met it may succeed when tried again (a name Ray
  has not released yet, bundles still being re-placed, a GCS that answers late, a new actor that
  died while starting): retried with backoff and charged to the restart budget, never escalated alone;
* :attr:`ErrorKind.dispatch_failure`: the ``reason`` label of ``supervisor_dispatch_failures_total``.

:class:`FailureReason` says why a rank is replaced (the ``reason`` label of
``supervisor_worker_restarts_total``); it is a string enum, so its members are their label values.

May import: ``errors`` (checked by ``tests/test_layers.py``); every layer may import it.
"""

from __future__ import annotations

import enum

from .errors import ActorStartError, GroupFailedError, WorkerFailedError

__all__ = ["FailureReason", "ErrorKind", "DispatchFailure", "classify_error", "is_transient"]


class FailureReason(enum.StrEnum):
    """Why a rank is replaced (the ``reason`` label of ``supervisor_worker_restarts_total``)."""

    DIED = "died"  # the actor process died (SIGKILL, OOM kill, os._exit, ray.kill)
    HUNG = "hung"  # alive, but a call did not answer within its timeout, or its heartbeat stopped
    NODE_LOST = "node_lost"  # its node was removed or died
    INIT_FAILED = "init_failed"  # its replacement failed to initialise
    DRAINED = "drained"  # its node is being drained: handed over to a successor (never charged, never a failure)


class DispatchFailure(enum.Enum):
    """The ``reason`` label of ``supervisor_dispatch_failures_total``."""

    RAISED = "raised"  # the method raised, or the call's arguments did not fit its mode
    WORKER_FAILED = "worker_failed"  # a rank died or hung during the call
    GROUP_FAILED = "group_failed"  # the group is FAILED (restart budget exhausted)


class ErrorKind(enum.Enum):
    """What an error says about the rank or the step that met it."""

    UNAVAILABLE = "unavailable"  # the actor cannot be reached for now; maybe alive
    DIED = "died"  # the actor's process is gone (or a supervised call's rank failed)
    INIT_FAILED = "init_failed"  # the actor's constructor raised
    USER_ERROR = "user_error"  # the method raised: the rank is fine
    TIMED_OUT = "timed_out"  # no answer in time (a name not released, bundles not re-placed, a call)
    TRANSIENT = "transient"  # the cluster answered badly for now (GCS, RPC, an object lost, an actor not started)
    GROUP_FAILED = "group_failed"  # the group is FAILED: nothing will run on it
    OTHER = "other"  # anything else: a bug, or a condition no retry changes

    @property
    def rank_failed(self) -> bool:
        """The rank itself failed (a detector's death, a supervised call's failed rank)."""
        return self in (ErrorKind.UNAVAILABLE, ErrorKind.DIED, ErrorKind.INIT_FAILED)

    @property
    def transient(self) -> bool:
        """A later attempt of the same recovery step may not meet it."""
        return self in (ErrorKind.UNAVAILABLE, ErrorKind.DIED, ErrorKind.INIT_FAILED, ErrorKind.TIMED_OUT, ErrorKind.TRANSIENT)

    @property
    def failure_reason(self) -> FailureReason | None:
        """Why a rank that failed so is replaced (None: not a failure of the rank)."""
        return {ErrorKind.DIED: FailureReason.DIED, ErrorKind.INIT_FAILED: FailureReason.INIT_FAILED, ErrorKind.UNAVAILABLE: FailureReason.HUNG}.get(self)

    @property
    def dispatch_failure(self) -> DispatchFailure:
        if self is ErrorKind.GROUP_FAILED:
            return DispatchFailure.GROUP_FAILED
        if self.rank_failed or self is ErrorKind.TIMED_OUT:
            return DispatchFailure.WORKER_FAILED  # a rank died, or did not answer
        return DispatchFailure.RAISED


def classify_error(exc: BaseException) -> ErrorKind:
    """The kind of ``exc`` (see :class:`ErrorKind`); Ray's errors first, then the library's, then the rest."""
    import ray

    if isinstance(exc, GroupFailedError):
        return ErrorKind.GROUP_FAILED
    if isinstance(exc, WorkerFailedError):
        return ErrorKind.DIED
    if isinstance(exc, ray.exceptions.ActorUnavailableError):
        return ErrorKind.UNAVAILABLE
    if isinstance(exc, ray.exceptions.RayActorError):
        return ErrorKind.INIT_FAILED if getattr(exc, "actor_init_failed", False) else ErrorKind.DIED
    if isinstance(exc, ray.exceptions.RayTaskError):
        return ErrorKind.USER_ERROR  # checked before the others: Ray re-raises a user's TimeoutError as both
    if isinstance(exc, TimeoutError):  # Ray's GetTimeoutError is one
        return ErrorKind.TIMED_OUT
    if isinstance(exc, ConnectionError | ActorStartError | ray.exceptions.RpcError | ray.exceptions.RaySystemError | ray.exceptions.ObjectLostError):
        return ErrorKind.TRANSIENT
    return ErrorKind.OTHER


def is_transient(exc: BaseException) -> bool:
    """True for errors a later attempt of the same recovery step may not meet."""
    return classify_error(exc).transient
