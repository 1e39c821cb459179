"""Pure decision logic of the lifecycle: init rounds, resource feasibility and diagnosis (no Ray)."""

from __future__ import annotations

import pytest

from supervisor.placement.resources import (
    ClusterSnapshot,
    NodeResources,
    PlacementGroupRecord,
    PoolDemand,
    diagnose,
    find_infeasibility,
    format_resources,
)
from supervisor.supervision.init_policy import (
    InitOutcome,
    InitPolicy,
    RankAttempt,
    needs_new_rendezvous,
    plan_next_round,
)

OK, RAISED, TIMED_OUT, DIED = InitOutcome.OK, InitOutcome.RAISED, InitOutcome.TIMED_OUT, InitOutcome.DIED
POLICY = InitPolicy(attempts=3, backoff_initial_s=1.0, backoff_max_s=8.0, backoff_jitter_s=0.0)


def attempts(*rows):
    return [RankAttempt(rank=r, attempt=a, outcome=o) for r, a, o in rows]


def test_first_round_runs_every_rank():
    plan = plan_next_round([], 3, POLICY)
    assert plan.run == (0, 1, 2) and not plan.replace and not plan.done


def test_all_ok_is_done():
    assert plan_next_round(attempts((0, 1, OK), (1, 1, OK)), 2, POLICY).done


def test_failed_rank_alone_is_replaced_and_rerun():
    plan = plan_next_round(attempts((0, 1, OK), (1, 1, RAISED), (2, 1, OK)), 3, POLICY)
    assert plan.replace == (1,) and plan.run == (1,) and not plan.new_rendezvous
    assert plan.backoff_s == pytest.approx(1.0)


def test_backoff_grows_with_attempts():
    history = attempts((0, 1, OK), (1, 1, TIMED_OUT), (1, 2, DIED))
    assert plan_next_round(history, 2, POLICY).backoff_s == pytest.approx(2.0)


def test_rank_zero_replacement_reruns_every_rank():
    plan = plan_next_round(attempts((0, 1, DIED), (1, 1, OK), (2, 1, OK)), 3, POLICY)
    assert plan.replace == (0,) and plan.new_rendezvous and plan.run == (0, 1, 2)
    assert needs_new_rendezvous([0, 2]) and not needs_new_rendezvous([1, 2])


def test_independent_replicas_rerun_only_a_failed_rank_zero():
    plan = plan_next_round(attempts((0, 1, DIED), (1, 1, OK), (2, 1, OK)), 3, POLICY, ranks=[0], rejoin_new_rank_zero=False)
    assert plan.replace == (0,) and not plan.new_rendezvous and plan.run == (0,)


def test_rerun_after_rendezvous_does_not_consume_attempts():
    # rank 1 re-ran only because rank 0 got a new rendezvous; its OK calls are not failures
    history = attempts((0, 1, RAISED), (1, 1, OK), (0, 2, RAISED), (1, 2, OK))
    plan = plan_next_round(history, 2, POLICY)
    assert plan.replace == (0,) and not plan.failed_ranks


def test_exhausted_rank_fails_the_group():
    history = attempts((0, 1, OK), (1, 1, RAISED), (1, 2, RAISED), (1, 3, TIMED_OUT))
    plan = plan_next_round(history, 2, POLICY)
    assert plan.failed_ranks == (1,) and plan.reasons == {1: "timed_out"} and not plan.run


def test_abandoned_ranks_are_replaced_with_the_failed_one_and_never_charged():
    # A collective init: rank 1 died, ranks 0 and 2 were blocked in its rendezvous and abandoned,
    # three times over; only rank 1 runs out of attempts, and each round replaces all three.
    ABANDONED = InitOutcome.ABANDONED
    history = []
    for attempt in (1, 2):
        history += attempts((0, attempt, ABANDONED), (1, attempt, DIED), (2, attempt, ABANDONED))
        plan = plan_next_round(history, 3, POLICY)
        assert plan.replace == (0, 1, 2) and plan.new_rendezvous and plan.run == (0, 1, 2) and not plan.failed_ranks
        assert plan.backoff_s == pytest.approx(POLICY.backoff_s(attempt))
    history += attempts((0, 3, ABANDONED), (1, 3, DIED), (2, 3, ABANDONED))
    assert plan_next_round(history, 3, POLICY).failed_ranks == (1,)


