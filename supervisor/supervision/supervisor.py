"""GroupSupervisor: keep a worker group running when its actors die, hang or lose their node.

One reconcile loop per group, in the shape of controller-runtime's reconcilers and Ray Train v2's
controller. Each pass of :meth:`GroupSupervisor.step`:

1. **observes**: death watches that resolved, ranks whose heartbeat went silent, failures reported
   by in-flight calls, finished recovery tasks, and (while a rank is down) where the group's bundles and standbys are;
2. **decides**: the pure :func:`~supervisor.supervision.reconcile.decide` derives the whole next plan
   from the whole state;
3. **executes**: emits the plan's transitions through the lifecycle hooks (metrics, logs, the
   daemon's record), then starts its recovery tasks (:mod:`.recovery`) on threads the supervisor owns.

The loop never blocks on a recovery, so a death that arrives while another rank is being replaced is
seen at once, and the ranks of one node loss are replaced side by side.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from ..core.group.group import WorkerGroup
from ..errors import GroupFailedError, first_line
from ..observability.hooks import LifecycleHooks, default_hooks
from ..observability.log import get_logger
from ..placement.cluster_state import read_snapshot
from ..placement.drift import RankPlacement, compute_drift, count_drifted
from ..placement.resources import diagnose
from ..placement.standby import BundleRef, Replacement, ReplacementKind, free_bundles
from ..state.domain import StateDomain
from . import death_watch
from .config import SupervisionConfig
from .detection import Detected, Detector
from .drain import draining_nodes
from .gate import CallGate
from .reconcile import (
    DrainSeen,
    InitDone,
    LoopState,
    Observation,
    PlacementSeen,
    Plan,
    RankFailed,
    ReplacementDone,
    decide,
    initial_state,
)
from .record_sink import NO_RECORD, RecordSink
from .recovery import BundleWaiter, InitTask, ReplacementTask, TaskRunner
from .restart_policy import FailureReason, RestartRecord, restarts_in_window
from .standbys import StandbyKeeper
from .states import GroupState, RankStatus, WorkerState
from .supervised_call import SupervisedCallRunner

__all__ = ["GroupSupervisor", "GroupFailedError", "RankStatus"]

log = get_logger("supervision")

# While recovery tasks run, how often the loop looks at death watches and heartbeats between task outcomes.
TASK_POLL_S = 0.01


class GroupSupervisor:
    """Supervises one :class:`WorkerGroup` that created its actors (e.g. made by ``create_group``).

    Args:
        group: the group; it must own its actors (not attached by name).
        config: restart strategy, budget, probes, init method...
        hooks: lifecycle hooks (default: metrics and structured logs).
        clock: monotonic clock (injectable).
        restart_history: restarts an earlier supervisor of this group made (times on ``clock``), so a
            re-adopting daemon keeps the budget.
        rank_restarts: each rank's restart count under that earlier supervisor.
        state_domain: the job's :class:`~supervisor.state.StateDomain`, shared by its stateful groups
            so a rollback takes all of them back together (a daemon passes its own). Default, for a
            stateful group: one of its own, whose keepers end with :meth:`stop`.
        record: where the loop writes the group's state through at every change, before anyone sees
            it (the daemon's record; :data:`~.record_sink.NO_RECORD`: nowhere).

    Use :meth:`start` to supervise in a background thread (owned by this object and stopped by
    :meth:`stop`); from then on the group's blocking calls go through :mod:`supervisor.supervision.supervised_call`.
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
        state_domain: StateDomain | None = None,
        record: RecordSink = NO_RECORD,
    ) -> None:
        self.group = group
        self.config = config or SupervisionConfig()
        self.hooks = hooks if hooks is not None else default_hooks()
        self.clock = clock
        self.record = record
        self.standby = StandbyKeeper(group, self.config, self.hooks, clock)
        original = self._original_nodes()
        world = range(group.world_size)
        # The one record of the group's supervision: the loop replaces it with each plan's state.
        loop = initial_state(group.world_size, restart_history or [], rank_restarts)
        nodes, originals = [group.rank_nodes.get(r) for r in world], [original.get(r) for r in world]
        self.gate = CallGate(group.name, loop, nodes, originals, lambda: group.workers, clock)
        self._deferred: list[Detected] = []  # reports about ranks under an init, judged once they run again
        self._finished: list[Observation] = []  # outcomes of recovery tasks
        self._failed_at: dict[
            int, tuple[float, float | None]
        ] = {}  # rank -> (detected, died wall-clock) of its failure
        self._reserved: dict[int, BundleRef] = {}  # rank -> spare bundle its replacement in flight goes to
        self._wake_at: float | None = None
        self._draining_seen: set[str] = set()  # draining nodes of this group's ranks already announced
        self._drains_active = False  # the last pass saw ranks of this group on draining nodes
        self._handover_started: dict[int, tuple[float, str | None]] = {}  # rank -> (started, node it leaves)
        self._carried: object = None  # what a failed init round captured for its recovery's restore
        self._published_budget: tuple[int, int] | None = None  # (in window, allowed) the hooks last got
        self._tasks = TaskRunner(group.name, self._task_finished)
        self._bundles = BundleWaiter(group, self.config, self._tasks, self._report_bundle_wait)
        self._detector = Detector(group, self.config, clock, self._running_generations, self._node_of)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._released = True  # no death watch is held until start()
        self.state_domain: StateDomain | None = None
        self._owns_domain = False
        if self.config.state.stateful:
            self._owns_domain = state_domain is None
            self.state_domain = state_domain or StateDomain(group.name_prefix, group.namespace, group.fence, self.hooks, clock)
            self.state_domain.register(group, self.config.state, self.gate.wait_running, self._initialised_ranks)

    # -- public surface -------------------------------------------------------------------------
    @property
    def state(self) -> GroupState:
        return self.gate.state

    @property
    def failure(self) -> GroupFailedError | None:
        return self.gate.failure

    def ranks(self) -> list[RankStatus]:
        with self.gate.cond:
            return self.gate.statuses()

    def drift(self) -> list[RankPlacement]:
        """Per-rank placement: bundle node at pool creation vs the node the rank runs on now."""
        with self.gate.cond:
            return compute_drift(
                dict(enumerate(self.gate.original_nodes)), dict(enumerate(self.gate.nodes))
            )

    def standby_nodes(self) -> dict[BundleRef, str]:
        """Node of every ready standby, by bundle."""
        return self.standby.ready_nodes()

    def standby_counts(self) -> tuple[int, int]:
        """``(ready, starting)`` standbys of the group."""
        return self.standby.counts()

    def restart_history(self) -> list[RestartRecord]:
        with self.gate.cond:
            return list(self.gate.loop.history)

    def recovery_tasks(self) -> list[str]:
        """Names of the recovery tasks running now."""
        return self._tasks.running()

    def start(self) -> GroupSupervisor:
        """Watch every rank and supervise in a background thread."""
        if self._thread is not None:
            return self
        death_watch.acquire()
        self._released = False
        # Blocking group calls go through the supervisor only once something drives recovery.
        self.group.supervisor = self
        self.group.call_runner = SupervisedCallRunner(self)
        self.group.state_domain = self.state_domain
        self.group.on_rendezvous_picked = lambda rendezvous: self.record_changed()
        self.standby.adopt()  # adopted from an earlier supervisor: check they are alive
        self.standby.publish()
        for view in self.gate.loop.ranks:
            self._detector.watch(view.rank, view.generation)
        self._publish_worker_states(self.gate.loop)
        self._publish_budget()
        self.hooks.on_drift_state(
            self.group.name, sum(1 for p in self.drift() if p.drifted)
        )  # an adopted group may start drifted
        self._thread = threading.Thread(target=self._run, name=f"supervisor-{self.group.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop supervising: the loop ends, every recovery task is told to stop and joined (the actors
        are left alone). Idempotent."""
        self._stop.set()
        started = time.monotonic()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        left = self._tasks.stop(max(0.0, timeout_s - (time.monotonic() - started)))
        if left:  # blocked in a Ray call that ends at its own timeout; their outcome is dropped
            log.warning("recovery_tasks_left_running", group=self.group.name, tasks=left)
        if not self._released:
            self._released = True
            try:
                self._detector.close()
                self.standby.close()
            finally:
                death_watch.release()
        with self.gate.cond:
            self.gate.stopped = True
            self.gate.cond.notify_all()
        if self.group.supervisor is self:
            self.group.supervisor = None
            self.group.call_runner = None
            self.group.on_rendezvous_picked = None
            self.group.state_domain = None
        if self.state_domain is not None:
            self.state_domain.unregister(self.group.name)
            if self._owns_domain:
                self.state_domain.close()

    def record_changed(self) -> None:
        """Write the group's state through to the owner's record now (the loop does at every change;
        an owner that changed the supervision settings does too)."""
        self.record.write_through(self.group.name)

    def generation(self, rank: int) -> int:
        with self.gate.cond:
            return self.gate.generation(rank)

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.gate.loop.group.is_terminal:
                self.step(self.config.poll_interval_s)
        except BaseException as exc:  # the supervisor itself broke: fail loudly, never silently stop
            log.exception("supervisor_crashed", group=self.group.name)
            self._fail_group(f"supervisor loop crashed: {type(exc).__name__}: {exc}")

    def step(self, timeout_s: float) -> Plan:
        """One pass: observe for up to ``timeout_s``, decide, execute. Returns the plan carried out."""
        observations = self._observe(timeout_s)
        with self.gate.cond:
            state = self.gate.loop
        plan = decide(state, observations, self.config, self.clock())
        self._execute(plan, observations)
        self._publish_budget()
        if not plan.state.group.is_terminal:
            try:
                self.standby.tend(starting_allowed=plan.state.group is GroupState.RUNNING)
            except Exception as exc:  # standby housekeeping must never fail the group: try again next pass
                log.warning("standby_tending_failed", group=self.group.name, error=first_line(exc))
        return plan

    def _observe(self, timeout_s: float) -> list[Observation]:
        import ray

        detector = self._detector
        detector.read_due_beats()
        refs = detector.refs()
        with self.gate.cond:
            pending = bool(self.gate.reports or self._finished)
        if not pending:  # block until something happens, or the pass times out
            wait = detector.wait_s(timeout_s)
            if self.gate.hold_new_calls:  # a hand-over waits for the calls in flight: start it as they end
                wait = min(wait, TASK_POLL_S)
            if self._wake_at is not None:
                wait = max(0.0, min(wait, self._wake_at - self.clock()))
            if refs and not self._tasks.running():
                ray.wait(refs, num_returns=1, timeout=wait)
            else:
                # A task's outcome is not a ref: wait on the condition it notifies (a report wakes it
                # too) and look at the refs again within TASK_POLL_S.
                with self.gate.cond:
                    if not (self.gate.reports or self._finished):
                        self.gate.cond.wait(min(wait, TASK_POLL_S) if refs else wait)
        ready = ray.wait(refs, num_returns=len(refs), timeout=0)[0] if refs else []
        detected = detector.collect(ready)
        with self.gate.cond:
            reports, self.gate.reports = self.gate.reports, []
            finished, self._finished = self._finished, []
            for rank, node in detector.node_updates.items():
                self.gate.nodes[rank] = node
            detector.node_updates.clear()
        observations: list[Observation] = []
        seen: set[int] = set()
        for d in reports + detected:  # reports from calls first: they carry the call's view (e.g. hung)
            rank = d.failure.rank
            status = self.gate.loop.ranks[rank]
            if rank in seen or d.generation != status.generation:
                continue
            if status.state is WorkerState.RUNNING:
                observations.append(RankFailed(d.failure, during_update=self.gate.updates_in_flight > 0))
                self._failed_at[rank] = (d.detected_at, d.died_at_wall)
                seen.add(rank)
            elif status.state is WorkerState.INITIALIZING:
                self._deferred.append(d)  # a survivor re-initialising: judged once it runs again
        observations += finished
        drain = self._drain_seen()
        if drain is not None:
            observations.append(drain)
        loop = self.gate.loop
        if observations or any(loop.ranks[r].state is WorkerState.FAILED for r in loop.unsettled):
            observations.append(self._placement())
        return observations

    def _drain_seen(self) -> DrainSeen | None:
        """The draining nodes and this group's running ranks on them (None: nothing drains, and
        nothing said of an earlier notice is left to forget)."""
        nodes = draining_nodes()
        on_drain: dict[int, str | None] = {}
        if nodes:
            with self.gate.cond:
                on_drain = {r: n for r, n in enumerate(self.gate.nodes) if n in nodes}
        if not on_drain and not self._drains_active:
            return None  # no rank of this group on a draining node: nothing to plan, no placement to read
        self._drains_active = bool(on_drain)  # one more pass once none is: what was said is forgotten
        now, wall = self.clock(), time.time()
        ranks = {r: (None if nodes[n] is None else now + nodes[n] - wall) for r, n in on_drain.items() if n is not None}
        for node in sorted({n for n in on_drain.values() if n is not None} - self._draining_seen):
            self._draining_seen.add(node)
            deadline = nodes[node]
            affected = sorted(r for r, n in on_drain.items() if n == node)
            self.hooks.on_node_draining(self.group.name, node, None if deadline is None else deadline - wall, affected)
        self._draining_seen &= set(nodes)
        return DrainSeen(ranks, frozenset(nodes), self.gate.at_boundary(), self.standby.can_start)

    def _placement(self) -> PlacementSeen:
        group = self.group
        rank_bundles = dict(enumerate(group.rank_bundles))
        spare_pg = group.resource_pool.spare_pg if group.resource_pool is not None else None
        if not self.standby.enabled and spare_pg is None:
            return PlacementSeen(rank_bundles, {}, {}, ())  # every rank goes back to its own bundle
        try:
            placed: dict[BundleRef, str | None] = dict(group.placed_bundles())
        except Exception as exc:  # a GCS hiccup: fall back to the ranks' own bundles
            log.warning("bundle_placement_unknown", group=group.name, error=first_line(exc))
            placed = {}
        free = [
            b
            for b in free_bundles(group.all_bundles(), rank_bundles.values(), dict(group.standbys))
            if b not in self._reserved.values()
        ]
        ready = self.standby.ready_nodes()
        starting = tuple(b for b in group.standbys if b not in ready)
        return PlacementSeen(rank_bundles, placed, ready, tuple(free), starting)

    def _task_finished(self, outcome: Observation) -> None:
        with self.gate.cond:
            self._finished.append(outcome)
            self.gate.cond.notify_all()

    # -- execution ------------------------------------------------------------------------------
    def _execute(self, plan: Plan, observations: list[Observation]) -> None:
        group = self.group
        self._wake_at = plan.wake_at
        drain = next((o for o in observations if isinstance(o, DrainSeen)), None)
        self.standby.want_successors(plan.successors_wanted, drain.nodes if drain is not None else frozenset())
        if plan.hold_calls and not self.gate.hold_new_calls:
            log.info("calls_held_for_hand_over", group=group.name)
        with self.gate.cond:  # held: a hand-over waits for a call boundary; released with the plan that starts it
            self.gate.hold_new_calls = self.gate.hold_new_calls or plan.hold_calls
            if plan.empty:
                self.gate.hold_new_calls = plan.hold_calls
                self.gate.cond.notify_all()
        if plan.empty:
            return
        now = self.clock()
        self._log_transitions(plan)
        for obs in observations:
            if isinstance(obs, ReplacementDone):
                self._reserved.pop(obs.rank, None)
            elif isinstance(obs, InitDone):  # a failed round's capture serves the next round of its recovery
                self._carried = None if obs.complete else obs.carried
        nodes = self._announce(plan, now)  # what the plan changes, before anyone can observe a new generation
        self._publish(plan, nodes)
        if plan.escalation is not None:
            self._tasks.stopping.set()  # tasks still running end at their next wait: the owner decides now
            self.hooks.on_group_failed(group.name, str(self.gate.failure))
            self._publish_worker_states(plan.state, failed_group=True)
            return
        self._start_tasks(plan)

    def _announce(self, plan: Plan, now: float) -> dict[int, str | None]:
        """Tell the hooks what the plan changes (they observe: metrics, logs, events); the nodes of
        the ranks it renews."""
        group, hooks = self.group, self.hooks
        for note in plan.drain_notes:
            hooks.on_drain_outcome(group.name, note.rank, self.gate.nodes[note.rank], note.outcome, note.detail)
        for move in plan.moves:
            if move.target is WorkerState.FAILED and move.source is WorkerState.RUNNING:
                assert move.failure is not None
                if move.new_failure:
                    detected_at, died_at = self._failed_at.get(move.rank, (now, None))
                    detection = (
                        None if died_at is None else max(0.0, time.time() - died_at - (now - detected_at))
                    )
                    hooks.on_worker_failed(
                        group.name, move.rank, move.failure.reason, move.failure.detail, detection
                    )
                else:
                    self._failed_at[move.rank] = (now, None)
            elif move.target is WorkerState.FAILED and move.source is WorkerState.INITIALIZING:
                self._failed_at.setdefault(move.rank, (now, None))  # a survivor whose init failed: recovered from now
            elif move.target is WorkerState.FAILED and move.source is WorkerState.RESTARTING:
                log.warning(
                    "recovery_retry",
                    group=group.name,
                    rank=move.rank,
                    error=move.failure.detail if move.failure else None,
                )
        for replacement in plan.replacements:
            if replacement.handover:  # not a restart: no restart metric, no count
                self._handover_started[replacement.rank] = (now, self.gate.nodes[replacement.rank])
                log.info("hand_over_started", group=group.name, rank=replacement.rank, standby=str(replacement.bundle))
                continue
            view = plan.state.ranks[replacement.rank]
            reason = view.failure.reason if view.failure else FailureReason.DIED
            hooks.on_worker_replaced(group.name, replacement.rank, reason)
        nodes = {r: group.rank_nodes.get(r, self.gate.nodes[r]) for r in plan.renewed}
        for r in plan.handed_over:
            started, left = self._handover_started.pop(r, (now, None))
            self._failed_at.pop(r, None)
            hooks.on_rank_handed_over(group.name, r, now - started, left, nodes[r])
        for r in plan.serving:
            if r not in plan.renewed:  # an aborted hand-over: the rank kept its actor
                self._handover_started.pop(r, None)
        for r in plan.renewed:
            if r not in plan.handed_over:
                detected_at, died_at = self._failed_at.pop(r, (now, None))
                recovery = now - detected_at
                if died_at is not None:
                    recovery = max(recovery, time.time() - died_at)
                hooks.on_worker_recovered(group.name, r, recovery)
            placement = RankPlacement(r, self.gate.original_nodes[r], nodes[r])
            if placement.drifted:
                hooks.on_placement_drift(
                    group.name, r, placement.original_node or "", placement.current_node or ""
                )
        self._publish_worker_states(plan.state)
        if plan.renewed:
            current = dict(enumerate(self.gate.nodes)) | nodes
            hooks.on_drift_state(group.name, count_drifted(dict(enumerate(self.gate.original_nodes)), current))
        return nodes

    def _publish(self, plan: Plan, nodes: dict[int, str | None]) -> None:
        """The plan's state becomes what calls and readers see, then is written through to the record
        before any task acts on it (a daemon killed from then on finds which ranks are not initialised)."""
        group = self.group
        if plan.escalation is not None:
            self.gate.failure = GroupFailedError(f"group {group.name} FAILED: {plan.escalation}")
        with self.gate.cond:  # the plan's state becomes what calls see, in one step
            self.gate.loop = plan.state
            for r in plan.renewed:
                self.gate.nodes[r] = nodes[r]
            self.gate.hold_new_calls = plan.hold_calls  # the hand-overs it starts make the group RECOVERING
            self.gate.cond.notify_all()
        self.record_changed()
        for r in plan.handed_over:  # the successor serves: its predecessor's part is over
            group.end_predecessor(r)

    def _start_tasks(self, plan: Plan) -> None:
        """Start the plan's recovery tasks, and watch the ranks that serve again."""
        for replacement in plan.replacements:
            self._start_replacement(replacement)
        if plan.init is not None:
            for r in plan.init.ranks:
                self._detector.forget(r)
            carried = None if plan.init.recapture else self._carried
            task = InitTask(plan.init, self.group, self.config, self.hooks, self._tasks, self.state_domain, carried)
            self._tasks.start("init", task, plan.init.ranks)
        for r in plan.serving:
            self._detector.watch(r, self.gate.generation(r))
        self._requeue_deferred(plan.serving)

    def _log_transitions(self, plan: Plan) -> None:
        for move in plan.moves:
            reason = move.failure.reason.value if move.failure is not None else None
            log.info("rank_state", group=self.group.name, rank=move.rank, source=move.source.value, target=move.target.value, reason=reason)
        previous = self.gate.loop.group
        if plan.state.group is not previous:
            log.info("group_state", group=self.group.name, source=previous.value, target=plan.state.group.value)
            self.hooks.on_group_state(self.group.name, previous, plan.state.group)

    def _start_replacement(self, replacement: Replacement) -> None:
        rank = replacement.rank
        self._detector.forget(rank)
        if replacement.kind is ReplacementKind.STANDBY:
            self.standby.reserve(replacement.bundle)
        elif replacement.kind is ReplacementKind.SPARE_BUNDLE:
            self._reserved[rank] = replacement.bundle
        task = ReplacementTask(replacement, self.group, self.config, self.hooks, self._bundles)
        self._tasks.start(f"replace-{rank}", task, (rank,))

    def _requeue_deferred(self, serving: tuple[int, ...]) -> None:
        if not self._deferred:
            return
        back = [d for d in self._deferred if d.failure.rank in serving]
        with self.gate.cond:
            self._deferred = [d for d in self._deferred if d.failure.rank not in serving]
            self.gate.reports += back

    def _fail_group(self, message: str) -> None:
        error = GroupFailedError(f"group {self.group.name} FAILED: {message}")
        with self.gate.cond:
            if self.gate.loop.group.is_terminal:
                return
            previous = self.gate.loop.group
            self.gate.loop = dataclasses.replace(self.gate.loop, group=GroupState.FAILED, failure=message)
            self.gate.failure = error
            self.gate.cond.notify_all()
        self._tasks.stopping.set()
        self.hooks.on_group_state(self.group.name, previous, GroupState.FAILED)
        self.hooks.on_group_failed(self.group.name, str(error))
        self._publish_worker_states(self.gate.loop, failed_group=True)

    def _publish_budget(self) -> None:
        # Every pass, since restarts also leave the window as time passes; the hook only on a change.
        policy = self.config.restart
        with self.gate.cond:
            budget = (restarts_in_window(self.gate.loop.history, policy, self.clock()), policy.max_restarts)
        if budget != self._published_budget:
            self._published_budget = budget
            self.hooks.on_restart_budget(self.group.name, *budget)

    def _publish_worker_states(self, state: LoopState, failed_group: bool = False) -> None:
        counts = dict.fromkeys(WorkerState, 0)
        for view in state.ranks:
            target = WorkerState.FAILED if failed_group and view.state is not WorkerState.RUNNING else view.state
            counts[target] += 1
        self.hooks.on_worker_states(self.group.name, counts)
        current = GroupState.FAILED if failed_group else state.group
        self.hooks.on_group_states(self.group.name, {g: int(g is current) for g in GroupState})

    # -- helpers --------------------------------------------------------------------------------
    def _running_generations(self) -> dict[int, int]:
        with self.gate.cond:
            return {v.rank: v.generation for v in self.gate.loop.ranks if v.state is WorkerState.RUNNING}

    def _initialised_ranks(self) -> list[int]:
        """Ranks whose actor ran its init: running, or a survivor re-initialising (not a fresh replacement)."""
        with self.gate.cond:
            views = self.gate.loop.ranks
        return [v.rank for v in views if v.state is WorkerState.RUNNING or (v.state is WorkerState.INITIALIZING and not v.replaced)]

    def _node_of(self, rank: int) -> str | None:
        return self.gate.nodes[rank]

    def _report_bundle_wait(self, waited_s: float) -> None:
        # The same diagnosis as create_group's wait: what is missing and which placement groups hold it.
        pool = self.group.resource_pool
        if pool is None:
            return
        try:
            diagnosis = diagnose(pool.demand(), read_snapshot(), {pg.id.hex() for pg in self.group.placement_groups})
        except Exception:  # diagnosis is best effort; the wait goes on
            return
        self.hooks.on_resource_wait_progress(pool.name_prefix, waited_s, diagnosis)

    def _original_nodes(self) -> dict[int, str]:
        pool = self.group.resource_pool
        if pool is None:
            return {}
        nodes = pool.original_bundle_nodes()
        return {s.rank: nodes[s.bundle] for s in self.group.slots if s.bundle in nodes}
