"""Drain (preemption) notices: the pure planning of hand-overs, and hand-overs on a real Ray cluster
whose GCS got a real DrainNode call (what ``ray drain-node`` and KubeRay send)."""

from __future__ import annotations

import threading
import time

import pytest
import ray
import torch
from clusters import connected_cluster
from hypothesis import given, settings
from hypothesis import strategies as st
from state_workers import StatefulWorker, expected_state
from supervised_workers import SlowStartWorker

from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
from supervisor.core.protocol import DataProto
from supervisor.core.state_tree import state_digest
from supervisor.observability.metrics import REGISTRY
from supervisor.placement.standby import BundleRef, ReplacementKind, StandbyReach
from supervisor.state.kinds import StateConfig, StateKind
from supervisor.supervision import GroupState, GroupSupervisor, SupervisionConfig, WorkerState
from supervisor.supervision.drain import DrainOutcome, DrainPolicy, DrainReader
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.reconcile import (
    DrainSeen,
    InitDone,
    PlacementSeen,
    RankFailed,
    ReplacementDone,
    StateRestore,
    decide,
    initial_state,
)
from supervisor.supervision.restart_policy import Failure, FailureReason, RestartPolicy, RestartStrategy

# -- the planning, pure ---------------------------------------------------------------------------
DRAINING, OTHER = "node-a", "node-b"
RANKS = {0: BundleRef(0, 0), 1: BundleRef(0, 1)}
SPARES = (BundleRef(1, 0), BundleRef(1, 1))


def _seen(standbys=(), free=SPARES, spare_node=OTHER) -> PlacementSeen:
    nodes = {RANKS[0]: DRAINING, RANKS[1]: DRAINING, **{b: spare_node for b in SPARES}}
    return PlacementSeen(RANKS, nodes, {b: nodes[b] for b in standbys}, tuple(b for b in free if b not in standbys))


def _drain(ranks=(0, 1), deadline: float | None = 130.0, at_boundary=False) -> DrainSeen:
    return DrainSeen({r: deadline for r in ranks}, frozenset({DRAINING}), at_boundary)


def _config(**kwargs) -> SupervisionConfig:
    return SupervisionConfig(init_method="init_model", **kwargs)


def test_a_hand_over_waits_for_a_standby_then_a_call_boundary_and_charges_nothing():
    config, state, now = _config(), initial_state(2), 100.0
    plan = decide(state, [_drain(), _seen()], config, now)
    assert plan.successors_wanted == 2 and not plan.replacements and not plan.drain_notes  # standbys are started first
    plan = decide(plan.state, [_drain(), _seen(standbys=SPARES)], config, now)
    assert plan.hold_calls and not plan.replacements  # calls in flight end first
    assert plan.state.group is GroupState.RUNNING
    plan = decide(plan.state, [_drain(at_boundary=True), _seen(standbys=SPARES)], config, now)
    assert [(r.rank, r.kind, r.bundle, r.handover) for r in plan.replacements] == [
        (0, ReplacementKind.STANDBY, SPARES[0], True), (1, ReplacementKind.STANDBY, SPARES[1], True),
    ]  # fmt: skip
    assert not plan.restarts and not plan.state.history and not plan.hold_calls
    assert [v.state for v in plan.state.ranks] == [WorkerState.RESTARTING] * 2
    plan = decide(plan.state, [ReplacementDone(0), ReplacementDone(1)], config, now + 1)
    assert plan.init is not None and plan.init.ranks == (0, 1) and plan.init.restore is StateRestore.NONE
    # The observer still places them on the draining node (their new nodes are learnt as they serve).
    plan = decide(plan.state, [InitDone((0, 1)), _drain(), _seen()], config, now + 2)
    assert plan.handed_over == (0, 1) and plan.renewed == (0, 1) and plan.state.group is GroupState.RUNNING
    assert not plan.drain_notes and not plan.successors_wanted
    assert not plan.state.history  # nothing against the restart budget


