"""GroupSupervisor: keep a worker group running when its actors die, hang or lose their node.

States of the group (:class:`GroupState`)::

    RUNNING --(rank failed)--> RECOVERING --(replaced, re-initialised)--> RUNNING
        |                           |
        |                           +--(restart budget exhausted / replacement failed to init)--> FAILED
        +--(stop())--> STOPPED                                                                      (terminal)

Each pass of :meth:`GroupSupervisor.step` observes (sentinels, probes, failures reported by in-flight
calls), asks the pure :func:`~supervisor.restart_policy.decide` what to do, and executes the decision.
Only the ``_execute_*`` methods touch Ray actors. Detection does not rely on polling: every rank keeps a
sentinel call outstanding in its own concurrency group, and Ray fails that call the moment the process
dies; probes (another concurrency group) catch processes that are alive but stuck.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tenacity

from .cluster_state import read_snapshot
from .drift import RankPlacement, compute_drift
from .errors import ConfigError, SupervisorError, first_line, ray_error_line
from .group import WorkerGroup
from .hooks import LifecycleHooks, default_hooks
from .init_policy import InitPolicy, failures_per_rank
from .lifecycle import InitGroupError, init_group
from .log import get_logger
from .resources import diagnose
from .restart_policy import (
    Decision,
    DecisionKind,
    Failure,
    FailureReason,
    RestartPolicy,
    RestartRecord,
    budget_allows,
    decide,
)
from .standby import BundleRef, Replacement, ReplacementKind, free_bundles, plan_replacements, standby_bundles
from .transient import is_transient
from .worker import Worker, arm_sentinel, send_probe

__all__ = [
    "GroupState",
    "WorkerState",
    "InFlightPolicy",
    "SupervisionConfig",
    "RankStatus",
    "GroupSupervisor",
    "GroupFailedError",
]

log = get_logger("supervision")

# Shortest wait before a recovery step that failed for a transient reason is tried again (the
# policy's backoff may be 0: a GCS that answers late must not be hammered).
RECOVERY_RETRY_MIN_S = 0.5

# Standbys that die before they are ready, in a row, after which no more are started (their
# constructor most likely depends on the rank, or cannot run in a spare bundle).
STANDBY_FAILURE_LIMIT = 3


class GroupState(enum.Enum):
    RUNNING = "running"
    RECOVERING = "recovering"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in (GroupState.FAILED, GroupState.STOPPED)


class WorkerState(enum.Enum):
    RUNNING = "running"
    FAILED = "failed"
    RESTARTING = "restarting"


class InFlightPolicy(enum.Enum):
    """What a blocking group call does when one of its ranks dies while it runs.

    RETRY: wait for the replacement and run that rank's shard again on it (idempotent methods only).
    RAISE: raise :class:`~supervisor.supervised_call.WorkerFailedError` with the survivors' results.
    """

    RETRY = "retry"
    RAISE = "raise"


class GroupFailedError(SupervisorError):
    """The group is FAILED: its restart budget is exhausted or a replacement could not initialise."""


class _RecoveryStopped(Exception):
    """The supervisor stopped while a recovery waited to retry a step."""


@dataclass(frozen=True)
class SupervisionConfig:
    """How a group is supervised.

    Attributes:
        restart: strategy, restart budget and backoff.
        init_method: worker method re-run on replacements (and on every rank when rank 0 is replaced).
        init_args, init_kwargs: its arguments.
        init_policy: strict per-rank timeout and attempts for that init.
        probe_period_s, probe_timeout_s: health probe cadence and the timeout after which a rank is hung.
        call_timeout_s: a blocking group call not answered by a rank within this is a hang (None: no limit).
        in_flight: outcome of calls in flight when a rank dies (None: RETRY for methods registered
            ``idempotent=True``, RAISE otherwise; a method's own ``on_rank_failure`` wins).
        bundle_wait_timeout_s: how long to wait for a lost node's bundles to be re-placed.
        poll_interval_s: longest a supervision pass blocks (bounds the reaction to reports and stop()).
        sentinel_hold_s: how long one sentinel call stays outstanding before it is re-armed.
        standbys: pre-started actors kept in free bundles (the pool's spares) to take over failed
            ranks; needs a :class:`~supervisor.worker.Worker` subclass whose constructor does not
            depend on the rank (rank-dependent setup belongs in ``init_method``).
        standby_check_s: how often missing standbys are looked for free, placed bundles.
    """

    restart: RestartPolicy = field(default_factory=RestartPolicy)
    init_method: str | None = None
    init_args: tuple[Any, ...] = ()
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    init_policy: InitPolicy = field(default_factory=InitPolicy)
    probe_period_s: float = 5.0
    probe_timeout_s: float = 10.0
    call_timeout_s: float | None = None
    in_flight: InFlightPolicy | None = None
    bundle_wait_timeout_s: float | None = 600.0
    poll_interval_s: float = 0.25
    sentinel_hold_s: float = 30.0
    standbys: int = 0
    standby_check_s: float = 2.0


@dataclass
class RankStatus:
    """Observed state of one rank."""

    rank: int
    state: WorkerState = WorkerState.RUNNING
    generation: int = 0
    node_id: str | None = None
    original_node: str | None = None
    restarts: int = 0
    last_failure: str | None = None

    @property
    def drifted(self) -> bool:
        return RankPlacement(self.rank, self.original_node, self.node_id).drifted


@dataclass
class _Pending:
    failure: Failure
    detected_at: float  # monotonic
    died_at_wall: float | None  # wall-clock time of death when Ray knows it
    generation: int | None = None  # incarnation it concerns (None: the current one)


class GroupSupervisor:
    """Supervises one :class:`WorkerGroup` that created its actors (e.g. made by ``create_group``).

    Args:
        group: the group; it must own its actors (not attached by name).
        config: restart strategy, budget, probes, init method...
        hooks: lifecycle hooks (default: metrics and structured logs).
        clock: monotonic clock (injectable).
        restart_history, rank_restarts: restarts an earlier supervisor of this group made (times on
            ``clock``) and each rank's restart count, so a re-adopting daemon keeps the budget and counts.

    Use :meth:`start` to supervise in a background thread (owned by this object and stopped by
    :meth:`stop`); from then on the group's blocking calls go through :mod:`supervisor.supervised_call`.
    Tests may drive :meth:`step` directly instead (calls are then not routed through the supervisor).
    """

    def __init__(
        self,
        group: WorkerGroup,
        config: SupervisionConfig | None = None,
        hooks: LifecycleHooks | None = None,
        clock: Callable[[], float] = time.monotonic,
        restart_history: list[RestartRecord] | None = None,
        rank_restarts: dict[int, int] | None = None,
    ) -> None:
        self.group = group
        self.config = config or SupervisionConfig()
        self.hooks = hooks if hooks is not None else default_hooks()
        self.clock = clock
        self._cond = threading.Condition()
        self._state = GroupState.RUNNING
        self._failure: GroupFailedError | None = None
        self._history: list[RestartRecord] = list(restart_history or [])
        self._reported: list[_Pending] = []
        self._sentinels: dict[Any, tuple[int, int]] = {}
        self._probes: dict[Any, tuple[int, int, float]] = {}
        self._next_probe: dict[int, float] = {}
        self._unavailable_since: dict[int, float] = {}  # rank -> first "unavailable" answer in a row
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # Standbys, keyed by bundle: ready ones with their node, starting ones with their readiness call.
        self._standby_ready: dict[BundleRef, str] = {}
        self._standby_starting: dict[Any, BundleRef] = {}
        self._standby_sentinels: dict[Any, BundleRef] = {}
        self._standby_failures = 0  # consecutive standbys that died before they were ready
        self._next_standby_check = 0.0
        self._check_standbys()
        original = self._original_nodes()
        self._ranks = [
            RankStatus(rank=r, node_id=group.rank_nodes.get(r), original_node=original.get(r), restarts=(rank_restarts or {}).get(r, 0))
            for r in range(group.world_size)
        ]

    def _check_standbys(self) -> None:
        wanted, group = self.config.standbys, self.group
        if wanted <= 0:
            return
        spares = group.resource_pool.spare_bundle_count if group.resource_pool is not None else 0
        if wanted > spares:
            raise ConfigError(
                f"group {group.name} wants {wanted} standby(s) but its pool reserves {spares} spare bundle(s): "
                "raise the pool's capacity_factor"
            )
        if group.cls_with_init is None or not issubclass(group.cls_with_init.user_cls, Worker):
            raise ConfigError(f"group {group.name}: standbys need a supervisor.Worker subclass (it adopts the failed rank's identity)")

    # -- public surface -------------------------------------------------------------------------
    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def failure(self) -> GroupFailedError | None:
        return self._failure

    def ranks(self) -> list[RankStatus]:
        with self._cond:
            return [RankStatus(**vars(r)) for r in self._ranks]

    def drift(self) -> list[RankPlacement]:
        """Per-rank placement: bundle node at pool creation vs the node the rank runs on now."""
        with self._cond:
            return compute_drift({r.rank: r.original_node for r in self._ranks}, {r.rank: r.node_id for r in self._ranks})

    def standby_nodes(self) -> dict[BundleRef, str]:
        """Node of every ready standby, by bundle."""
        with self._cond:
            return dict(self._standby_ready)

    def standby_counts(self) -> tuple[int, int]:
        """``(ready, starting)`` standbys of the group."""
        with self._cond:
            return len(self._standby_ready), len(self._standby_starting)

    def restart_history(self) -> list[RestartRecord]:
        with self._cond:
            return list(self._history)

    def start(self) -> GroupSupervisor:
        """Arm the sentinels and supervise in a background thread."""
        if self._thread is not None:
            return self
        # Blocking group calls go through the supervisor only once something drives recovery.
        self.group.supervisor = self
        for bundle in self.group.standbys:  # adopted from an earlier supervisor: check they are alive
            self._watch_starting_standby(bundle)
        self._arm_all()
        self._publish_worker_states()
        self.hooks.on_drift_state(self.group.name, sum(1 for p in self.drift() if p.drifted))  # an adopted group may start drifted
        self._thread = threading.Thread(target=self._run, name=f"supervisor-{self.group.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop supervising (the actors are left alone). Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        with self._cond:
            if not self._state.is_terminal:
                self._state = GroupState.STOPPED
            self._cond.notify_all()
        if self.group.supervisor is self:
            self.group.supervisor = None

    def generation(self, rank: int) -> int:
        with self._cond:
            return self._ranks[rank].generation

    def acquire(self, rank: int) -> tuple[int, Any]:
        """Wait until the group is not recovering and ``rank`` runs; return ``(generation, actor)``.

        New calls must not reach a replacement before its init method has run.

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self._cond:
            while True:
                acquired = self.try_acquire(rank)
                if acquired is not None:
                    return acquired
                self._cond.wait(0.5)

    def try_acquire(self, rank: int, newer_than: int = -1) -> tuple[int, Any] | None:
        """``(generation, actor)`` of ``rank`` when it runs a generation newer than ``newer_than`` and
        the group is not recovering, else None (never blocks).

        Raises:
            GroupFailedError: the group is FAILED or STOPPED.
        """
        with self._cond:
            if self._state.is_terminal:
                raise self._failure or GroupFailedError(f"group {self.group.name} is {self._state.value}")
            status = self._ranks[rank]
            if self._state is GroupState.RUNNING and status.state is WorkerState.RUNNING and status.generation > newer_than:
                return status.generation, self.group.workers[rank]
            return None

    def report_failure(self, rank: int, generation: int, reason: FailureReason, detail: str = "") -> None:
        """Tell the supervisor a rank failed (called by in-flight calls; duplicates are ignored)."""
        with self._cond:
            if self._ranks[rank].generation != generation:
                return  # already replaced
            failure = Failure(rank, reason, detail, self._ranks[rank].node_id)
            self._reported.append(_Pending(failure, self.clock(), None, generation))
            self._cond.notify_all()

    def await_replacement(self, rank: int, generation: int, timeout_s: float | None = None) -> int:
        """Block until ``rank`` runs a generation newer than ``generation``; return it.

        Raises:
            GroupFailedError: the group failed (or stopped) instead.
            TimeoutError: not replaced within ``timeout_s``.
        """
        deadline = None if timeout_s is None else self.clock() + timeout_s
        with self._cond:
            while True:
                status = self._ranks[rank]
                if status.generation > generation and status.state is WorkerState.RUNNING:
                    return status.generation
                if self._state.is_terminal:
                    raise self._failure or GroupFailedError(f"group {self.group.name} is {self._state.value}")
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"rank {rank} of group {self.group.name} not replaced within {timeout_s:g}s")
                self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self._state.is_terminal:
                self.step(self.config.poll_interval_s)
        except BaseException as exc:  # the supervisor itself broke: fail loudly, never silently stop
            log.exception("supervisor_crashed", group=self.group.name)
            self._escalate(f"supervisor loop crashed: {type(exc).__name__}: {exc}", ())

    def step(self, timeout_s: float) -> Decision:
        """One pass: observe for up to ``timeout_s``, decide, execute. Returns the decision taken."""
        pending = self._observe(timeout_s)
        if not self._state.is_terminal:
            try:
                self._tend_standbys(starting_allowed=not pending)
            except Exception as exc:  # standby housekeeping must never fail the group: try again next pass
                log.warning("standby_tending_failed", group=self.group.name, error=first_line(exc))
        if self._state.is_terminal or not pending:
            return Decision(DecisionKind.NOOP)
        by_rank: dict[int, _Pending] = {}
        for p in pending:
            by_rank.setdefault(p.failure.rank, p)
        decision = decide([p.failure for p in by_rank.values()], self._history, self.group.world_size, self.config.restart, self.clock())
        if decision.kind is DecisionKind.ESCALATE:
            self._escalate(decision.message, decision.ranks)
        elif decision.kind is DecisionKind.RESTART:
            self._execute_restart(decision, by_rank)
        return decision

    # -- observation ----------------------------------------------------------------------------
    def _observe(self, timeout_s: float) -> list[_Pending]:
        import ray

        self._send_due_probes()
        refs = list(self._sentinels) + list(self._probes)
        with self._cond:
            has_reports = bool(self._reported)
        if not has_reports:  # block until something happens, or the pass times out
            if refs:
                ray.wait(refs, num_returns=1, timeout=min(timeout_s, self._time_to_next_probe()))
            else:
                with self._cond:
                    self._cond.wait(timeout_s)
        found: list[_Pending] = []
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                found += self._on_ready(ref)
        found += self._expired_probes()
        with self._cond:
            # Reports from calls come first: they carry the call's view (e.g. hung) of the failure.
            found = self._reported + found
            self._reported = []
        first: dict[int, _Pending] = {}
        for p in found:
            status = self._ranks[p.failure.rank]
            if status.state is WorkerState.RUNNING and p.generation in (None, status.generation):
                first.setdefault(p.failure.rank, p)  # sentinel, probe and a call may all report one death
        current = list(first.values())
        for p in current:
            self._mark_failed(p)
        return current

    def _on_ready(self, ref: Any) -> list[_Pending]:
        import ray

        now = self.clock()
        if ref in self._sentinels:
            rank, gen = self._sentinels.pop(ref)
            try:
                ray.get(ref)
            except ray.exceptions.ActorUnavailableError as exc:
                # Temporarily unreachable (Ray says so), not known dead: re-arm, for a while.
                if gen != self._ranks[rank].generation:
                    return []
                hung = self._still_unavailable(rank, gen, now, first_line(exc))
                if hung is None:
                    self._arm(rank)
                return [hung] if hung else []
            except ray.exceptions.RayActorError as exc:
                if gen != self._ranks[rank].generation:
                    return []
                return [_Pending(self._classify_death(rank, exc), now, self._death_time(rank), gen)]
            except ray.exceptions.RayError as exc:
                return [_Pending(Failure(rank, FailureReason.DIED, first_line(exc), self._ranks[rank].node_id), now, None)]
            if gen == self._ranks[rank].generation:
                self._unavailable_since.pop(rank, None)
                self._arm(rank)
            return []
        rank, gen, _sent = self._probes.pop(ref)
        try:
            info = ray.get(ref)
        except ray.exceptions.ActorUnavailableError as exc:
            hung = self._still_unavailable(rank, gen, now, first_line(exc)) if gen == self._ranks[rank].generation else None
            return [hung] if hung else []
        except ray.exceptions.RayActorError as exc:
            # Backstop: the sentinel normally reports a death first (duplicates are dropped by generation).
            if gen != self._ranks[rank].generation:
                return []
            return [_Pending(self._classify_death(rank, exc), now, self._death_time(rank), gen)]
        except ray.exceptions.RayError:
            return []
        if gen == self._ranks[rank].generation:
            self._unavailable_since.pop(rank, None)
            with self._cond:
                self._ranks[rank].node_id = info.get("node_id", self._ranks[rank].node_id)
        return []

    def _still_unavailable(self, rank: int, gen: int, now: float, cause: str) -> _Pending | None:
        """A rank Ray calls unavailable is transient for at most ``probe_timeout_s``, then hung (a
        rank behind a partition must be judged too)."""
        since = self._unavailable_since.setdefault(rank, now)
        if now - since < self.config.probe_timeout_s:
            return None
        del self._unavailable_since[rank]
        detail = f"unavailable for {now - since:.0f}s: {cause}"
        return _Pending(Failure(rank, FailureReason.HUNG, detail, self._ranks[rank].node_id), now, None, gen)

    def _expired_probes(self) -> list[_Pending]:
        now = self.clock()
        out = []
        for ref, (rank, gen, sent) in list(self._probes.items()):
            if now - sent > self.config.probe_timeout_s:
                del self._probes[ref]
                if gen == self._ranks[rank].generation:
                    detail = f"health probe unanswered for {self.config.probe_timeout_s:g}s"
                    out.append(_Pending(Failure(rank, FailureReason.HUNG, detail, self._ranks[rank].node_id), now, None))
        return out

    def _send_due_probes(self) -> None:
        now = self.clock()
        busy = {rank for rank, _, _ in self._probes.values()}
        for status in self._ranks:
            if status.state is not WorkerState.RUNNING or status.rank in busy:
                continue
            if now >= self._next_probe.get(status.rank, 0.0):
                worker = self.group.workers[status.rank]
                self._probes[send_probe(worker)] = (status.rank, status.generation, now)
                self._next_probe[status.rank] = now + self.config.probe_period_s

    def _time_to_next_probe(self) -> float:
        busy = {rank for rank, _, _ in self._probes.values()}
        due = [t for rank, t in self._next_probe.items() if rank not in busy]
        due += [sent + self.config.probe_timeout_s for _, _, sent in self._probes.values()]
        if not due:
            return self.config.probe_period_s
        return max(0.01, min(due) - self.clock())

    def _classify_death(self, rank: int, exc: BaseException) -> Failure:
        import ray

        node = self._ranks[rank].node_id
        try:
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        except Exception:  # a GCS hiccup must not take the supervisor down; the death is still a death
            alive = {node}
        reason = FailureReason.NODE_LOST if node is not None and node not in alive else FailureReason.DIED
        return Failure(rank, reason, first_line(exc), node)

    def _death_time(self, rank: int) -> float | None:
        # The GCS records when the actor died; detection latency is measured from there.
        try:
            from ray._private import state

            info = state.actors(self.group.workers[rank]._actor_id.hex())
            end_ms = float(info.get("EndTime", 0) or 0)
            return end_ms / 1000.0 if end_ms > 0 else None
        except Exception:
            return None

    def _mark_failed(self, pending: _Pending) -> None:
        rank = pending.failure.rank
        with self._cond:
            status = self._ranks[rank]
            status.state = WorkerState.FAILED
            status.last_failure = f"{pending.failure.reason.value}: {pending.failure.detail}"
        detection = None if pending.died_at_wall is None else max(0.0, time.time() - pending.died_at_wall - (self.clock() - pending.detected_at))
        self.hooks.on_worker_failed(self.group.name, rank, pending.failure.reason.value, pending.failure.detail, detection)
        self._publish_worker_states()

    # -- execution (the only methods that change actors) ----------------------------------------
    def _arm(self, rank: int) -> None:
        worker = self.group.workers[rank]
        ref = arm_sentinel(worker, self.config.sentinel_hold_s)
        self._sentinels[ref] = (rank, self._ranks[rank].generation)

    def _arm_all(self) -> None:
        self._sentinels.clear()
        for rank in range(self.group.world_size):
            self._arm(rank)

    def _execute_restart(self, decision: Decision, by_rank: dict[int, _Pending]) -> None:
        group = self.group
        ranks = list(decision.ranks)
        with self._cond:
            self._state = GroupState.RECOVERING  # acquire() holds new calls until RUNNING again
            for r in ranks:
                self._ranks[r].state = WorkerState.RESTARTING
        self._publish_worker_states()
        if decision.delay_s > 0 and self._stop.wait(decision.delay_s):
            return
        try:
            replaced, extra = self._replace_retrying(ranks, by_rank)
        except InitGroupError as exc:
            self._escalate(f"replacement of rank(s) {ranks} failed to initialise: {exc}", tuple(ranks))
            return
        except Exception as exc:
            if self._stop.is_set():
                return  # stopped mid-recovery: not a failure of the group
            if is_transient(exc):
                message = f"restart budget exhausted while retrying the replacement of rank(s) {ranks}; last error: {first_line(exc)}"
            else:
                message = f"replacement of rank(s) {ranks} failed: {type(exc).__name__}: {exc}"
            self._escalate(message, tuple(ranks))
            return
        # Ranks that died while the others were being recovered were replaced too.
        for r in replaced.keys() - by_rank.keys() - set(ranks):
            by_rank[r] = _Pending(Failure(r, FailureReason.DIED, "died during recovery"), self.clock(), None)
        ranks = sorted(replaced)
        nodes = replaced
        now = self.clock()
        # Under one_for_all the healthy ranks are restarted because of the failed ones: same reason.
        trigger = min(by_rank.values(), key=lambda p: p.failure.rank).failure.reason
        own_by_rank: dict[int, int] = {}
        with self._cond:
            if self._state.is_terminal:
                return
            for r in ranks:
                status = self._ranks[r]
                status.node_id = nodes.get(r)
                reason = by_rank[r].failure.reason if r in by_rank else trigger
                # init_group already announced its own replacements; record them against the budget too.
                own = own_by_rank[r] = 1 if r in decision.ranks or r not in extra else 0
                status.restarts += own + extra.get(r, 0)
                # The budget counts failures, not ranks rebuilt because of one (one_for_all).
                self._history += [RestartRecord(r, reason, now)] * (own if r in by_rank else 0)
                self._history += [RestartRecord(r, FailureReason.INIT_FAILED, now)] * extra.get(r, 0)
        # Record the recovery (metrics, logs) before anyone can observe the new generation.
        for r in ranks:
            pending = by_rank.get(r)
            reason = pending.failure.reason.value if pending else trigger.value
            recovery = None
            if pending is not None:
                recovery = now - pending.detected_at
                if pending.died_at_wall is not None:
                    recovery = max(recovery, time.time() - pending.died_at_wall)
            if own_by_rank[r]:
                self.hooks.on_worker_replaced(group.name, r, reason)
            self.hooks.on_worker_recovered(group.name, r, recovery)
            status = self._ranks[r]
            if status.drifted:
                self.hooks.on_placement_drift(group.name, r, status.original_node or "", status.node_id or "")
        self.hooks.on_drift_state(group.name, sum(1 for p in self.drift() if p.drifted))
        with self._cond:
            if self._state.is_terminal:
                return
            for r in ranks:
                self._ranks[r].generation += 1
                self._ranks[r].state = WorkerState.RUNNING
                self._unavailable_since.pop(r, None)
            self._state = GroupState.RUNNING
            self._sentinels = {ref: v for ref, v in self._sentinels.items() if v[0] not in ranks}
            self._probes = {ref: v for ref, v in self._probes.items() if v[0] not in ranks}
            self._cond.notify_all()
        # Sentinels are only read by this thread, so arming after the bump loses no death.
        for r in ranks:
            self._arm(r)
            self._next_probe[r] = self.clock() + self.config.probe_period_s
        self._publish_worker_states()

    def _replace_retrying(self, ranks: list[int], by_rank: dict[int, _Pending]) -> tuple[dict[int, str | None], dict[int, int]]:
        """:meth:`_replace`, with transient errors retried after the restart policy's backoff (at least
        ``RECOVERY_RETRY_MIN_S``). A failed attempt is a restart, counted as the successful one is: a
        restart of each rebuilt rank, and against the budget one per failed rank. The retries stop
        when another attempt would not fit the budget, or the supervisor stops; the last error is
        then raised.
        """
        policy = self.config.restart
        failed = [r for r in ranks if r in by_rank]  # under one_for_all the others are rebuilt because of them
        trigger = by_rank[min(by_rank)].failure.reason
        reason = {r: (by_rank[r].failure.reason if r in by_rank else trigger) for r in ranks}

        def charge(state: tenacity.RetryCallState) -> None:  # runs before `stop` looks at the budget
            now = self.clock()
            with self._cond:
                self._history += [RestartRecord(r, reason[r], now) for r in failed]
                for r in ranks:
                    self._ranks[r].restarts += 1
            for r in ranks:
                self.hooks.on_worker_replaced(self.group.name, r, reason[r].value)

        def next_attempt_exceeds_budget(state: tenacity.RetryCallState) -> bool:
            return self._stop.is_set() or not budget_allows(self._history, len(failed), policy, self.clock())

        def announce(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "recovery_retry", group=self.group.name, ranks=ranks, attempt=state.attempt_number,
                error=first_line(error) if error else None, retry_in_s=round(state.upcoming_sleep, 2),
            )  # fmt: skip

        def sleep(seconds: float) -> None:
            if self._stop.wait(seconds):
                raise _RecoveryStopped()

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            after=charge,
            stop=next_attempt_exceeds_budget,
            wait=lambda state: max(RECOVERY_RETRY_MIN_S, policy.backoff_s(state.attempt_number + 1)),
            before_sleep=announce,
            sleep=sleep,
            reraise=True,
        )
        # A fresh set each attempt: _replace adds the ranks it had to rebuild as well.
        return retrying(lambda: self._replace(set(ranks)))

    def _replace(self, ranks: set[int]) -> tuple[dict[int, str | None], dict[int, int]]:
        """Replace ``ranks`` (and any rank that dies meanwhile) and re-run init.

        Returns:
            ``{rank: node}`` of every replaced rank, and ``{rank: extra replacements}`` made by
            init_group when a replacement itself failed its init (each one is a restart too).
        """
        import ray

        group, cfg = self.group, self.config
        plan = self._plan_replacements(sorted(ranks))
        self._wait_bundles([p.rank for p in plan if p.kind is ReplacementKind.OWN_BUNDLE])
        for replacement in plan:  # rank 0 first: its replacement picks the new rendezvous
            self._execute_replacement(replacement)
        if 0 in ranks:
            ranks |= set(group.propagate_rendezvous([r for r in range(group.world_size) if r not in ranks]))
            assert group._rendezvous is not None
            self.hooks.on_rendezvous_changed(group.name, group._rendezvous.master_addr, group._rendezvous.master_port)
        extra: dict[int, int] = {}
        if cfg.init_method:
            to_init = list(range(group.world_size)) if 0 in ranks else sorted(ranks)
            attempts = init_group(
                group, cfg.init_method, cfg.init_args, cfg.init_kwargs, cfg.init_policy, self.hooks, ranks=to_init, kill_on_failure=False
            )
            # init_group replaced every rank whose init failed; each is a restart and a new incarnation.
            extra = failures_per_rank(attempts)
            ranks |= set(extra)
        refs = {send_probe(group.workers[r]): r for r in sorted(ranks)}
        nodes: dict[int, str | None] = dict.fromkeys(ranks)
        for ref, r in refs.items():
            try:
                nodes[r] = ray.get(ref, timeout=cfg.probe_timeout_s)["node_id"]
            except ray.exceptions.RayError:
                pass  # died (or stuck) already: its sentinel or probe reports it
        return nodes, extra

    def _plan_replacements(self, ranks: list[int]) -> list[Replacement]:
        group = self.group
        if not group.standbys and group.resource_pool is not None and group.resource_pool.spare_pg is None:
            return [Replacement(r, ReplacementKind.OWN_BUNDLE, group.rank_bundles[r]) for r in ranks]
        try:
            placed = group.placed_bundles()
        except Exception as exc:  # a GCS hiccup: fall back to the rank's own bundle
            log.warning("bundle_placement_unknown", group=group.name, error=first_line(exc))
            placed = {}
        rank_bundles = dict(enumerate(group.rank_bundles))
        free = free_bundles(group.all_bundles(), rank_bundles.values(), group.standbys)
        return plan_replacements(ranks, rank_bundles, placed, dict(self._standby_ready), free)

    def _execute_replacement(self, replacement: Replacement) -> None:
        group, rank = self.group, replacement.rank
        if replacement.kind is ReplacementKind.STANDBY:
            standby = group.standbys[replacement.bundle]
            self._forget_standby(replacement.bundle)
            self._next_standby_check = 0.0  # start its successor on the next pass
            try:
                group.take_over(rank, replacement.bundle, timeout_s=self.config.probe_timeout_s)
                return
            except Exception as exc:  # the standby died meanwhile: fall back to a fresh actor
                self.hooks.on_standby_failed(group.name, standby.name, f"take-over of rank {rank} failed: {ray_error_line(exc)}")
            self._wait_bundles([rank])
            group.replace_worker(rank)
        elif replacement.kind is ReplacementKind.SPARE_BUNDLE:
            log.info("replacement_to_spare_bundle", group=group.name, rank=rank, bundle=f"{replacement.bundle.pg_index}:{replacement.bundle.bundle_index}")
            group.replace_worker(rank, bundle=replacement.bundle)
        else:
            group.replace_worker(rank)

    # -- standbys -------------------------------------------------------------------------------
    def _tend_standbys(self, starting_allowed: bool = True) -> None:
        """Learn which standbys became ready or died, and start missing ones in free, placed bundles
        (not while ranks wait to be replaced: a free spare is theirs first)."""
        import ray

        wanted = self.config.standbys
        if wanted <= 0 and not self.group.standbys:
            return
        refs = [*self._standby_starting, *self._standby_sentinels]
        if refs:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                self._on_standby_ref(ref)
        if not starting_allowed or self._state is not GroupState.RUNNING or self.clock() < self._next_standby_check:
            return
        self._next_standby_check = self.clock() + self.config.standby_check_s
        missing = wanted - len(self.group.standbys)
        if missing <= 0:
            return
        if self._standby_failures >= STANDBY_FAILURE_LIMIT:
            return  # reported once when the limit was reached; standbys would only crash-loop
        try:
            placed = self.group.placed_bundles()
        except Exception as exc:  # look again next time
            log.debug("standby_placement_unknown", group=self.group.name, error=first_line(exc))
            return
        free = free_bundles(self.group.all_bundles(), self.group.rank_bundles, self.group.standbys)
        bundles = standby_bundles(free, placed, self._standby_ready.values(), missing)
        for standby in self.group.start_standbys(bundles):
            self._watch_starting_standby(standby.bundle)
            log.info("standby_started", group=self.group.name, actor=standby.name, node=placed.get(standby.bundle))
        self._publish_standbys()

    def _watch_starting_standby(self, bundle: BundleRef) -> None:
        standby = self.group.standbys[bundle]
        with self._cond:
            self._standby_starting[standby.handle.node_info.remote()] = bundle

    def _on_standby_ref(self, ref: Any) -> None:
        """A standby's readiness call or its sentinel returned: it is ready, alive, or dead."""
        import ray

        with self._cond:
            starting = ref in self._standby_starting
            bundle = self._standby_starting.pop(ref, None) or self._standby_sentinels.pop(ref, None)
        standby = self.group.standbys.get(bundle) if bundle is not None else None
        if standby is None:
            return  # it took over a rank meanwhile
        try:
            result = ray.get(ref)
        except ray.exceptions.ActorUnavailableError:  # unreachable for now, not dead: look again
            result = None
        except ray.exceptions.RayError as exc:
            self._forget_standby(standby.bundle)
            self.group.drop_standby(standby.bundle)
            self._next_standby_check = 0.0
            if starting:
                self._standby_failures += 1
                if self._standby_failures == STANDBY_FAILURE_LIMIT:
                    log.error("standbys_disabled", group=self.group.name, failures=STANDBY_FAILURE_LIMIT, last_error=ray_error_line(exc))
            self.hooks.on_standby_failed(self.group.name, standby.name, ray_error_line(exc))
            return
        if starting and result is not None:
            self._standby_failures = 0
            with self._cond:
                self._standby_ready[standby.bundle] = result["node_id"]
            log.info("standby_ready", group=self.group.name, actor=standby.name, node=result["node_id"])
            self._publish_standbys()
        elif starting:
            self._watch_starting_standby(standby.bundle)
            return
        self._standby_sentinels[arm_sentinel(standby.handle, self.config.sentinel_hold_s)] = standby.bundle

    def _forget_standby(self, bundle: BundleRef) -> None:
        with self._cond:
            self._standby_ready.pop(bundle, None)
            for refs in (self._standby_starting, self._standby_sentinels):
                for ref in [r for r, b in refs.items() if b == bundle]:
                    del refs[ref]
        self._publish_standbys()

    def _publish_standbys(self) -> None:
        if self.config.standbys or self.group.standbys:
            ready, starting = self.standby_counts()
            self.hooks.on_standby_state(self.group.name, ready, starting)

    def _wait_bundles(self, ranks: list[int]) -> None:
        # A lost node's bundles are re-placed by Ray (RESCHEDULING, then CREATED); wait for that
        # leniently and say so, before putting replacements into them.
        from ray.util import placement_group_table

        if not ranks:
            return
        pg_indexes = sorted({self.group.rank_bundles[r].pg_index for r in ranks})
        started = self.clock()
        next_report = started + 5.0
        while True:
            try:
                states = {i: placement_group_table(self.group._pgs[i]).get("state") for i in pg_indexes}
            except Exception as exc:  # transient GCS error: look again next round
                states = {i: f"unknown ({type(exc).__name__})" for i in pg_indexes}
            if all(s == "CREATED" for s in states.values()):
                return
            waited = self.clock() - started
            timeout = self.config.bundle_wait_timeout_s
            if timeout is not None and waited > timeout:
                raise TimeoutError(f"placement groups {states} not re-placed after {waited:.0f}s")
            if self.clock() >= next_report:
                log.info("waiting_for_bundles", group=self.group.name, placement_groups=states, waited_s=round(waited, 1))
                self._report_bundle_wait(waited)
                next_report = self.clock() + 5.0
            if self._stop.wait(0.1):
                raise TimeoutError("supervisor stopped while waiting for bundles")

    def _report_bundle_wait(self, waited_s: float) -> None:
        # The same diagnosis as create_group's wait: what is missing and which placement groups hold it.
        pool = self.group.resource_pool
        if pool is None:
            return
        try:
            diagnosis = diagnose(pool.demand(), read_snapshot(), {pg.id.hex() for pg in self.group._pgs})
        except Exception:  # diagnosis is best effort; the wait goes on
            return
        self.hooks.on_resource_wait_progress(pool.name_prefix, waited_s, diagnosis)

    def _escalate(self, message: str, ranks: tuple[int, ...]) -> None:
        error = GroupFailedError(f"group {self.group.name} FAILED: {message}")
        with self._cond:
            if self._state.is_terminal:
                return
            self._state = GroupState.FAILED
            self._failure = error
            for r in ranks:
                self._ranks[r].state = WorkerState.FAILED
            self._cond.notify_all()
        self.hooks.on_group_failed(self.group.name, str(error))
        self._publish_worker_states()

    def _publish_worker_states(self) -> None:
        with self._cond:
            counts = {s.value: 0 for s in WorkerState}
            for r in self._ranks:
                counts[r.state.value] += 1
        self.hooks.on_worker_states(self.group.name, counts)

    def _original_nodes(self) -> dict[int, str]:
        pool = self.group.resource_pool
        if pool is None:
            return {}
        nodes = pool.original_bundle_nodes()
        return {s.rank: nodes[(s.pg_index, s.bundle_index)] for s in self.group.slots if (s.pg_index, s.bundle_index) in nodes}

