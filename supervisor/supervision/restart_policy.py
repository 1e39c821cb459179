"""Restart decisions for supervised groups, OTP-style: strategy, intensity, backoff (pure).

A :class:`RestartPolicy` says how a group reacts when ranks fail:

* ``one_for_one``: replace only the failed ranks, each into its own bundle;
* ``one_for_all``: rebuild every rank (a collective group that must re-form);
* intensity: at most ``max_restarts`` restarts within ``restart_window_s`` (a sliding window); one
  more failure makes the group FAILED: no more restarts, the owner decides;
* backoff: consecutive restarts of the same rank wait ``backoff_initial_s * 2**(n-1)`` (capped).

:func:`decide` maps (failures observed now, restart history, clock) to a :class:`Decision`. No Ray
calls, so every rule is unit-tested and a 10,000-worker tick costs microseconds per worker.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "RestartStrategy", "FailureReason", "RestartPolicy", "Failure", "RestartRecord", "Decision", "DecisionKind",
    "decide", "restarts_in_window", "budget_allows",
]  # fmt: skip


class RestartStrategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"


class FailureReason(enum.Enum):
    """Why a rank is replaced (the ``reason`` label of ``supervisor_worker_restarts_total``)."""

    DIED = "died"  # the actor process died (SIGKILL, OOM kill, os._exit, ray.kill)
    HUNG = "hung"  # alive, but a call or probe did not answer within its timeout
    NODE_LOST = "node_lost"  # its node was removed or died
    INIT_FAILED = "init_failed"  # its replacement failed to initialise


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


class DecisionKind(enum.Enum):
    NOOP = "noop"
    RESTART = "restart"
    ESCALATE = "escalate"


@dataclass(frozen=True)
class Decision:
    """What to do about the failures observed.

    Attributes:
        kind: NOOP, RESTART (replace ``ranks`` after ``delay_s``) or ESCALATE (the group is FAILED).
        ranks: ranks to replace (all ranks under one_for_all).
        delay_s: backoff before replacing.
        message: why (for ESCALATE: the ranks and causes, for the error).
    """

    kind: DecisionKind
    ranks: tuple[int, ...] = ()
    delay_s: float = 0.0
    message: str = ""


def restarts_in_window(history: Sequence[RestartRecord], policy: RestartPolicy, now: float) -> int:
    """Restarts of ``history`` inside the sliding window that ends at ``now``."""
    window_start = now - policy.restart_window_s
    return sum(1 for r in history if r.at >= window_start)


def budget_allows(history: Sequence[RestartRecord], restarts: int, policy: RestartPolicy, now: float) -> bool:
    """Whether ``restarts`` more restarts fit the budget (``max_restarts`` within the window)."""
    return restarts_in_window(history, policy, now) + restarts <= policy.max_restarts


def _consecutive(history: Sequence[RestartRecord], rank: int, window_start: float) -> int:
    return sum(1 for r in history if r.rank == rank and r.at >= window_start)


def decide(
    failures: Sequence[Failure],
    history: Sequence[RestartRecord],
    world_size: int,
    policy: RestartPolicy,
    now: float,
) -> Decision:
    """Decide what to do about ``failures`` given the group's restart ``history``.

    Args:
        failures: ranks observed failed now (deduplicated by rank by the caller or here).
        history: restarts already performed.
        world_size: ranks in the group.
        policy: strategy, intensity, backoff.
        now: monotonic time of the decision.
    """
    if not failures:
        return Decision(DecisionKind.NOOP)
    by_rank = {f.rank: f for f in failures}
    window_start = now - policy.restart_window_s
    in_window = restarts_in_window(history, policy, now)
    if not budget_allows(history, len(by_rank), policy, now):
        causes = "; ".join(
            f"rank {f.rank} {f.reason.value}" + (f" ({f.detail})" if f.detail else "") for f in sorted(by_rank.values(), key=lambda f: f.rank)
        )
        return Decision(
            DecisionKind.ESCALATE,
            ranks=tuple(sorted(by_rank)),
            message=(
                f"restart budget exhausted: {in_window} restart(s) in the last {policy.restart_window_s:g}s "
                f"(max_restarts={policy.max_restarts}); failed: {causes}"
            ),
        )
    ranks = tuple(range(world_size)) if policy.strategy is RestartStrategy.ONE_FOR_ALL else tuple(sorted(by_rank))
    delay = max(policy.backoff_s(_consecutive(history, r, window_start) + 1) for r in by_rank)
    return Decision(DecisionKind.RESTART, ranks=ranks, delay_s=delay)
