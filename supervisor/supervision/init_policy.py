"""The strict initialisation policy: per-rank outcomes in, the next round's plan out.

init_group runs a group's init method in rounds. Each round calls it on some ranks in parallel and
classifies every call (:class:`InitOutcome`). :func:`plan_next_round` then decides, from the whole
history, what the next round does. It is a pure function so every rule is unit-tested:

* a failed rank is replaced (fresh actor, same bundle, rank and environment) and its init re-run;
  ranks that succeeded are left alone;
* **rendezvous rule**: if rank 0 is replaced it gets a new MASTER_ADDR/MASTER_PORT, so every rank must
  learn it and re-run init (their earlier init joined the old rendezvous);
* a rank whose failures reach ``attempts`` fails the whole group;
* in a collective init (every rank joins one rendezvous), a rank that dies or raises dooms the
  others' calls: they are *abandoned* (not waited for: a rendezvous waits out its own timeout, 30
  minutes for NCCL by default), replaced like failed ranks, and not charged an attempt;
* between rounds, back off exponentially with jitter (:class:`~supervisor.retrying.Backoff`, tenacity's ``wait_exponential_jitter``) on the
  highest attempt number among the failed ranks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..retrying import Backoff
from .restart_policy import FailureReason

__all__ = ["InitOutcome", "InitPolicy", "RankAttempt", "InitPlan", "plan_next_round", "needs_new_rendezvous"]


class InitOutcome(enum.Enum):
    """How one rank's init call ended."""

    OK = "ok"
    RAISED = "raised"  # the init method raised an exception
    TIMED_OUT = "timed_out"  # no answer within the per-worker timeout (a hang, e.g. a collective that never forms)
    DIED = "died"  # the actor process died (OOM kill, os._exit, node lost)
    # A collective init whose peer failed first: the call waits in a rendezvous that cannot complete
    # now, so it is not waited for; the rank gets a fresh actor without being charged an attempt.
    ABANDONED = "abandoned"

    @property
    def ok(self) -> bool:
        return self is InitOutcome.OK

    @property
    def failure_reason(self) -> FailureReason:
        """Why a rank whose init ended so is replaced (the ``reason`` of its restart)."""
        return _FAILURE_REASON[self]


_FAILURE_REASON = {
    InitOutcome.OK: FailureReason.INIT_FAILED,  # never replaced for it; total for the type checker
    InitOutcome.DIED: FailureReason.DIED,
    InitOutcome.TIMED_OUT: FailureReason.HUNG,
    InitOutcome.RAISED: FailureReason.INIT_FAILED,
    InitOutcome.ABANDONED: FailureReason.HUNG,  # blocked in a rendezvous that cannot complete
}


@dataclass(frozen=True)
class InitPolicy:
    """Knobs of init_group.

    Attributes:
        timeout_s: per-worker timeout of one init call (default 5 minutes).
        attempts: calls a rank may fail before the group fails (default 3).
        backoff_initial_s, backoff_max_s, backoff_jitter_s: exponential backoff between rounds.
    """

    timeout_s: float = 300.0
    attempts: int = 3
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0
    backoff_jitter_s: float = 1.0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"init timeout_s must be > 0, got {self.timeout_s}")
        if self.attempts < 1:
            raise ValueError(f"init attempts must be >= 1, got {self.attempts}")

    def backoff_s(self, attempt: int) -> float:
        """Delay before attempt ``attempt + 1`` of a rank that failed attempt ``attempt``."""
        return Backoff(self.backoff_initial_s, self.backoff_max_s, self.backoff_jitter_s).delay_s(attempt)


