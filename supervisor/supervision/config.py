"""How a group is supervised: the knobs of detection, recovery and in-flight calls (one place for
their defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..placement.standby import StandbyReach
from ..state.kinds import StateConfig
from .drain import DrainPolicy
from .in_flight_policy import InFlightPolicy
from .init_policy import InitPolicy
from .lifecycle import ACTOR_START_TIMEOUT_S
from .restart_policy import RestartPolicy, RestartStrategy

__all__ = ["DrainPolicy", "InFlightPolicy", "SupervisionConfig", "RECOVERY_RETRY_MIN_S", "STANDBY_FAILURE_LIMIT"]

# Shortest wait before a recovery step that failed for a transient reason is tried again (the
# policy's backoff may be 0: a GCS that answers late must not be hammered).
RECOVERY_RETRY_MIN_S = 0.5

# Standbys that die before they are ready, in a row, after which no more are started (their
# constructor most likely depends on the rank, or cannot run in a spare bundle).
STANDBY_FAILURE_LIMIT = 3


@dataclass(frozen=True)
class SupervisionConfig:
    """How a group is supervised.

    Attributes:
        restart: strategy, restart budget and backoff.
        init_method: worker method re-run on replacements (and on every rank when rank 0 is replaced).
        init_args, init_kwargs: its arguments.
        init_policy: strict per-rank timeout and attempts for that init.
        rejoin_new_rank_zero: when rank 0 is replaced, the live ranks learn its new rendezvous and
            re-run the init (ranks that meet at rank 0). False: they keep serving untouched
            (independent replicas, whose init may not run twice in one process).
        probe_period_s, probe_timeout_s: how often the ranks' heartbeats are read, and how long a rank
            may go without a new one before it is hung (at least two heartbeat periods,
            :data:`~supervisor.core.worker.actor_heartbeat.HEARTBEAT_PERIOD_S`). A rank Ray reports unavailable
            (unreachable, not known dead), or whose death the GCS has not confirmed, is given
            ``probe_timeout_s`` too.
        call_timeout_s: a blocking group call not answered by a rank within this is a hang (None: no limit).
        in_flight: outcome of calls in flight when a rank dies (None: RETRY for methods registered
            ``idempotent=True``, RAISE otherwise; a method's own ``on_rank_failure`` wins).
        bundle_wait_timeout_s: how long to wait for a lost node's bundles to be re-placed.
        actor_start_timeout_s: how long a replacement actor may take to come up (its constructor).
        poll_interval_s: longest a supervision pass blocks (bounds the reaction to reports and stop()).
        standbys: pre-started actors kept in free bundles (the pool's spares) to take over failed
            ranks; needs a :class:`~supervisor.core.worker.worker_base.Worker` subclass whose constructor does not
            depend on the rank (rank-dependent setup belongs in ``init_method``).
        standby_check_s: how often missing standbys are looked for free, placed bundles.
        standby_warmup_method: worker method a standby runs once constructed, before it counts as
            ready: the rank-independent part of the init (imports, weights into host memory), so
            the init method after a takeover only does what needs the rank. Runs again on a
            standby whose readiness is asked again (an adopted one), so it must be safe to repeat.
            A standby not ready within ``actor_start_timeout_s`` + ``init_policy.timeout_s`` (its
            constructor, then its warm-up) is dropped as failed.
        standby_reach: whether a standby on another node may take over a rank whose own bundle is
            still placed (:class:`~supervisor.placement.standby.StandbyReach`; by default only one on
            the rank's node, so a rank keeps its node unless that node is lost).
        standby_nice: how much a standby lowers its CPU priority (a nice increment, 0..19) while it
            starts and warms up, restored when it takes over a rank: a standby is speculative, and
            takes only the CPU the running ranks leave. 0: not lowered. Not lowered either where
            the process could not raise it back (no ``CAP_SYS_NICE``, an ``RLIMIT_NICE`` that does
            not allow it; see :mod:`supervisor.core.worker.cpu_priority`).
        standby_sched_idle: whether a standby also runs under Linux's ``SCHED_IDLE`` policy while it
            starts and warms up (restored with the nice value): it gets a CPU only when no rank
            wants one, and a waking rank preempts it at once.
        standby_preload: modules (e.g. ``("torch", "tensordict")``) a per-node zygote imports once, so
            that standbys are forked from it instead of each paying for those imports in a fresh
            process (:mod:`supervisor.core.worker.zygote`); empty: no zygote. Modules that import Ray
            cannot be preloaded (the zygote refuses them and standbys start as plain processes).
        state: what the ranks hold that training changed, and how it is kept
            (:class:`~supervisor.state.StateConfig`; default: nothing to restore). A stateful group is
            treated as one collective: any replacement re-forms it on every rank (a fresh
            rendezvous, the init method again), then restores the state before a rank serves; its
            calls are never re-run on one rank alone unless idempotent.
        drain: what the group does when a node of its ranks is drained (a preemption or maintenance
            notice; :class:`~supervisor.supervision.drain.DrainPolicy`): by default each affected rank is
            handed over to a successor on another node at the next call boundary, when a ready
            standby or a free spare bundle off the draining nodes and enough notice allow it.
    """

    restart: RestartPolicy = field(default_factory=RestartPolicy)
    init_method: str | None = None
    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    init_policy: InitPolicy = field(default_factory=InitPolicy)
    rejoin_new_rank_zero: bool = True
    probe_period_s: float = 5.0
    probe_timeout_s: float = 10.0
    call_timeout_s: float | None = None
    in_flight: InFlightPolicy | None = None
    bundle_wait_timeout_s: float | None = 600.0
    actor_start_timeout_s: float = ACTOR_START_TIMEOUT_S
    poll_interval_s: float = 0.25
    standbys: int = 0
    standby_check_s: float = 2.0
    standby_warmup_method: str | None = None
    standby_reach: StandbyReach = StandbyReach.SAME_NODE
    standby_nice: int = 10
    standby_sched_idle: bool = True
    standby_preload: tuple[str, ...] = ()
    state: StateConfig = field(default_factory=StateConfig)
    drain: DrainPolicy = field(default_factory=DrainPolicy)

    @property
    def collective(self) -> bool:
        """Whether the ranks' init joins one rendezvous (a stateful group, or one restarted as a
        whole): a rank that fails it dooms the others' calls, which are then not waited for."""
        return self.state.stateful or self.restart.strategy is RestartStrategy.ONE_FOR_ALL