def test_policy_validation():
    with pytest.raises(ValueError, match="attempts must be >= 1"):
        InitPolicy(attempts=0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        InitPolicy(timeout_s=0)


def test_describe_names_rank_node_bundle_attempt():
    a = RankAttempt(rank=2, attempt=3, outcome=RAISED, error="ValueError: x", node_id="abcdef1234567890", bundle="1:0")
    assert a.describe(3) == "rank 2 (node abcdef123456, bundle 1:0) attempt 3/3: raised: ValueError: x"


def _nodes(*gpus, cpus=16):
    return tuple(NodeResources(f"n{i}", "127.0.0.1", {"CPU": cpus, "GPU": g}) for i, g in enumerate(gpus))


def _demand(counts, strategy="STRICT_PACK", bundle=None):
    bundle = bundle or {"CPU": 1, "GPU": 1}
    return PoolDemand("p", strategy, tuple((f"p:{i}", tuple([bundle] * n)) for i, n in enumerate(counts)))


def test_feasible_demand():
    assert find_infeasibility(_demand([4, 4]), ClusterSnapshot(_nodes(4, 4), {})) is None


def test_strict_pack_bigger_than_every_node():
    reason = find_infeasibility(_demand([5]), ClusterSnapshot(_nodes(4, 4), {}))
    assert reason == "p:0 is STRICT_PACK: its 5 bundles need CPU 5, GPU 5 on one node, but the largest node has CPU 16, GPU 4"
    assert find_infeasibility(_demand([5], strategy="PACK"), ClusterSnapshot(_nodes(4, 4), {})) is None


def test_bundle_bigger_than_every_node():
    reason = find_infeasibility(_demand([1], bundle={"CPU": 32}), ClusterSnapshot(_nodes(4), {}))
    assert reason == "bundle 0 of p:0 needs CPU 32 but no node has that much (largest node: CPU 16)"


def test_more_than_the_cluster():
    reason = find_infeasibility(_demand([4, 4, 4]), ClusterSnapshot(_nodes(4, 4), {}))
    assert reason == "pool p asks for more than the whole cluster has (GPU: asks 12, cluster has 8)"


def test_strict_spread_needs_enough_nodes():
    reason = find_infeasibility(_demand([3], strategy="STRICT_SPREAD"), ClusterSnapshot(_nodes(4, 4), {}))
    assert reason == "p:0 is STRICT_SPREAD over 3 nodes but only 2 node(s) can hold one bundle"


def test_dead_nodes_do_not_count():
    nodes = (NodeResources("a", "x", {"CPU": 16, "GPU": 4}, alive=False),)
    assert find_infeasibility(_demand([1]), ClusterSnapshot(nodes, {})) == "the cluster has no alive nodes"


def test_diagnosis_names_pending_and_blockers():
    snapshot = ClusterSnapshot(
        _nodes(4, 4),
        {"CPU": 24, "GPU": 0},
        (
            PlacementGroupRecord("own0", "p:0", "CREATED", "STRICT_PACK", ({"CPU": 1, "GPU": 1},) * 4),
            PlacementGroupRecord("own1", "p:1", "PENDING", "STRICT_PACK", ({"CPU": 1, "GPU": 1},) * 4),
            PlacementGroupRecord("x", "leaked-run-7", "CREATED", "PACK", ({"GPU": 2},) * 2),
            PlacementGroupRecord("y", "", "CREATED", "PACK", ({"memory": 5},)),
            PlacementGroupRecord("z", "gone", "REMOVED", "PACK", ({"GPU": 4},)),
        ),
    )
    d = diagnose(_demand([4, 4]), snapshot, own_pg_ids={"own0", "own1"})
    assert (d.bundles_requested, d.bundles_placed) == (8, 4)
    assert d.pending == ("p:1 (4 x CPU 1, GPU 1)",)
    assert d.blockers == ("leaked-run-7 [CREATED] holds GPU 4",)
    assert d.summary() == (
        "pool p: 4/8 bundles placed; CPU asks 8 (cluster total 32, available 24); "
        "GPU asks 8 (cluster total 8, available 0); pending: p:1 (4 x CPU 1, GPU 1); "
        "held by other placement groups: leaked-run-7 [CREATED] holds GPU 4"
    )
    assert d.as_fields()["resources"]["GPU"] == {"requested": 8, "total": 8, "available": 0}


def test_format_resources_orders_cpu_gpu_first():
    assert format_resources({"memory": 1, "GPU": 2, "CPU": 3}) == "CPU 3, GPU 2, memory 1"
    assert format_resources({}) == "nothing"


# -- restart policy and drift ----------------------------------------------------------------------

from supervisor.placement.drift import compute_drift  # noqa: E402
from supervisor.placement.layout import BundleRef  # noqa: E402
from supervisor.supervision import SupervisionConfig  # noqa: E402
from supervisor.supervision.reconcile import PlacementSeen, RankFailed, decide, initial_state  # noqa: E402
from supervisor.supervision.restart_policy import (  # noqa: E402
    Failure,
    FailureReason,
    RestartPolicy,
    RestartRecord,
    RestartStrategy,
    budget_allows,
    restarts_in_window,
)

DIED_ = FailureReason.DIED


def _decide(failures, history, world, policy, now):
    """The reconcile loop's decision on ``failures`` observed at ``now`` by a group that ran until then."""
    seen = PlacementSeen({r: BundleRef(0, r) for r in range(world)}, {}, {}, ())
    observations = [*(RankFailed(f) for f in failures), seen] if failures else []
    return decide(initial_state(world, history), observations, SupervisionConfig(restart=policy), now)


def _replaced(plan):
    return tuple(r.rank for r in plan.replacements)


def test_no_failures_no_action():
    assert _decide([], [], 4, RestartPolicy(), now=100.0).empty


def test_one_for_one_restarts_only_the_failed_ranks():
    plan = _decide([Failure(2, DIED_), Failure(1, FailureReason.HUNG)], [], 4, RestartPolicy(), now=0.0)
    assert _replaced(plan) == (1, 2) and plan.wake_at is None


def test_one_for_all_restarts_every_rank():
    assert _replaced(_decide([Failure(2, DIED_)], [], 4, RestartPolicy(strategy=RestartStrategy.ONE_FOR_ALL), now=0.0)) == (0, 1, 2, 3)


def test_budget_is_a_sliding_window():
    policy = RestartPolicy(max_restarts=2, restart_window_s=60)
    history = [RestartRecord(1, DIED_, at=0.0), RestartRecord(1, DIED_, at=30.0)]
    escalate = _decide([Failure(1, DIED_, "boom")], history, 4, policy, now=50.0)
    assert escalate.escalation == "restart budget exhausted: 2 restart(s) in the last 60s (max_restarts=2); failed: rank 1 died (boom)"
    # the first restart has left the window by t=61
    assert _replaced(_decide([Failure(1, DIED_)], history, 4, RestartPolicy(max_restarts=2, restart_window_s=60), now=61.0)) == (1,)


def test_budget_rule_is_the_one_decide_uses():
    policy = RestartPolicy(max_restarts=3, restart_window_s=60)
    history = [RestartRecord(0, DIED_, at=t) for t in (0.0, 30.0, 40.0)]
    assert restarts_in_window(history, policy, now=50.0) == 3 and restarts_in_window(history, policy, now=61.0) == 2
    assert not budget_allows(history, 1, policy, now=50.0) and budget_allows(history, 1, policy, now=61.0)
    assert not budget_allows(history, 2, policy, now=61.0)
    for now in (50.0, 61.0, 95.0, 200.0):
        for failed in (1, 2, 3):
            escalated = _decide([Failure(r, DIED_) for r in range(1, failed + 1)], history, 4, policy, now).escalation is not None
            assert escalated is not budget_allows(history, failed, policy, now)


def test_transient_errors_of_a_recovery_step():
    import ray

    from supervisor.errors import ConfigError
    from supervisor.failure import is_transient
    from supervisor.supervision.lifecycle import ActorStartError, InitGroupError

    for exc in (TimeoutError("name not released"), ActorStartError("died while starting"), ray.exceptions.GetTimeoutError("late"), ConnectionError()):
        assert is_transient(exc), exc
    for exc in (InitGroupError("init failed"), ConfigError("bad"), ValueError("bug"), KeyError(3)):
        assert not is_transient(exc), exc


def test_zero_budget_never_restarts():
    assert _decide([Failure(0, DIED_)], [], 1, RestartPolicy(max_restarts=0), now=0.0).escalation is not None


def test_backoff_doubles_for_consecutive_restarts_of_one_rank():
    policy = RestartPolicy(backoff_initial_s=1.0, backoff_max_s=5.0)
    history = [RestartRecord(3, DIED_, at=float(t)) for t in range(3)]

    def delay(history, policy):
        plan = _decide([Failure(3, DIED_)], history, 4, policy, now=10.0)
        return 0.0 if plan.replacements else plan.wake_at - 10.0

    assert delay(history[:0], policy) == 0.0
    assert delay(history[:1], policy) == 1.0
    assert delay(history[:2], policy) == 2.0
    assert delay(history * 3, RestartPolicy(backoff_initial_s=1.0, backoff_max_s=5.0, max_restarts=100)) == 5.0


def test_restart_policy_validation():
    with pytest.raises(ValueError, match="max_restarts must be >= 0"):
        RestartPolicy(max_restarts=-1)


def test_drift_is_per_rank_and_ignores_unknown_nodes():
    placements = compute_drift({0: "a", 1: "a", 2: "b"}, {0: "a", 1: "c", 2: None})
    assert [(p.rank, p.drifted) for p in placements] == [(0, False), (1, True), (2, False)]


def test_decision_over_ten_thousand_workers():
    # Decision cost is measured in bench/, not here; this checks the result at that size.
    failures = [Failure(r, DIED_) for r in range(0, 10_000, 100)]
    history = [RestartRecord(r, DIED_, at=float(r % 50)) for r in range(0, 10_000, 7)]
    plan = _decide(failures, history, 10_000, RestartPolicy(max_restarts=100_000, restart_window_s=1e9), now=100.0)
    assert len(plan.replacements) == 100 and plan.escalation is None