def test_a_notice_without_capacity_or_time_is_said_once_and_left_to_recovery():
    config, now = _config(), 100.0
    plan = decide(initial_state(2), [_drain(), _seen(free=())], config, now)
    assert [(n.rank, n.outcome) for n in plan.drain_notes] == [(0, DrainOutcome.NO_CAPACITY), (1, DrainOutcome.NO_CAPACITY)]
    again = decide(plan.state, [_drain(), _seen(free=())], config, now + 1)
    assert again.empty and not again.drain_notes  # said once
    # Free spares are no room for a successor where standbys cannot be started (not a Worker subclass).
    cannot = DrainSeen({0: 130.0, 1: 130.0}, frozenset({DRAINING}), False, can_start_successors=False)
    plan = decide(initial_state(2), [cannot, _seen()], config, now)
    assert {n.outcome for n in plan.drain_notes} == {DrainOutcome.NO_CAPACITY} and not plan.successors_wanted
    # Spares on the draining node itself are no capacity either.
    plan = decide(initial_state(2), [_drain(), _seen(spare_node=DRAINING)], config, now)
    assert {n.outcome for n in plan.drain_notes} == {DrainOutcome.NO_CAPACITY}
    plan = decide(initial_state(2), [_drain(deadline=now + 2.0), _seen(standbys=SPARES)], config, now)
    assert {n.outcome for n in plan.drain_notes} == {DrainOutcome.DEADLINE_TOO_SHORT} and not plan.hold_calls
    ignoring = _config(drain=DrainPolicy(hand_over=False))
    plan = decide(initial_state(2), [_drain(), _seen(standbys=SPARES)], ignoring, now)
    assert {n.outcome for n in plan.drain_notes} == {DrainOutcome.IGNORED} and not plan.replacements
    # The node goes: a failure like any other, charged.
    plan = decide(plan.state, [RankFailed(Failure(0, FailureReason.NODE_LOST, "gone")), _seen()], ignoring, now + 5)
    assert [r.reason for r in plan.restarts] == [FailureReason.NODE_LOST]


def test_a_failure_and_a_hand_over_in_one_pass_never_share_a_standby():
    config = _config(standby_reach=StandbyReach.ANY_NODE)
    failed = RankFailed(Failure(0, FailureReason.DIED, "killed"))
    plan = decide(initial_state(2), [failed, _drain(ranks=(1,), at_boundary=True), _seen(standbys=SPARES[:1])], config, 100.0)
    bundles = [r.bundle for r in plan.replacements]
    assert len(bundles) == len(set(bundles)) and SPARES[0] in bundles
    assert [(r.rank, r.handover) for r in plan.replacements] == [(0, False)]  # the failure took the one standby


def test_a_successor_that_fails_leaves_the_old_actor_serving_and_is_tried_again():
    config, now = _config(), 100.0
    plan = decide(initial_state(2), [_drain(ranks=(1,), at_boundary=True), _seen(standbys=SPARES[:1])], config, now)
    assert [r.rank for r in plan.replacements] == [1]
    plan = decide(plan.state, [ReplacementDone(1, error="the standby died")], config, now + 1)
    assert plan.serving == (1,) and not plan.renewed and plan.state.group is GroupState.RUNNING
    assert [n.outcome for n in plan.drain_notes] == [DrainOutcome.ABORTED] and not plan.state.history
    plan = decide(plan.state, [_drain(ranks=(1,), at_boundary=True), _seen(standbys=SPARES[1:])], config, now + 2)
    assert [(r.rank, r.bundle) for r in plan.replacements] == [(1, SPARES[1])]


