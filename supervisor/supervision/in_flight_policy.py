"""What a blocking call of a supervised group does when one of its ranks fails while it runs (a pure
policy: :func:`resolve_in_flight_policy`). :mod:`.supervised_call` carries it out."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.worker.registration import MethodSpec

__all__ = ["InFlightPolicy", "resolve_in_flight_policy"]


class InFlightPolicy(enum.Enum):
    """What a blocking group call does when one of its ranks dies while it runs.

    RETRY: wait for the replacement and run that rank's shard again on it (idempotent methods only).
    RAISE: raise :class:`~supervisor.errors.WorkerFailedError` with the survivors' results.
    """

    RETRY = "retry"
    RAISE = "raise"


def resolve_in_flight_policy(spec: MethodSpec, group_default: InFlightPolicy | None) -> InFlightPolicy:
    """The method's own choice wins, then the group's, then RETRY for idempotent methods, else RAISE."""
    if spec.on_rank_failure is not None:
        return InFlightPolicy(spec.on_rank_failure)
    if group_default is not None:
        return group_default
    return InFlightPolicy.RETRY if spec.idempotent else InFlightPolicy.RAISE
