"""The reconcile loop's pure core, stepped with a fake clock: no Ray.

A fake group is the loop state plus a list of recovery tasks in flight; each test feeds observations
(failures, finished tasks) and checks the plan. The property tests drive random failure sequences
through ``decide`` and check the invariants the supervisor promises.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.placement.standby import BundleRef, ReplacementKind
from supervisor.state import StateConfig, StateKind, StateRecovery
from supervisor.supervision import GroupState, SupervisionConfig, WorkerState, reconcile
from supervisor.supervision.init_policy import InitOutcome, InitPolicy, RankAttempt
from supervisor.supervision.plan import RecoveryStep, StateRestore
from supervisor.supervision.reconcile import (
    InitDone,
    PlacementSeen,
    RankFailed,
    ReplacementDone,
    TaskCrashed,
    decide,
    initial_state,
)
from supervisor.supervision.recovery import RecoveryStopped, TaskRunner
from supervisor.supervision.restart_policy import (
    Failure,
    FailureReason,
    RestartPolicy,
    RestartRecord,
    RestartStrategy,
    prune_to_window,
    restarts_in_window,
    within_window,
)
from supervisor.supervision.states import InvalidTransition, check_rank_transition

WORLD = 4


def _config(**restart) -> SupervisionConfig:
    return SupervisionConfig(restart=RestartPolicy(**restart), init_method="init_model")


def _placement(world: int = WORLD) -> PlacementSeen:
    return PlacementSeen({r: BundleRef(0, r) for r in range(world)}, {}, {}, ())


def _died(rank: int, reason: FailureReason = FailureReason.DIED) -> RankFailed:
    return RankFailed(Failure(rank, reason, "boom"))


@dataclass
class FakeGroup:
    """The loop state of a fake group, with the tasks its plans started, on a fake clock."""

    config: SupervisionConfig
    world: int = WORLD
    now: float = 100.0
    state: object = None
    replacing: set[int] = field(default_factory=set)
    init: tuple[int, ...] | None = None
    plans: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = initial_state(self.world)

    def step(self, *observations):
        plan = decide(self.state, [*observations, _placement(self.world)], self.config, self.now)
        self.state = plan.state
        for r in plan.replacements:
            assert r.rank not in self.replacing, f"rank {r.rank} replaced twice at once"
            self.replacing.add(r.rank)
        if plan.init is not None:
            assert self.init is None, "two inits at once"
            self.init = plan.init.ranks
        self.plans.append(plan)
        return plan

    def replaced(self, rank: int, error: str | None = None):
        self.replacing.discard(rank)
        return self.step(ReplacementDone(rank, error=error))

    def initialised(self, failed=None, **kwargs):
        """The init task ended; ``failed``: ``{rank: InitOutcome}`` of the ranks whose init call did not succeed."""
        ranks, self.init = self.init, None
        assert ranks is not None
        failed = failed or {}
        # The task stops at the first step that fails: no init round after a rendezvous step that did not reach every rank.
        ran = self.config.init_method and not any(kwargs.get(k) for k in ("unreachable", "error", "fatal"))
        attempts = () if not ran else tuple(
            RankAttempt(r, 1, failed.get(r, InitOutcome.OK), None if r not in failed else "boom") for r in ranks
        )
        return self.step(InitDone(ranks, attempts=attempts, **kwargs))

    def rank_states(self):
        return [v.state for v in self.state.ranks]


def test_a_failure_is_planned_once_and_the_same_state_plans_nothing_twice():
    group = FakeGroup(_config())
    plan = group.step(_died(2))
    assert [r.rank for r in plan.replacements] == [2]
    assert plan.replacements[0].kind is ReplacementKind.OWN_BUNDLE
    assert [(r.rank, r.reason) for r in plan.restarts] == [(2, FailureReason.DIED)]
    assert plan.state.group is GroupState.RECOVERING
    assert group.step().empty  # level-based: nothing new observed, nothing new planned
    assert group.step(_died(2)).empty  # a second report of the same death
    plan = group.replaced(2)
    assert plan.init is not None and plan.init.ranks == (2,) and not plan.init.propagate
    assert group.step().empty
    plan = group.initialised()
    assert plan.serving == (2,) and plan.renewed == (2,)
    assert plan.state.group is GroupState.RUNNING
    assert group.step().empty


def test_the_ranks_of_a_lost_node_are_replaced_side_by_side_and_initialised_together():
    group = FakeGroup(_config())
    plan = group.step(_died(2, FailureReason.NODE_LOST))
    plan = group.step(_died(3, FailureReason.NODE_LOST))  # seen while rank 2's replacement runs
    assert [r.rank for r in plan.replacements] == [3]
    assert group.replacing == {2, 3}
    assert group.replaced(2).init is None  # rank 3's actor is not up yet: one init for both
    plan = group.replaced(3)
    assert plan.init is not None and plan.init.ranks == (2, 3)
    plan = group.initialised()
    assert sorted(plan.renewed) == [2, 3] and plan.state.group is GroupState.RUNNING
    assert [r.reason for r in group.state.history] == [FailureReason.NODE_LOST] * 2


def test_a_new_rank_zero_gives_every_rank_the_new_rendezvous_and_reinitialises_them():
    group = FakeGroup(_config())
    group.step(_died(0))
    plan = group.replaced(0)
    assert plan.init is not None and plan.init.ranks == (0, 1, 2, 3) and plan.init.propagate
    assert group.rank_states() == [WorkerState.INITIALIZING] * 4
    plan = group.initialised()
    assert plan.renewed == (0,) and sorted(plan.serving) == [0, 1, 2, 3]  # only rank 0 has a new actor


def test_independent_replicas_keep_serving_when_rank_zero_is_replaced():
    group = FakeGroup(dataclasses.replace(_config(), rejoin_new_rank_zero=False))
    group.step(_died(0))
    plan = group.replaced(0)
    assert plan.init is not None and plan.init.ranks == (0,) and not plan.init.propagate
    assert group.rank_states() == [WorkerState.INITIALIZING] + [WorkerState.RUNNING] * 3
    plan = group.initialised()
    assert plan.renewed == (0,) and plan.serving == (0,)


def test_a_transient_error_is_retried_after_a_backoff_and_charged_again():
    group = FakeGroup(_config(max_restarts=10))
    group.step(_died(1))
    plan = group.replaced(1, error="TimeoutError: placement groups not re-placed")
    assert group.rank_states()[1] is WorkerState.FAILED and not plan.replacements
    assert plan.wake_at is not None and plan.wake_at >= group.now + 0.5
    assert group.step().empty  # still backing off
    group.now = plan.wake_at
    plan = group.step()
    assert [r.rank for r in plan.replacements] == [1]
    assert len(group.state.history) == 2  # every attempt is a restart


def test_retries_stop_at_the_budget_and_name_the_failed_ranks():
    group = FakeGroup(_config(max_restarts=3, restart_window_s=60))
    group.step(_died(0, FailureReason.NODE_LOST), _died(1, FailureReason.NODE_LOST))
    for _ in range(10):
        for rank in sorted(group.replacing):
            group.replaced(rank, error="TimeoutError: not re-placed")
        if group.state.group is GroupState.FAILED:
            break
        group.now += 1.0
        group.step()
    assert group.state.group is GroupState.FAILED
    assert restarts_in_window(group.state.history, group.config.restart, group.now) <= 3
    assert "restart budget exhausted" in group.state.failure
    assert "rank 0 node_lost" in group.state.failure and "rank 1 node_lost" in group.state.failure


def test_one_for_all_rebuilds_every_rank_and_charges_only_the_failure():
    group = FakeGroup(_config(strategy=RestartStrategy.ONE_FOR_ALL))
    plan = group.step(_died(2))
    assert sorted(r.rank for r in plan.replacements) == [0, 1, 2, 3]
    assert [r.rank for r in plan.restarts] == [2]
    for rank in (3, 1, 2):
        assert group.replaced(rank).init is None
    plan = group.replaced(0)
    assert plan.init is not None and plan.init.ranks == (0, 1, 2, 3) and plan.init.propagate
    assert sorted(group.initialised().renewed) == [0, 1, 2, 3]


def test_without_an_init_method_a_replacement_serves_as_soon_as_it_is_up():
    group = FakeGroup(SupervisionConfig())
    group.step(_died(3))
    plan = group.replaced(3)
    assert plan.init is None and plan.renewed == (3,) and plan.state.group is GroupState.RUNNING


def test_an_init_that_runs_out_of_attempts_fails_the_group():
    group = FakeGroup(_config())
    group.step(_died(1))
    group.replaced(1)
    plan = group.initialised(fatal="replacement of rank(s) [1] failed to initialise: boom")
    assert plan.state.group is GroupState.FAILED and "failed to initialise" in plan.escalation
    assert decide(plan.state, [_died(2)], group.config, group.now).empty  # terminal: nothing more


def test_a_survivor_that_cannot_take_the_new_rendezvous_is_replaced_by_the_planner_and_charged():
    group = FakeGroup(_config())
    group.step(_died(0))
    group.replaced(0)
    plan = group.initialised(unreachable=(2,))
    assert [(r.rank, r.reason) for r in plan.restarts] == [(2, FailureReason.DIED)]
    assert [r.rank for r in plan.replacements] == [2] and plan.serving == ()
    plan = group.replaced(2)
    assert plan.init is not None and plan.init.ranks == (0, 1, 2, 3)  # the round runs again, rank 2's new actor in it
    plan = group.initialised()
    assert sorted(plan.renewed) == [0, 2] and plan.state.group is GroupState.RUNNING


def test_a_failed_init_is_planned_like_any_failure_and_its_ranks_serve_together():
    group = FakeGroup(_config())
    group.step(_died(1))
    group.step(_died(2))
    group.replaced(1)
    group.replaced(2)
    assert group.init == (1, 2)
    plan = group.initialised(failed={2: InitOutcome.RAISED})
    assert [(m.rank, m.target) for m in plan.moves] == [(2, WorkerState.FAILED)]
    assert plan.serving == () and group.state.ranks[1].init_done  # rank 1 waits for rank 2
    assert plan.replacements == () and plan.wake_at > group.now  # the init policy's backoff first
    group.now = plan.wake_at
    plan = group.step()
    assert [(r.rank, r.reason) for r in plan.restarts] == [(2, FailureReason.INIT_FAILED)]
    assert [r.rank for r in plan.replacements] == [2] and not plan.replacements[0].fork  # a plain start
    plan = group.replaced(2)
    assert plan.init is not None and plan.init.ranks == (2,) and plan.init.prior_calls == (1,)  # only the failed rank runs again
    plan = group.initialised()
    assert sorted(plan.serving) == [1, 2] and plan.state.group is GroupState.RUNNING


def test_a_rank_out_of_init_attempts_fails_the_group_with_every_ranks_last_attempt():
    config = SupervisionConfig(init_method="init_model", init_policy=InitPolicy(attempts=2, backoff_initial_s=0.0, backoff_jitter_s=0.0))
    group = FakeGroup(config)
    group.step(_died(2))
    group.replaced(2)
    for attempt in (1, 2):
        ranks, group.init = group.init, None
        attempts = tuple(RankAttempt(r, attempt, InitOutcome.RAISED, "ValueError: bad") for r in ranks)
        plan = group.step(InitDone(ranks, attempts=attempts))
        if attempt == 1:
            assert [r.rank for r in plan.replacements] == [2]
            group.replaced(2)
    assert plan.state.group is GroupState.FAILED
    assert "init_model: rank(s) [2] out of attempts" in plan.escalation and "attempt 2/2: raised: ValueError: bad" in plan.escalation


def test_a_crashed_recovery_task_fails_the_group_instead_of_leaving_its_rank_recovering():
    group = FakeGroup(_config())
    group.step(_died(1))
    plan = group.step(TaskCrashed("replace-1", (1,), "KeyError: 7"))
    assert plan.state.group is GroupState.FAILED
    assert plan.escalation == "recovery task replace-1 of rank(s) [1] crashed: KeyError: 7"


def test_a_crashed_task_is_reported_by_the_runner_as_an_observation():
    outcomes = []
    runner = TaskRunner("g", outcomes.append)

    def broken():
        raise KeyError(7)

    runner.start("replace-3", broken, (3,))
    deadline = time.monotonic() + 5
    while not outcomes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcomes == [TaskCrashed("replace-3", (3,), "KeyError: 7")] and runner.running() == []


def test_a_lost_node_goes_to_a_ready_standby_then_to_a_free_placed_spare():
    config = _config()
    state = initial_state(2)
    lost_own = {BundleRef(0, 0): None, BundleRef(0, 1): None, BundleRef(1, 0): "n2", BundleRef(1, 1): "n3"}
    seen = PlacementSeen(
        {0: BundleRef(0, 0), 1: BundleRef(0, 1)}, lost_own, {BundleRef(1, 0): "n2"}, (BundleRef(1, 1),)
    )
    plan = decide(
        state, [_died(0, FailureReason.NODE_LOST), _died(1, FailureReason.NODE_LOST), seen], config, 0.0
    )
    assert [(r.rank, r.kind, r.bundle) for r in plan.replacements] == [
        (0, ReplacementKind.STANDBY, BundleRef(1, 0)),
        (1, ReplacementKind.SPARE_BUNDLE, BundleRef(1, 1)),
    ]


def test_only_listed_transitions_are_allowed():
    check_rank_transition(0, WorkerState.RUNNING, WorkerState.FAILED)
    check_rank_transition(0, WorkerState.RESTARTING, WorkerState.INITIALIZING)
    check_rank_transition(0, WorkerState.RUNNING, WorkerState.RESTARTING)  # a hand-over
    with pytest.raises(InvalidTransition):
        check_rank_transition(0, WorkerState.FAILED, WorkerState.INITIALIZING)
    with pytest.raises(InvalidTransition):
        check_rank_transition(0, WorkerState.FAILED, WorkerState.RUNNING)


# -- properties over random failure sequences ----------------------------------------------------
_EVENT = st.one_of(
    st.tuples(st.just("fail"), st.integers(0, WORLD - 1), st.sampled_from(list(FailureReason))),
    st.tuples(st.just("replaced"), st.integers(0, WORLD - 1), st.booleans()),
    st.tuples(st.just("init"), st.booleans(), st.integers(0, WORLD - 1)),
    st.tuples(st.just("tick"), st.floats(0.0, 30.0), st.none()),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(_EVENT, max_size=60),
    strategy=st.sampled_from(list(RestartStrategy)),
    max_restarts=st.integers(0, 8),
    backoff=st.sampled_from([0.0, 0.5, 2.0]),
    with_init=st.booleans(),
)
def test_random_failure_sequences_keep_the_promises(events, strategy, max_restarts, backoff, with_init):
    config = SupervisionConfig(
        restart=RestartPolicy(
            strategy=strategy, max_restarts=max_restarts, restart_window_s=60.0, backoff_initial_s=backoff
        ),
        init_method="init_model" if with_init else None,
    )
    group = FakeGroup(config)
    for kind, a, b in events:
        before = {v.rank: v.state for v in group.state.ranks}
        if kind == "fail":
            # Only a running rank can be observed failing (the detector watches only those).
            if before[a] is not WorkerState.RUNNING:
                continue
            plan = group.step(_died(a, b))
            failed_now = [m.rank for m in plan.moves if m.new_failure]
            assert failed_now == [a]
        elif kind == "replaced":
            if a not in group.replacing:
                continue
            plan = group.replaced(a, error=None if b else "TimeoutError: not re-placed")
        elif kind == "init":
            if group.init is None:
                continue
            plan = group.initialised(failed={b: InitOutcome.RAISED} if a and b in group.init else {})
        else:
            group.now += a
            plan = group.step()
        # Never more restarts in the window than the budget allows, unless the group failed for it.
        in_window = restarts_in_window(group.state.history, config.restart, group.now)
        assert in_window <= max_restarts or group.state.group is GroupState.FAILED
        # No healthy rank is replaced: a replacement only ever follows a failure of that rank, or (one_for_all) of another.
        for r in plan.replacements:
            assert before[r.rank] is WorkerState.FAILED or any(
                m.rank == r.rank and m.target is WorkerState.FAILED for m in plan.moves
            )
            if strategy is RestartStrategy.ONE_FOR_ONE:
                assert group.state.ranks[r.rank].charged
        # Level-based: deciding again on the same state at the same time plans nothing.
        if group.state.group is not GroupState.FAILED:
            again = decide(group.state, [_placement()], config, group.now)
            assert again.empty, again
        if group.state.group is GroupState.FAILED:
            assert group.state.failure
            break
    # Every rank is accounted for: running, or owned by recovery, or failed with the group.
    for v in group.state.ranks:
        if v.state is WorkerState.RESTARTING:
            assert v.rank in group.replacing
        if v.in_task and v.state is WorkerState.INITIALIZING:
            assert group.init is not None and v.rank in group.init


def test_the_history_keeps_only_the_window_over_weeks_of_restarts():
    """Three weeks of a failure every 7 minutes, some in bursts: the history never outgrows the window."""
    window_s, max_restarts = 600.0, 5
    group = FakeGroup(_config(max_restarts=max_restarts, restart_window_s=window_s, backoff_initial_s=1.0))
    start, longest, restarts = group.now, 0, 0
    while group.now < start + 21 * 86_400:
        group.now += 420.0
        ranks = [restarts % WORLD] if restarts % 10 else [0, 1, 2]  # every tenth failure is a node loss
        plans = [group.step(*(_died(r, FailureReason.NODE_LOST) for r in ranks))]
        for _ in range(10):  # recover: replacements, init, and a backoff for ranks restarted again soon
            if group.state.group is not GroupState.RECOVERING:
                break
            if plans[-1].wake_at is not None:
                group.now = plans[-1].wake_at
                plans.append(group.step())
            plans += [group.replaced(r) for r in sorted(group.replacing)]
            if group.init is not None:
                plans.append(group.initialised())
        restarts += sum(len(p.restarts) for p in plans)
        assert group.state.group is GroupState.RUNNING
        assert all(within_window(r.at, window_s, group.now) for r in group.state.history)
        longest = max(longest, len(group.state.history))
    # Failures 7 minutes apart: at most two in a 10-minute window, one of them a burst of three.
    assert restarts > 4_000 and longest <= 4


def test_pruning_keeps_what_the_window_counts_in_order():
    policy = RestartPolicy(restart_window_s=10.0)
    history = [
        RestartRecord(1, FailureReason.DIED, 0.0),
        RestartRecord(2, FailureReason.HUNG, 5.0),
        RestartRecord(1, FailureReason.DIED, 15.0),
    ]
    assert prune_to_window(history, policy, 15.0) == tuple(history[1:])  # 5.0 is on the boundary: kept
    assert prune_to_window(history, policy, 15.1) == (history[2],)
    assert prune_to_window(history, policy, 100.0) == ()


class _UnprunedGroup(FakeGroup):
    """A fake group whose loop keeps every restart ever made (what the loop did before pruning)."""

    def step(self, *observations):
        with mock.patch.object(reconcile, "prune_to_window", lambda history, policy, now: tuple(history)):
            return super().step(*observations)


def _without_history(plan):
    return dataclasses.replace(plan, state=dataclasses.replace(plan.state, history=()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(
        st.one_of(
            st.tuples(st.just("fail"), st.integers(0, WORLD - 1), st.sampled_from(list(FailureReason))),
            st.tuples(st.just("replaced"), st.integers(0, WORLD - 1), st.booleans()),
            st.tuples(st.just("init"), st.booleans(), st.integers(0, WORLD - 1)),
            st.tuples(st.just("tick"), st.floats(0.0, 90.0), st.none()),  # ticks past the window too
        ),
        max_size=80,
    ),
    strategy=st.sampled_from(list(RestartStrategy)),
    max_restarts=st.integers(0, 8),
    backoff=st.sampled_from([0.0, 0.5, 2.0, 40.0]),
    init_error=st.booleans(),
)
def test_pruning_the_history_never_changes_a_decision(events, strategy, max_restarts, backoff, init_error):
    config = SupervisionConfig(
        restart=RestartPolicy(
            strategy=strategy, max_restarts=max_restarts, restart_window_s=60.0, backoff_initial_s=backoff
        ),
        init_method="init_model",
    )
    pruned, unpruned = FakeGroup(config), _UnprunedGroup(config)
    for kind, a, b in events:
        if kind == "fail":
            if pruned.state.ranks[a].state is not WorkerState.RUNNING:
                continue
            plans = [g.step(_died(a, b)) for g in (pruned, unpruned)]
        elif kind == "replaced":
            if a not in pruned.replacing:
                continue
            error = None if b else "TimeoutError: not re-placed"
            plans = [g.replaced(a, error=error) for g in (pruned, unpruned)]
        elif kind == "init":
            if pruned.init is None:
                continue
            failed = {b: InitOutcome.RAISED} if a and b in pruned.init else {}
            error = "TimeoutError: init did not answer" if init_error and a else None
            plans = [g.initialised(failed={} if error else failed, error=error) for g in (pruned, unpruned)]
        else:
            for g in (pruned, unpruned):
                g.now += a
            plans = [g.step() for g in (pruned, unpruned)]
        # The same plan, the same state but for the history; the pruned one is what the window holds.
        assert _without_history(plans[0]) == _without_history(plans[1])
        window = config.restart.restart_window_s
        kept = tuple(r for r in unpruned.state.history if within_window(r.at, window, pruned.now))
        assert pruned.state.history == kept
        if pruned.state.group is GroupState.FAILED:
            break


@settings(max_examples=200, deadline=None)
@given(
    failures=st.lists(st.tuples(st.integers(0, WORLD - 1), st.floats(0.0, 5.0)), max_size=40),
    max_restarts=st.integers(0, 6),
)
def test_every_failure_of_a_running_rank_is_planned_exactly_once(failures, max_restarts):
    """Failures arrive while replacements run; each one is replaced once, all replacements succeed."""
    config = SupervisionConfig(restart=RestartPolicy(max_restarts=max_restarts, restart_window_s=1e9))
    group = FakeGroup(config)
    observed = planned = 0
    for rank, dt in failures:
        group.now += dt
        if group.state.ranks[rank].state is WorkerState.RUNNING:
            plan = group.step(_died(rank))
            observed += 1
        else:
            plan = group.step()
        planned += len(plan.replacements)
        for done in sorted(group.replacing):
            planned += len(group.replaced(done).replacements)
        if group.init is not None:  # rank 0 was replaced: the others learn its rendezvous
            group.initialised()
        if group.state.group is GroupState.FAILED:
            assert observed > max_restarts
            return
    assert planned == observed and len(group.state.history) == observed
    assert group.state.group is GroupState.RUNNING


# -- the task runner ------------------------------------------------------------------------------
def test_stop_ends_every_task_and_leaves_no_thread():
    outcomes = []
    runner = TaskRunner("g", outcomes.append)
    started = threading.Barrier(4)

    def task():
        started.wait(5)
        while True:
            runner.sleep(0.05)  # raises RecoveryStopped once stop() is called

    for i in range(3):
        runner.start(f"t{i}", task)
    started.wait(5)
    assert runner.running() == ["t0", "t1", "t2"]
    t0 = time.monotonic()
    assert runner.stop(timeout_s=5.0) == []
    assert time.monotonic() - t0 < 2.0
    assert not [t for t in threading.enumerate() if t.name.startswith("recovery-g-")]
    assert outcomes == []  # stopped tasks report nothing


def test_a_finished_task_reports_its_outcome():
    outcomes = []
    runner = TaskRunner("h", outcomes.append)
    runner.start("replace-1", lambda: ReplacementDone(1))
    deadline = time.monotonic() + 5
    while not outcomes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcomes == [ReplacementDone(1)] and runner.running() == []
    with pytest.raises(RecoveryStopped):
        runner.stop(1.0)
        runner.sleep(0.01)


def test_a_transient_init_error_retries_the_same_ranks_after_a_backoff_and_charges_one_restart():
    group = FakeGroup(_config())
    group.step(_died(0))
    group.replaced(0)  # rank 0's init: every rank, with the new rendezvous
    plan = group.initialised(error="TimeoutError: init of rank 3 did not answer")
    assert [(r.rank, r.reason) for r in plan.restarts] == [(0, FailureReason.INIT_FAILED)]
    assert plan.init is None  # the retry waits for its backoff
    group.now = plan.wake_at
    plan = group.step()
    assert plan.init is not None and plan.init.ranks == (0, 1, 2, 3)
    assert sorted(group.initialised().renewed) == [0]


@pytest.mark.parametrize("kind", [StateKind.SHARDED, StateKind.REPLICATED])
def test_a_group_whose_recovery_replays_restores_its_own_snapshot_and_replays_instead_of_rolling_back(kind):
    """A shard no peer holds, or an update cut short: the job-wide rollback, unless the group replays."""
    for recovery, expected in ((StateRecovery.ROLLBACK, StateRestore.ROLLBACK), (StateRecovery.REPLAY, StateRestore.REPLAY)):
        config = dataclasses.replace(_config(), state=StateConfig(kind=kind, snapshot_every=1, recovery=recovery))
        group = FakeGroup(config)
        plan = group.step(RankFailed(Failure(1, FailureReason.DIED, "boom"), during_update=True))
        for r in sorted(r.rank for r in plan.replacements):  # a replaying group rebuilds the survivors too
            plan = group.replaced(r)
        assert plan.init is not None and plan.init.restore is expected
        steps = plan.init.steps
        replays = recovery is StateRecovery.REPLAY
        assert steps[-2:] == ((RecoveryStep.RESTORE, RecoveryStep.REPLAY) if replays else (RecoveryStep.INIT, RecoveryStep.RESTORE))


def test_a_replicated_group_that_replays_still_heals_from_a_live_peer_between_calls():
    config = dataclasses.replace(_config(), state=StateConfig(kind=StateKind.REPLICATED, recovery=StateRecovery.REPLAY))
    group = FakeGroup(config)
    group.step(_died(1))
    plan = group.replaced(1)
    assert plan.init is not None and plan.init.restore is StateRestore.PEER


def test_the_survivors_of_an_update_cut_short_are_rebuilt_at_once_when_the_group_replays():
    """They would wait out their collective's timeout; the replay gives them their state anyway."""
    config = dataclasses.replace(_config(), state=StateConfig(kind=StateKind.SHARDED, recovery=StateRecovery.REPLAY))
    group = FakeGroup(config)
    plan = group.step(RankFailed(Failure(1, FailureReason.DIED, "boom"), during_update=True))
    assert sorted(r.rank for r in plan.replacements) == [0, 1, 2, 3]
    assert [r.reason for r in group.state.history] == [FailureReason.DIED]  # the others are not charged
    assert "the replay restores its state" in (group.state.ranks[0].last_failure or "")
    # Between calls the survivors are idle: they re-form in place.
    group = FakeGroup(config)
    plan = group.step(_died(1))
    assert [r.rank for r in plan.replacements] == [1]