def test_a_stateful_group_re_forms_around_a_hand_over_with_every_ranks_live_state():
    config = _config(state=StateConfig(kind=StateKind.SHARDED))
    plan = decide(initial_state(2), [_drain(ranks=(1,), at_boundary=True), _seen(standbys=SPARES[:1])], config, 0.0)
    plan = decide(plan.state, [ReplacementDone(1)], config, 1.0)
    assert plan.init is not None
    assert (plan.init.ranks, plan.init.survivors, plan.init.restore) == ((0, 1), (0,), StateRestore.LIVE)
    assert plan.init.fresh_rendezvous and not plan.state.rollback_needed
    # Rank 0 (no capacity left for it) is said once, also across the re-formation it takes part in.
    two = _drain(ranks=(0, 1), at_boundary=True)
    plan = decide(initial_state(2), [two, _seen(standbys=SPARES[:1], free=())], config, 0.0)
    assert [(n.rank, n.outcome) for n in plan.drain_notes] == [(1, DrainOutcome.NO_CAPACITY)]
    plan = decide(plan.state, [ReplacementDone(0), DrainSeen({1: 130.0}, frozenset({DRAINING}))], config, 1.0)
    plan = decide(plan.state, [InitDone((0, 1)), DrainSeen({1: 130.0}, frozenset({DRAINING}))], config, 2.0)
    assert plan.handed_over == (0,) and not plan.drain_notes
    assert not decide(plan.state, [DrainSeen({1: 130.0}, frozenset({DRAINING}))], config, 3.0).drain_notes
    # Its node's notice withdrawn (or the rank moved): forgotten, and said again if it comes back.
    plan = decide(plan.state, [DrainSeen({}, frozenset())], config, 4.0)
    plan = decide(plan.state, [DrainSeen({1: 130.0}, frozenset({DRAINING})), _seen(free=())], config, 5.0)
    assert [(n.rank, n.outcome) for n in plan.drain_notes] == [(1, DrainOutcome.NO_CAPACITY)]
    # A collective without state re-forms too, with nothing to restore.
    collective = _config(restart=RestartPolicy(strategy=RestartStrategy.ONE_FOR_ALL))
    plan = decide(initial_state(2), [_drain(ranks=(1,), at_boundary=True), _seen(standbys=SPARES[:1])], collective, 0.0)
    plan = decide(plan.state, [ReplacementDone(1)], collective, 1.0)
    assert plan.init is not None and plan.init.ranks == (0, 1) and plan.init.restore is StateRestore.NONE