@dataclass(frozen=True)
class RankAttempt:
    """One init call on one rank.

    Attributes:
        rank: the rank.
        attempt: 1-based count of init calls on this rank so far.
        outcome: how it ended.
        error: exception type and message (RAISED), or what happened (TIMED_OUT, DIED).
        node_id: node the rank ran on.
        bundle: ``"pg_index:bundle_index"``.
        duration_s: time from the call to its outcome.
    """

    rank: int
    attempt: int
    outcome: InitOutcome
    error: str | None = None
    node_id: str | None = None
    bundle: str | None = None
    duration_s: float = 0.0

    def describe(self, max_attempts: int | None = None) -> str:
        """One line naming rank, node, bundle, attempt and outcome."""
        where = f"node {self.node_id[:12] if self.node_id else '?'}, bundle {self.bundle or '?'}"
        if self.outcome.ok:
            return f"rank {self.rank} ({where}): ok on attempt {self.attempt}"
        of = f"/{max_attempts}" if max_attempts else ""
        return f"rank {self.rank} ({where}) attempt {self.attempt}{of}: {self.outcome.value}: {self.error}"


@dataclass(frozen=True)
class InitPlan:
    """What the next round does (or that the group failed, or is done).

    Attributes:
        done: every rank's latest call succeeded.
        failed_ranks: ranks that exhausted their attempts (non-empty means the group failed).
        replace: ranks whose actor is replaced before the round.
        new_rendezvous: rank 0 is replaced, so a new MASTER_ADDR/PORT is picked and every rank learns it.
        run: ranks whose init method runs in the round.
        backoff_s: delay before the round.
    """

    done: bool = False
    failed_ranks: tuple[int, ...] = ()
    replace: tuple[int, ...] = ()
    new_rendezvous: bool = False
    run: tuple[int, ...] = ()
    backoff_s: float = 0.0
    reasons: dict[int, str] = field(default_factory=dict)


def needs_new_rendezvous(replaced_ranks: Sequence[int]) -> bool:
    """The rendezvous lives on rank 0's node: replacing rank 0 invalidates it for every rank."""
    return 0 in replaced_ranks


def _latest(history: Sequence[RankAttempt]) -> dict[int, RankAttempt]:
    latest: dict[int, RankAttempt] = {}
    for a in history:
        latest[a.rank] = a
    return latest


def failures_per_rank(history: Sequence[RankAttempt]) -> dict[int, int]:
    """Failed calls per rank, as charged against ``attempts`` (an abandoned call is a peer's failure)."""
    counts: dict[int, int] = {}
    for a in history:
        if not a.outcome.ok and a.outcome is not InitOutcome.ABANDONED:
            counts[a.rank] = counts.get(a.rank, 0) + 1
    return counts


def plan_next_round(
    history: Sequence[RankAttempt],
    world_size: int,
    policy: InitPolicy,
    ranks: Sequence[int] | None = None,
    rejoin_new_rank_zero: bool = True,
) -> InitPlan:
    """Decide the next round from every attempt so far.

    Args:
        history: every init call so far, in order.
        world_size: ranks in the group.
        policy: attempts and backoff.
        ranks: the ranks to initialise (default all); others are only re-run by the rendezvous rule.
        rejoin_new_rank_zero: the rendezvous rule (a replaced rank 0 re-runs every rank); False for
            independent replicas, whose other ranks are left alone.
    """
    scope = tuple(sorted(set(ranks))) if ranks is not None else tuple(range(world_size))
    latest = _latest(history)
    if not history:
        return InitPlan(run=scope)
    never_run = tuple(r for r in scope if r not in latest)
    failing = sorted(r for r, a in latest.items() if not a.outcome.ok)
    if not failing and not never_run:
        return InitPlan(done=True)
    failures = failures_per_rank(history)
    exhausted = tuple(r for r in failing if failures.get(r, 0) >= policy.attempts)
    if exhausted:
        return InitPlan(failed_ranks=exhausted, reasons={r: latest[r].outcome.value for r in exhausted})
    replace = tuple(failing)
    new_rendezvous = rejoin_new_rank_zero and needs_new_rendezvous(replace)
    run = tuple(range(world_size)) if new_rendezvous else tuple(sorted(set(replace) | set(never_run)))
    backoff = policy.backoff_s(max(failures.get(r, 0) for r in failing)) if failing else 0.0
    return InitPlan(replace=replace, new_rendezvous=new_rendezvous, run=run, backoff_s=backoff)
