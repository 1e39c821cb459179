"""Restart decisions for supervised groups, OTP-style: strategy, intensity, backoff (pure).

A :class:`RestartPolicy` says how a group reacts when ranks fail:

* ``one_for_one``: replace only the failed ranks, each into its own bundle;
* ``one_for_all``: rebuild every rank (a collective group that must re-form);
* intensity: at most ``max_restarts`` restarts within ``restart_window_s`` (a sliding window); one
  more failure makes the group FAILED: no more restarts, the owner decides;
* backoff: consecutive restarts of the same rank wait ``backoff_initial_s * 2**(n-1)`` (capped).

The rules here are pure (the reconcile loop's :func:`~supervisor.supervision.reconcile.decide`
applies them); :func:`within_window` is the one window rule, also used for the daemon's record. Every
rule reads only the restarts inside the window, so :func:`prune_to_window` keeps a history bounded over
a multi-week run without changing any decision.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from ..failure import FailureReason  # the rule's input; defined with the classification

__all__ = [
    "RestartStrategy", "FailureReason", "RestartPolicy", "Failure", "RestartRecord", "within_window",
    "restarts_in_window", "budget_allows", "consecutive_restarts", "budget_message", "prune_to_window",
]  # fmt: skip


class RestartStrategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"


@dataclass(frozen=True)
class RestartPolicy:
    """How a supervised group reacts to failed ranks.

    Attributes:
        strategy: one_for_one or one_for_all.
        max_restarts: restarts allowed within ``restart_window_s``; 0 means never restart.
        restart_window_s: length of the sliding window.
        backoff_initial_s, backoff_max_s: delay before the n-th consecutive restart of one rank.
    """

    strategy: RestartStrategy = RestartStrategy.ONE_FOR_ONE
    max_restarts: int = 10
    restart_window_s: float = 600.0
    backoff_initial_s: float = 0.0
    backoff_max_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.restart_window_s <= 0:
            raise ValueError(f"restart_window_s must be > 0, got {self.restart_window_s}")

    def backoff_s(self, consecutive: int) -> float:
        """Delay before the ``consecutive``-th restart in a row of one rank (1-based)."""
        if consecutive <= 1 or self.backoff_initial_s <= 0:
            return 0.0
        return min(self.backoff_max_s, self.backoff_initial_s * 2 ** (consecutive - 2))


@dataclass(frozen=True)
class Failure:
    """A rank observed failed."""

    rank: int
    reason: FailureReason
    detail: str = ""
    node_id: str | None = None


@dataclass(frozen=True)
class RestartRecord:
    """A restart that happened: which rank, why, when (monotonic seconds)."""

    rank: int
    reason: FailureReason
    at: float


def within_window(at: float, window_s: float, now: float) -> bool:
    """Whether a restart at ``at`` still counts at ``now`` (the sliding window, boundary included)."""
    return at >= now - window_s


def prune_to_window(
    history: Sequence[RestartRecord], policy: RestartPolicy, now: float
) -> tuple[RestartRecord, ...]:
    """The restarts of ``history`` that still count at ``now``, in order.

    Dropping the rest changes no later decision as long as the clock never goes back: a restart outside
    the window at ``now`` is outside it at every later time too, and every rule here counts only restarts
    inside the window.
    """
    return tuple(r for r in history if within_window(r.at, policy.restart_window_s, now))


def restarts_in_window(history: Sequence[RestartRecord], policy: RestartPolicy, now: float) -> int:
    """Restarts of ``history`` inside the sliding window that ends at ``now``."""
    return sum(1 for r in history if within_window(r.at, policy.restart_window_s, now))


def budget_allows(history: Sequence[RestartRecord], restarts: int, policy: RestartPolicy, now: float) -> bool:
    """Whether ``restarts`` more restarts fit the budget (``max_restarts`` within the window)."""
    return restarts_in_window(history, policy, now) + restarts <= policy.max_restarts


def consecutive_restarts(history: Sequence[RestartRecord], rank: int, policy: RestartPolicy, now: float) -> int:
    """Restarts of ``rank`` inside the window (what its next backoff doubles on)."""
    return sum(1 for r in history if r.rank == rank and within_window(r.at, policy.restart_window_s, now))


def budget_message(history: Sequence[RestartRecord], policy: RestartPolicy, now: float, what: str) -> str:
    """The one wording of an exhausted budget (the group's failure, its error and the daemon's exit)."""
    in_window = restarts_in_window(history, policy, now)
    return (
        f"restart budget exhausted: {in_window} restart(s) in the last {policy.restart_window_s:g}s "
        f"(max_restarts={policy.max_restarts}); {what}"
    )
