"""The pure core of a group's reconcile loop: the whole observed state in, the whole next plan out.

:func:`decide` folds what was observed since the last pass (failures, finished recovery tasks, where
bundles and standbys are) into the group's :class:`LoopState` and derives everything to do next:
which ranks failed and why, which to replace now and where, which wait for a backoff, when the init
step runs and on which ranks, when the group escalates. It calls no Ray and reads no clock, so it is
stepped in tests with a fake clock and random failure sequences.

Level-based: a plan records its own effects in the state it returns (a rank being replaced is
RESTARTING, an init in flight is owned by a task), so deciding again on that state with nothing new
observed plans nothing twice.

A rank's recovery is one sequence of typed steps, each planned here and carried out by a task
(:mod:`.recovery`) that reports back as an observation::

    REPLACE (a task per rank)  ->  RENDEZVOUS -> INIT -> RESTORE -> REPLAY (one task: an InitOrder)  ->  SERVE

* a *replacement* per rank (wait for its bundle, start its actor): replacements overlap;
* one *init* at a time over every rank whose actor is up (:class:`InitOrder`, its steps in
  :class:`RecoveryStep` order: the new rendezvous, one round of the init method, the state restore):
  it starts once no replacement is in flight, so the ranks of one node loss initialise together.
  The task runs one round and replaces nothing: a rank whose init failed (raised, hung, died, or
  abandoned in a collective whose peer failed first) or that could not take the new rendezvous is
  reported, and planned here like any failure (FAILED, its backoff, a replacement started plainly,
  then the next round), until it runs out of ``init_policy.attempts`` and the group fails. The ranks
  whose init succeeded wait for the others of their recovery and serve together.

A stateful group (:class:`~supervisor.state.StateKind`) is one collective whose ranks hold state, so
its init also re-forms the group: every live rank joins the init with a fresh rendezvous, and the
init order says how the state comes back (:class:`StateRestore`): from a live peer (replicated state,
a failure outside an update), or by rolling every stateful group back to the newest snapshot
(sharded state, a failure during an update, no peer left). The init task performs it before any rank
of the group serves again.

A rank whose node is being drained (a preemption notice) is *handed over*, which is not a failure:
its successor (a ready standby off the draining nodes; one is started first in a free spare bundle
there if none is ready) takes the rank at the next call boundary (new calls are held until the calls
in flight end), while the old actor still runs; a collective group re-forms around it, and a stateful
one copies every rank's live state across the re-formation (:attr:`StateRestore.LIVE`, the handed-over
rank's from its predecessor). Nothing is charged and nothing rolls back. Without a successor, or with
less notice than ``drain.min_notice_s`` left, the plan says so once per rank and the node's loss is
recovered like any other failure.

Every replacement started for a failed rank is one restart against the budget (a retry after a
transient error too); ranks rebuilt only because of others (one_for_all) are not charged. The state's
restart history keeps only the restarts inside the restart window (pruned on every pass that plans),
so it stays as short as the restart budget over a run of any length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..placement.standby import BundleRef, Replacement, ReplacementKind, plan_replacements
from ..state.kinds import StateKind
from .config import RECOVERY_RETRY_MIN_S, SupervisionConfig
from .drain import DrainOutcome
from .init_policy import InitOutcome
from .observations import (
    DrainSeen,
    InitDone,
    Observation,
    PlacementSeen,
    RankFailed,
    ReplacementDone,
    TaskCrashed,
)
from .plan import (
    DrainNote,
    InitOrder,
    LoopState,
    Plan,
    RankMove,
    RankView,
    RecoveryStep,
    StateRestore,
    initial_state,
)
from .restart_policy import (
    Failure,
    FailureReason,
    RestartRecord,
    RestartStrategy,
    budget_allows,
    budget_message,
    consecutive_restarts,
    prune_to_window,
)
from .states import GroupState, WorkerState, check_group_transition, check_rank_transition

__all__ = [
    "RankView", "LoopState", "RankFailed", "ReplacementDone", "InitDone", "PlacementSeen", "DrainSeen",
    "Observation", "RankMove", "InitOrder", "StateRestore", "DrainNote", "Plan", "decide", "initial_state",
    "RecoveryStep", "TaskCrashed",
]  # fmt: skip


def decide(state: LoopState, observations: Sequence[Observation], config: SupervisionConfig, now: float) -> Plan:
    """The next plan for a group, from its state and what was observed since the last pass (pure)."""
    if state.group.is_terminal or (not observations and state.group is GroupState.RUNNING):
        return Plan(state)  # RUNNING: every rank runs and nothing is pending
    return _Planner(state, config, now).plan(observations)


class _Planner:
    def __init__(self, state: LoopState, config: SupervisionConfig, now: float) -> None:
        self.config, self.policy, self.now = config, config.restart, now
        self.group = state.group
        self.ranks = list(state.ranks)  # indexed by rank
        self.unsettled = set(state.unsettled)
        # Budget and backoff read only restarts inside the window, and `now` only grows: the older ones
        # can never count again, and keeping them would grow the state (and every scan) over a long run.
        self.history = list(prune_to_window(state.history, self.policy, now))
        self.rendezvous_stale = state.rendezvous_stale
        self.init_running = state.init_running
        self.init_not_before = state.init_not_before
        self.rollback_needed = state.rollback_needed
        self.pending_restore = state.pending_restore
        self.pending_survivors = state.pending_survivors
        self.kind = config.state.kind
        self.moves: list[RankMove] = []
        self.restarts: list[RestartRecord] = []
        self.serving: list[int] = []
        self.renewed: list[int] = []
        self.escalation: str | None = None
        self.placement: PlacementSeen | None = None
        self.drain: DrainSeen | None = None
        self.hold_calls = False
        self.successors_wanted = 0
        self.drain_notes: list[DrainNote] = []
        self.handed_over: list[int] = []

    def plan(self, observations: Sequence[Observation]) -> Plan:
        new_failures: list[Failure] = []
        cut_short: list[Failure] = []  # failures inside a call that changes state
        for obs in observations:
            if isinstance(obs, RankFailed):
                if self._fail(obs.failure):
                    new_failures.append(obs.failure)
                    # No peer holds a shard; and an update cut short leaves even replicas at an unknown step.
                    if self.kind is StateKind.SHARDED or (self.kind.stateful and obs.during_update):
                        self.rollback_needed = True
                    if obs.during_update:
                        cut_short.append(obs.failure)
            elif isinstance(obs, ReplacementDone):
                self._replacement_done(obs)
            elif isinstance(obs, InitDone):
                self._init_done(obs)
            elif isinstance(obs, TaskCrashed):
                self._task_crashed(obs)
            elif isinstance(obs, PlacementSeen):
                self.placement = obs
            elif isinstance(obs, DrainSeen):
                self.drain = obs
        if new_failures and self.policy.strategy is RestartStrategy.ONE_FOR_ALL:
            self._rebuild_the_others(new_failures, "one_for_all")
        elif cut_short and self.config.state.replays:
            # The survivors of the update's collective would wait out its timeout (gloo cannot be
            # aborted from outside), and the replay gives them their state anyway: new processes, now.
            self._rebuild_the_others(cut_short, "its collective lost a peer; the replay restores its state")
        replacements: list[Replacement] = []
        init: InitOrder | None = None
        if self.escalation is None:
            replacements = self._start_replacements()
        if self.escalation is None and self.drain is not None:
            replacements += self._plan_hand_overs(self.drain, taken={r.bundle for r in replacements})
        if self.escalation is None:
            init = self._start_init()
        if self.escalation is None and init is None:
            self._serve_initialised()
        return self._finish(replacements, init)

    def _in(self, *states: WorkerState) -> list[int]:
        """Ranks in one of ``states``, in rank order (only unsettled ranks are looked at)."""
        return sorted(r for r in self.unsettled if self.ranks[r].state in states)

    # -- folding observations -------------------------------------------------------------------
    def _move(self, rank: int, target: WorkerState, new_failure: bool = False, **changes: Any) -> None:
        view = self.ranks[rank]
        check_rank_transition(rank, view.state, target)
        failure = changes.get("failure")
        if target is WorkerState.FAILED and failure is not None:
            changes["last_failure"] = f"{failure.reason.value}: {failure.detail}"
        updated = self.ranks[rank] = dataclasses.replace(view, state=target, **changes)
        if target is WorkerState.RUNNING:
            self.unsettled.discard(rank)
        else:
            self.unsettled.add(rank)
        self.moves.append(RankMove(rank, view.state, target, updated.failure, new_failure))

    def _set(self, rank: int, **changes: Any) -> None:
        self.ranks[rank] = dataclasses.replace(self.ranks[rank], **changes)

    def _backoff(self, rank: int, at_least: float = 0.0) -> float:
        consecutive = consecutive_restarts(self.history, rank, self.policy, self.now)
        return max(at_least, self.policy.backoff_s(consecutive + 1))

    def _fail(self, failure: Failure) -> bool:
        if self.ranks[failure.rank].state is not WorkerState.RUNNING:
            return False  # already being recovered: one failure, one recovery
        not_before = self.now + self._backoff(failure.rank)
        self._move(failure.rank, WorkerState.FAILED, True, failure=failure, failed_at=self.now, charged=True, not_before=not_before)
        return True

    def _rebuild_the_others(self, failures: list[Failure], why: str) -> None:
        trigger = min(failures, key=lambda f: f.rank)
        not_before = max(self.ranks[f.rank].not_before for f in failures)
        for view in list(self.ranks):
            if view.state is WorkerState.RUNNING:
                collateral = Failure(view.rank, trigger.reason, f"rebuilt with rank {trigger.rank} ({why})", None)
                self._move(view.rank, WorkerState.FAILED, failure=collateral, failed_at=self.now, charged=False, not_before=not_before)

    def _replacement_done(self, done: ReplacementDone) -> None:
        view = self.ranks[done.rank]
        if view.state is not WorkerState.RESTARTING:
            return  # stale (the group was stopped and supervised again)
        if done.fatal is not None:
            self._escalate(done.fatal)
            self._set(done.rank, in_task=False)
            return
        if done.error is not None and view.handover:  # the successor failed: the old actor still serves
            self._move(done.rank, WorkerState.RUNNING, failure=None, in_task=False, handover=False, charged=True)
            self.serving.append(done.rank)
            self.drain_notes.append(DrainNote(done.rank, DrainOutcome.ABORTED, done.error))
            return
        if done.error is not None:
            assert view.failure is not None
            retried = dataclasses.replace(view.failure, detail=done.error)
            not_before = self.now + self._backoff(done.rank, at_least=RECOVERY_RETRY_MIN_S)
            self._move(done.rank, WorkerState.FAILED, failure=retried, in_task=False, not_before=not_before)
            return
        self._move(done.rank, WorkerState.INITIALIZING, in_task=False, replaced=True)
        if done.rank == 0 and self.config.rejoin_new_rank_zero:
            self.rendezvous_stale = True

    def _init_done(self, done: InitDone) -> None:
        self.init_running = False
        for r in done.ranks:
            self._set(r, in_task=False)
        if done.fatal is not None:
            self._escalate(done.fatal)
            return
        if done.error is not None:  # transient: the same ranks try again, each attempt a restart
            self.init_not_before = self.now + max(RECOVERY_RETRY_MIN_S, self.policy.backoff_s(2))
            charged = [RestartRecord(min(done.ranks), FailureReason.INIT_FAILED, self.now)]
            if not budget_allows(self.history, len(charged), self.policy, self.now):
                self._escalate(self._budget_message(f"the init of rank(s) {list(done.ranks)} kept failing: {done.error}"))
                return
            self._charge(charged)
            return
        init_policy = self.config.init_policy
        failed = [a for a in done.attempts if not a.outcome.ok]
        for attempt in done.attempts:
            counted = not attempt.outcome.ok and attempt.outcome is not InitOutcome.ABANDONED
            view = self.ranks[attempt.rank]
            self._set(attempt.rank, last_attempt=attempt, init_failures=view.init_failures + int(counted), init_done=attempt.outcome.ok)
        exhausted = [a.rank for a in failed if self.ranks[a.rank].init_failures >= init_policy.attempts]
        if exhausted:
            self._escalate(self._init_exhausted(done, exhausted))
            return
        # One backoff for the round, on the highest attempt among its failed ranks (as init_group waits).
        worst = max((self.ranks[a.rank].init_failures for a in failed), default=0)
        not_before = self.now + (init_policy.backoff_s(worst) if failed else 0.0)
        for attempt in failed:
            failure = Failure(attempt.rank, attempt.outcome.failure_reason, attempt.error or attempt.outcome.value, attempt.node_id)
            self._move(attempt.rank, WorkerState.FAILED, failure=failure, failed_at=self.now, charged=True, not_before=not_before, init_done=False, plain_start=True)
        for r in done.unreachable:
            if self.ranks[r].state is WorkerState.INITIALIZING:
                failure = Failure(r, FailureReason.DIED, "could not take the new rendezvous", None)
                self._move(r, WorkerState.FAILED, failure=failure, failed_at=self.now, charged=True, not_before=self.now, init_done=False)
        if not done.attempts and not done.unreachable:  # nothing to run (a rendezvous and a restore only)
            for r in done.ranks:
                if self.ranks[r].state is WorkerState.INITIALIZING:
                    self._set(r, init_done=True)

    def _init_exhausted(self, done: InitDone, exhausted: list[int]) -> str:
        attempts = self.config.init_policy.attempts
        latest = [v.last_attempt for v in self.ranks if v.last_attempt is not None and v.state is WorkerState.INITIALIZING]
        lines = "; ".join(a.describe(attempts) for a in sorted(latest, key=lambda a: a.rank))
        method = self.config.init_method or "init"
        return f"replacement of rank(s) {list(done.ranks)} failed to initialise: {method}: rank(s) {sorted(exhausted)} out of attempts; {lines}"

    def _task_crashed(self, crashed: TaskCrashed) -> None:
        if crashed.task == "init":
            self.init_running = False
        for r in crashed.ranks:
            self._set(r, in_task=False)
        self._escalate(f"recovery task {crashed.task} of rank(s) {list(crashed.ranks)} crashed: {crashed.error}")

    def _serve_initialised(self) -> None:
        """The ranks of a recovery serve together, once every one of them initialised (and the state is back)."""
        if not self.unsettled or self.init_running:
            return
        views = [self.ranks[r] for r in sorted(self.unsettled)]
        if all(v.state is WorkerState.INITIALIZING and v.init_done and not v.in_task for v in views):
            self.pending_restore, self.pending_survivors = None, ()
            for v in views:
                self._serve(v.rank, replaced=v.replaced)

    def _serve(self, rank: int, replaced: bool) -> None:
        view = self.ranks[rank]
        handover = view.handover
        # What was said of a notice stays said for the same actor (a survivor re-formed around a hand-over).
        drain_said = None if replaced else view.drain_said
        self._move(
            rank, WorkerState.RUNNING, failure=None, replaced=False, charged=True, handover=False, drain_said=drain_said,
            init_done=False, init_failures=0, last_attempt=None, plain_start=False,
        )  # fmt: skip
        self.serving.append(rank)
        if replaced:
            self._set(rank, generation=view.generation + 1)
            self.renewed.append(rank)
            if handover:
                self.handed_over.append(rank)

    def _charge(self, records: list[RestartRecord]) -> None:
        self.history += records
        self.restarts += records

    def _escalate(self, message: str) -> None:
        if self.escalation is None:
            self.escalation = message

    def _budget_message(self, what: str) -> str:
        return budget_message(self.history, self.policy, self.now, what)

    # -- what to start --------------------------------------------------------------------------
    def _start_replacements(self) -> list[Replacement]:
        due = [r for r in self._in(WorkerState.FAILED) if self.ranks[r].not_before <= self.now]
        if not due or self.placement is None:  # the loop observes the placement whenever a rank is FAILED
            return []
        charged = [RestartRecord(r, self._reason(r), self.now) for r in due if self.ranks[r].charged]
        if not budget_allows(self.history, len(charged), self.policy, self.now):
            failing = [self.ranks[r] for r in sorted(self.unsettled) if self.ranks[r].charged]
            causes = "; ".join(_describe(v.failure) for v in failing if v.failure is not None)
            self._escalate(self._budget_message(f"failed: {causes}"))
            return []
        self._charge(charged)
        seen = self.placement
        plan = plan_replacements(due, seen.rank_bundles, seen.bundle_nodes, seen.standbys, seen.free, self.config.standby_reach)
        # A rank whose init failed starts plainly, in its own bundle or a spare (a fork, or the standby, may be what failed).
        plan = [dataclasses.replace(r, fork=False) if self.ranks[r.rank].plain_start else r for r in plan]
        for replacement in plan:
            self._move(replacement.rank, WorkerState.RESTARTING, in_task=True, restarts=self.ranks[replacement.rank].restarts + 1)
        return plan

    def _plan_hand_overs(self, seen: DrainSeen, taken: set[BundleRef]) -> list[Replacement]:
        """Hand-overs of running ranks on draining nodes: started at a call boundary once a successor
        is ready off those nodes; until then, successors are asked for (or the plan says why none).
        ``taken``: bundles this pass's failure replacements go to."""
        for view in list(self.ranks):  # a notice withdrawn (or a rank moved off it) is forgotten
            if view.drain_said is not None and view.rank not in seen.ranks:
                self._set(view.rank, drain_said=None)
        # A rank renewed in this pass runs a new actor: where it runs is learnt on the next pass.
        due = sorted(r for r in seen.ranks if self.ranks[r].state is WorkerState.RUNNING and r not in self.renewed)
        if not due:
            return []
        policy = self.config.drain
        placement = self.placement or PlacementSeen({}, {}, {}, ())
        off_drain = {b: n for b, n in placement.bundle_nodes.items() if n and n not in seen.nodes}
        standbys = sorted(b for b, node in placement.standbys.items() if b in off_drain and node not in seen.nodes and b not in taken)
        free = sum(1 for b in placement.free if b in off_drain and b not in taken) if seen.can_start_successors else 0
        free += sum(1 for b in placement.starting if b in off_drain)
        chosen: list[Replacement] = []
        for rank in due:
            deadline = seen.ranks[rank]
            if not policy.hand_over:
                self._say(rank, DrainOutcome.IGNORED, "the group does not act on drain notices (drain.hand_over = false)")
            elif deadline is not None and deadline - self.now < policy.min_notice_s:
                left = max(0.0, deadline - self.now)
                self._say(rank, DrainOutcome.DEADLINE_TOO_SHORT, f"{left:.1f}s left before the deadline, less than drain.min_notice_s = {policy.min_notice_s:g}s")
            elif standbys:
                chosen.append(Replacement(rank, ReplacementKind.STANDBY, standbys.pop(0), handover=True))
            elif free > 0:
                free -= 1
                self.successors_wanted += 1
            else:
                self._say(rank, DrainOutcome.NO_CAPACITY, "no ready standby and no free spare bundle off the draining node(s)")
        if not chosen:
            return []
        if not seen.at_boundary:
            self.hold_calls = True  # the calls in flight end; then the hand-overs start together
            return []
        for replacement in chosen:
            view = self.ranks[replacement.rank]
            failure = Failure(replacement.rank, FailureReason.DRAINED, "its node is being drained", None)
            self._move(replacement.rank, WorkerState.RESTARTING, failure=failure, failed_at=self.now, in_task=True, handover=True, charged=False, drain_said=view.drain_said)
        return chosen

    def _say(self, rank: int, outcome: DrainOutcome, detail: str) -> None:
        if self.ranks[rank].drain_said is not outcome:
            self._set(rank, drain_said=outcome)
            self.drain_notes.append(DrainNote(rank, outcome, detail))

    def _reason(self, rank: int) -> FailureReason:
        failure = self.ranks[rank].failure
        return failure.reason if failure is not None else FailureReason.DIED

    def _start_init(self) -> InitOrder | None:
        if self.init_running or self.now < self.init_not_before or self._in(WorkerState.RESTARTING):
            return None  # one init at a time; the ranks of one failure initialise together
        waiting = [r for r in self._in(WorkerState.INITIALIZING) if not self.ranks[r].in_task and not self.ranks[r].init_done]
        if not waiting and not (self.rendezvous_stale and self._in(WorkerState.INITIALIZING)):
            return None
        run_init = self.config.init_method is not None
        handing_over = any(self.ranks[r].handover for r in waiting)
        if self.kind.stateful or (handing_over and self.config.collective):
            return self._start_stateful_init(waiting, run_init)
        if not run_init and not self.rendezvous_stale:
            for r in waiting:  # nothing to run: they serve as soon as their actor is up
                self._serve(r, replaced=self.ranks[r].replaced)
            return None
        if self.rendezvous_stale:  # every live rank learns the new rendezvous (and re-runs init)
            for view in list(self.ranks):
                if view.state is WorkerState.RUNNING:
                    self._move(view.rank, WorkerState.INITIALIZING)
            waiting = [r for r in self._in(WorkerState.INITIALIZING) if not self.ranks[r].in_task]
        for r in waiting:
            self._set(r, in_task=True, init_done=False)
        order = InitOrder(tuple(waiting), propagate=self.rendezvous_stale, run_init=run_init, prior_calls=self._prior_calls(waiting))
        self.rendezvous_stale = False
        self.init_running = True
        return order

    def _prior_calls(self, ranks: Sequence[int]) -> tuple[int, ...]:
        return tuple(a.attempt if (a := self.ranks[r].last_attempt) is not None else 0 for r in ranks)

    def _start_stateful_init(self, waiting: list[int], run_init: bool) -> InitOrder:
        # The collective re-forms: every live rank leaves RUNNING and joins this init.
        survivors = [v.rank for v in self.ranks if v.state is WorkerState.RUNNING]
        for r in survivors:
            self._move(r, WorkerState.INITIALIZING)
        ranks = self._in(WorkerState.INITIALIZING)
        for r in ranks:
            self._set(r, in_task=True, init_done=False)
        # A rank 0 whose new actor has not run an init picked its rendezvous at creation; any other
        # re-formation picks a fresh one on rank 0's node (stale peers may still reach the old port).
        rank_zero_new = self.ranks[0].replaced and self.ranks[0].last_attempt is None
        retry = self.pending_restore is not None  # a round of this re-formation failed: restore as planned then
        # A state lost at an unknown step: the group's own snapshot and replay, or the job's rollback.
        lost = StateRestore.REPLAY if self.config.state.replays else StateRestore.ROLLBACK
        if not self.kind.stateful:
            restore = StateRestore.NONE  # a collective without state re-forms around a hand-over
        elif self.rollback_needed:
            restore = lost
        elif retry:
            assert self.pending_restore is not None
            restore, survivors = self.pending_restore, list(self.pending_survivors)
        elif not (survivors or any(self.ranks[r].handover for r in ranks)):
            restore = lost
        elif any(self.ranks[r].handover for r in ranks):
            restore = StateRestore.LIVE
        else:
            restore = StateRestore.PEER
        order = InitOrder(
            tuple(ranks), propagate=True, run_init=run_init, restore=restore,
            fresh_rendezvous=not rank_zero_new, survivors=tuple(survivors), recapture=not retry, prior_calls=self._prior_calls(ranks),
        )  # fmt: skip
        self.pending_restore, self.pending_survivors = restore, tuple(survivors)
        self.rendezvous_stale = False
        self.rollback_needed = False
        self.init_running = True
        return order

    # -- the resulting state --------------------------------------------------------------------
    def _finish(self, replacements: list[Replacement], init: InitOrder | None) -> Plan:
        if self.escalation is not None:
            target = GroupState.FAILED
        elif not self.unsettled:
            target = GroupState.RUNNING
        else:
            target = GroupState.RECOVERING
        check_group_transition(self.group, target)
        backoffs = [self.ranks[r].not_before for r in self._in(WorkerState.FAILED) if self.ranks[r].not_before > self.now]
        if self.init_not_before > self.now and self._in(WorkerState.INITIALIZING):
            backoffs.append(self.init_not_before)
        state = LoopState(
            target, tuple(self.ranks), tuple(self.history), self.rendezvous_stale, self.init_running, self.init_not_before,
            self.escalation, frozenset(self.unsettled), self.rollback_needed, self.pending_restore, self.pending_survivors,
        )  # fmt: skip
        return Plan(
            state, tuple(self.moves), tuple(self.restarts), tuple(replacements), init, tuple(self.serving), tuple(self.renewed),
            self.escalation, min(backoffs) if backoffs else None, self.hold_calls and self.escalation is None,
            self.successors_wanted, tuple(self.drain_notes), tuple(self.handed_over),
        )  # fmt: skip


def _describe(failure: Failure) -> str:
    return f"rank {failure.rank} {failure.reason.value}" + (f" ({failure.detail})" if failure.detail else "")