_STEP = st.one_of(
    st.tuples(st.just("drain"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("fail"), st.integers(0, 3), st.none()),
    st.tuples(st.just("replaced"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("init"), st.none(), st.none()),
)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(_STEP, max_size=40), stateful=st.booleans())
def test_hand_overs_never_charge_the_budget_nor_roll_back(steps, stateful):
    """Random notices, failures and task outcomes: every restart charged is a failure's, a rollback
    is only ever planned after a failure, and every move is a legal transition (decide checks)."""
    config = _config(state=StateConfig(kind=StateKind.SHARDED if stateful else StateKind.NONE), restart=RestartPolicy(max_restarts=1000))
    ranks = {r: BundleRef(0, r) for r in range(4)}
    nodes = {**{b: f"n{b.index}" for b in ranks.values()}, **{BundleRef(1, i): "spare" for i in range(4)}}
    placement = PlacementSeen(ranks, nodes, {BundleRef(1, i): "spare" for i in range(4)}, ())
    state, now, failed = initial_state(4), 0.0, False
    for kind, rank, flag in steps:
        now += 1.0
        if kind == "drain":
            observations = [DrainSeen({rank: None}, frozenset({f"n{rank}"}), flag), placement]
        elif kind == "fail":
            failed = True
            observations = [RankFailed(Failure(rank, FailureReason.DIED, "x")), placement]
        elif kind == "replaced":
            if state.ranks[rank].state is not WorkerState.RESTARTING:
                continue
            observations = [ReplacementDone(rank, error=None if flag else "flaky"), placement]
        else:
            if not state.init_running:
                continue
            observations = [InitDone(tuple(r.rank for r in state.ranks if r.state is WorkerState.INITIALIZING and r.in_task))]
        plan = decide(state, observations, config, now)
        assert all(r.reason is not FailureReason.DRAINED for r in plan.restarts)
        if plan.init is not None and plan.init.restore is StateRestore.ROLLBACK:
            assert failed
        assert plan.escalation is None
        state = plan.state


def test_the_drain_reader_keeps_its_last_answer_when_the_gcs_fails_and_never_makes_a_caller_wait():
    answers = [{"n1": 5000}, RuntimeError("gcs away"), {}]

    def read():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reader = DrainReader(read, period_s=3600.0)  # its own thread reads once, then sleeps: refresh() steps it
    _wait(lambda: reader.nodes() == {"n1": 5.0}, 10, "the first read")
    reader.refresh()
    assert reader.nodes() == {"n1": 5.0}  # the GCS did not answer: the notice stands
    reader.refresh()
    assert reader.nodes() == {}


# -- on a real cluster ----------------------------------------------------------------------------
ACCELERATOR = "drain-test"
GPU_NODE = {"num_cpus": 2, "num_gpus": 2, "resources": {f"accelerator_type:{ACCELERATOR}": 10}}
FAST_INIT = InitPolicy(timeout_s=30, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)


@pytest.fixture(scope="module")
def ray_cluster():
    """A CPU head and three 2-GPU nodes; a test drains one, removes it and adds a fresh one back."""
    with connected_cluster({"num_cpus": 4, "num_gpus": 0}, [GPU_NODE] * 3) as (cluster, nodes):
        cluster.gpu_nodes = nodes
        yield cluster


def _send_drain(node_id: str, deadline_s: float) -> None:
    from ray.core.generated import autoscaler_pb2

    gcs = ray._private.worker.global_worker.gcs_client
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    accepted, why = gcs.drain_node(node_id, reason, "test preemption", int((time.time() + deadline_s) * 1000))
    assert accepted, why


def _replace_node(cluster, node_id: str) -> None:
    """The drained node goes (at its deadline, as the cloud would take it); a fresh one joins."""
    node = next(n for n in cluster.gpu_nodes if n.node_id == node_id)
    cluster.remove_node(node)
    cluster.gpu_nodes = [n for n in cluster.gpu_nodes if n is not node] + [cluster.add_node(**GPU_NODE)]
    cluster.wait_for_nodes()


def _supervise(cls_with_init, capacity_factor, **config):
    pool = ResourcePool([2], max_colocate_count=1, accelerator_type=ACCELERATOR, capacity_factor=capacity_factor)
    group = create_group(pool, cls_with_init)
    init_group(group, "init_model", policy=FAST_INIT)
    config = SupervisionConfig(
        init_method="init_model", init_policy=FAST_INIT, probe_period_s=1.0, bundle_wait_timeout_s=120, standby_check_s=0.2,
        restart=RestartPolicy(max_restarts=10), **config,
    )  # fmt: skip
    return pool, group, GroupSupervisor(group, config).start()


def _stop(pool, group, sup):
    try:
        sup.stop()
    finally:
        group.kill()
        pool.teardown()


def _wait(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(0.05)


def _drains(group, outcome) -> float:
    return REGISTRY.get_sample_value("supervisor_drains_total", {"group": group.name, "outcome": outcome}) or 0.0


def _alive(handle) -> bool:
    from ray._private import state  # the GCS's actor table (the public state API needs the dashboard)

    return state.actors(handle._actor_id.hex()).get("State") != "DEAD"


class _CallLoop:
    """The driver: calls ``call(i)`` back to back on a thread, keeping every result and error."""

    def __init__(self, call) -> None:
        self.call, self.results, self.errors = call, [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.results.append(self.call(i))
            except Exception as exc:
                self.errors.append(exc)
                return
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def test_a_preempted_nodes_ranks_are_handed_over_while_calls_go_on_and_its_loss_costs_nothing(ray_cluster, no_leaks):
    pool, group, sup = part = _supervise(ClassWithInitArgs(SlowStartWorker, start_s=0.2), capacity_factor=2.0)
    try:
        node = group.rank_nodes[0]
        assert group.rank_nodes[1] == node  # packed: one notice takes both ranks
        old = list(group.workers)
        batch = DataProto.from_dict(tensors={"ids": torch.arange(4)})
        calls = _CallLoop(lambda i: group.generate(batch).batch["ids"].tolist())
        _wait(lambda: len(calls.results) >= 3, 30, "the driver's first calls")
        _send_drain(node, deadline_s=60)
        _wait(lambda: set(group.rank_nodes.values()).isdisjoint({node}) and sup.state is GroupState.RUNNING, 60, "both ranks handed over")
        served = len(calls.results)
        _wait(lambda: len(calls.results) >= served + 3, 30, "calls after the hand-over")
        assert not calls.errors, calls.errors
        assert all(r == [0, 1, 2, 3] for r in calls.results)
        assert [s.restarts for s in sup.ranks()] == [0, 0] and not sup.restart_history()
        assert _drains(group, "handed_over") == 2
        assert group.identity()[1]["initialized_as"] == 1  # the successor took rank 1's identity and init
        _wait(lambda: not any(_alive(h) for h in old), 30, "the old actors to be stopped")

        _replace_node(ray_cluster, node)  # the deadline: the node goes, and with it nothing of the job
        time.sleep(3.0)
        assert sup.state is GroupState.RUNNING and [s.restarts for s in sup.ranks()] == [0, 0]
        calls.stop()
        assert not calls.errors, calls.errors
    finally:
        _stop(*part)


def test_a_stateful_groups_hand_over_keeps_every_ranks_state_and_rolls_nothing_back(ray_cluster, no_leaks):
    size = 64
    pool, group, sup = part = _supervise(
        ClassWithInitArgs(StatefulWorker, size=size, shared=False), capacity_factor=2.0, state=StateConfig(kind=StateKind.SHARDED),
    )
    try:
        node = group.rank_nodes[0]
        steps = _CallLoop(lambda i: group.train_step(i))
        _wait(lambda: len(steps.results) >= 3, 30, "the first steps")
        _send_drain(node, deadline_s=60)
        _wait(lambda: set(group.rank_nodes.values()).isdisjoint({node}) and sup.state is GroupState.RUNNING, 60, "both ranks handed over")
        done = len(steps.results)
        _wait(lambda: len(steps.results) >= done + 3, 30, "steps after the hand-over")
        steps.stop()
        assert not steps.errors, steps.errors  # no RolledBack, no failure
        n = len(steps.results)
        for info in group.info():  # every rank carries on from its own state, bit for bit
            assert info["step"] == n and info["digest"] == state_digest(expected_state(size, info["rank"], n, shared=False))
        assert not sup.restart_history() and _drains(group, "handed_over") == 2
        assert not REGISTRY.get_sample_value("supervisor_state_rollbacks_total", {"group": group.name, "medium": "memory"})
        _replace_node(ray_cluster, node)
    finally:
        _stop(*part)


def test_without_spare_capacity_the_notice_is_reported_and_the_loss_recovered_as_before(ray_cluster, no_leaks):
    pool, group, sup = part = _supervise(ClassWithInitArgs(SlowStartWorker, start_s=0.0), capacity_factor=1.0)
    try:
        node = group.rank_nodes[0]
        _send_drain(node, deadline_s=60)
        _wait(lambda: _drains(group, "no_capacity") == 2, 10, "the no-capacity outcome")
        assert sup.state is GroupState.RUNNING and set(group.rank_nodes.values()) == {node}
        _replace_node(ray_cluster, node)
        _wait(lambda: sup.state is GroupState.RUNNING and [s.restarts for s in sup.ranks()] == [1, 1], 90, "the node loss recovered")
        assert {r.reason for r in sup.restart_history()} == {FailureReason.NODE_LOST}
    finally:
        _stop(*part)
