"""Spare bundles and standbys on a real multi-node Ray cluster: faster recovery, identity, drift, replenishment."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from clusters import connected_cluster
from supervised_workers import RankDependentWorker, SlowStartWorker, WarmUpWorker

from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
from supervisor.core.protocol import DataProto
from supervisor.core.worker.actor_heartbeat import wait_for_beat
from supervisor.errors import ConfigError
from supervisor.observability.metrics import REGISTRY
from supervisor.placement.layout import BundleRef
from supervisor.placement.standby import StandbyReach
from supervisor.supervision import GroupState, GroupSupervisor, SupervisionConfig
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.standbys import check_standby_config

FAST_INIT = InitPolicy(timeout_s=30, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
# Pools pin their bundles to nodes with a Ray accelerator-type resource, so each test knows where they go.
ONE_NODE = "standby-one-node"
NODE_LOSS = "standby-node-loss"
START_S = 2.0  # what a standby has already paid: process start, imports, constructor


@pytest.fixture(scope="module")
def ray_cluster():
    """A CPU-only head, one 6-GPU node for the ordering test, two 2-GPU nodes for the node-loss test."""
    loss_node = {"num_cpus": 4, "num_gpus": 2, "resources": {f"accelerator_type:{NODE_LOSS}": 10}}
    nodes = [{"num_cpus": 8, "num_gpus": 6, "resources": {f"accelerator_type:{ONE_NODE}": 10}}, loss_node, loss_node]
    with connected_cluster({"num_cpus": 4, "num_gpus": 0}, nodes) as (cluster, added):
        cluster.loss_nodes = added[1:]
        yield cluster


def _supervised(
    accelerator, process_on_nodes, capacity_factor=1.0, standbys=0, start_s=START_S, cls=SlowStartWorker, warm_up=None, reach=StandbyReach.SAME_NODE, **kwargs
):
    pool = ResourcePool(list(process_on_nodes), max_colocate_count=1, accelerator_type=accelerator, capacity_factor=capacity_factor)
    args = {} if cls is RankDependentWorker else {"start_s": start_s, **kwargs}
    group = create_group(pool, ClassWithInitArgs(cls, **args))
    init_group(group, "init_model", policy=FAST_INIT)
    config = SupervisionConfig(
        init_method="init_model", init_policy=FAST_INIT, probe_period_s=1.0, standbys=standbys, standby_check_s=0.2, bundle_wait_timeout_s=120,
        standby_warmup_method=warm_up, standby_reach=reach,
    )  # fmt: skip
    return pool, group, GroupSupervisor(group, config).start()


def _teardown(*parts):
    for pool, group, sup in parts:
        sup.stop()
        group.kill()
        pool.teardown()


def _wait(predicate, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _batch(n):
    return DataProto.from_dict(tensors={"ids": torch.arange(n)})


def _kill_and_time_recovery(group, rank):
    """SIGKILL ``rank``'s process, then time until a call over every rank returns again."""
    pid = wait_for_beat(group.workers[rank]).pid
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    assert group.generate(_batch(4)).batch["ids"].tolist() == [0, 1, 2, 3]
    return time.monotonic() - killed


def _ready_standbys(group):
    return REGISTRY.get_sample_value("supervisor_standby_workers", {"group": group.name, "state": "ready"}) or 0.0


def test_killed_rank_serves_again_sooner_with_a_standby_which_is_then_replenished(ray_cluster, no_leaks):
    plain = _supervised(ONE_NODE, [2])
    spare = _supervised(ONE_NODE, [2], capacity_factor=1.5, standbys=1)
    try:
        pool, group, sup = spare
        assert pool.spare_bundle_count == 1
        _wait(lambda: sup.standby_counts() == (1, 0), what="the standby to be ready")
        (standby,) = group.standbys.values()
        old_bundle = group.rank_bundles[1]

        without = _kill_and_time_recovery(plain[1], 1)
        with_standby = _kill_and_time_recovery(group, 1)
        assert with_standby < without, f"with a standby {with_standby:.2f}s, without {without:.2f}s"
        assert without > START_S  # the fresh actor paid its start; the standby had paid it already

        # The standby became rank 1: same identity and environment as the rank it replaced.
        assert group.worker_names[1] == standby.name and group.rank_bundles[1] == standby.bundle
        me = group.identity()[1]
        assert (me["rank"], me["initialized_as"], me["env"]["RANK"], me["env"]["LOCAL_RANK"], me["env"]["WORLD_SIZE"]) == (1, 1, "1", "1", "2")
        assert (me["env"]["MASTER_ADDR"], me["env"]["MASTER_PORT"]) == (group.master_address, group.master_port)
        assert not any(p.drifted for p in sup.drift()), "the standby was on the rank's own node"
        assert sup.state is GroupState.RUNNING and sup.ranks()[1].restarts == 1

        # A new standby is started in the bundle the failed rank left.
        _wait(lambda: sup.standby_counts() == (1, 0), what="a new standby")
        assert list(group.standbys) == [old_bundle]
        assert _ready_standbys(group) == 1
    finally:
        _teardown(plain, spare)


def test_rank_zero_taken_over_by_a_standby_gives_every_rank_the_new_rendezvous(ray_cluster, no_leaks):
    part = pool, group, sup = _supervised(ONE_NODE, [2], capacity_factor=1.5, standbys=1, start_s=0.2)
    try:
        _wait(lambda: sup.standby_counts() == (1, 0), what="the standby to be ready")
        before = group.master_port
        _kill_and_time_recovery(group, 0)
        assert group.master_port != before
        envs = [i["env"] for i in group.identity()]
        assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {(group.master_address, group.master_port)}
        assert [e["RANK"] for e in envs] == ["0", "1"]
    finally:
        _teardown(part)


def test_with_any_node_reach_a_standby_on_another_node_takes_over_a_rank_whose_node_is_alive(ray_cluster, no_leaks):
    part = pool, group, sup = _supervised(NODE_LOSS, [2], capacity_factor=1.5, standbys=1, reach=StandbyReach.ANY_NODE)
    try:
        _wait(lambda: sup.standby_counts() == (1, 0), what="the standby to be ready")
        (standby,) = group.standbys.values()
        placed = group.placed_bundles()
        old_bundle = group.rank_bundles[1]
        assert placed[standby.bundle] != placed[old_bundle], "the spare sits on the other node (SPREAD)"

        # The rank's own bundle is alive, yet the standby takes over (by default a fresh actor would
        # start there: test_a_standby_on_another_node_is_used_only_when_the_own_bundle_is_not_placed).
        _kill_and_time_recovery(group, 1)
        assert group.worker_names[1] == standby.name and group.rank_bundles[1] == standby.bundle
        assert [p.drifted for p in sup.drift()] == [False, True], "the rank moved node: drift"
        # The bundle it left gets the next standby.
        _wait(lambda: sup.standby_counts() == (1, 0), what="a new standby")
        assert list(group.standbys) == [old_bundle]
    finally:
        _teardown(part)


def test_node_loss_goes_to_the_standby_and_a_spare_bundle_with_drift_then_replenishes(ray_cluster, no_leaks):
    part = pool, group, sup = _supervised(NODE_LOSS, [2], capacity_factor=2.0, standbys=1, start_s=0.2)
    added = None
    try:
        _wait(lambda: sup.standby_counts() == (1, 0), what="the standby to be ready")
        rank_node = pool.original_bundle_nodes()[(0, 0)]
        placed = group.placed_bundles()
        spares = [b for b in group.all_bundles() if b.pg_index == 1]
        assert {placed[b] for b in spares} == {n.node_id for n in ray_cluster.loss_nodes} - {rank_node}, "spares sit on the other node"
        lost = next(n for n in ray_cluster.loss_nodes if n.node_id == rank_node)
        ray_cluster.remove_node(lost)
        ray_cluster.loss_nodes.remove(lost)
        # Nothing can re-place the ranks' bundles (the other node is full), yet both ranks serve again.
        _wait(lambda: all(sup.generation(r) == 1 for r in (0, 1)), timeout_s=90, what="recovery into the spares")
        assert sorted(group.rank_bundles) == spares
        assert [p.drifted for p in sup.drift()] == [True, True]
        assert group.generate(_batch(4)).batch["ids"].tolist() == [0, 1, 2, 3]
        assert sup.standby_counts() == (0, 0) and not group.standbys

        # Once a node joins, Ray re-places the ranks' old bundles there and a standby starts in one.
        added = ray_cluster.add_node(num_cpus=4, num_gpus=2, resources={f"accelerator_type:{NODE_LOSS}": 10})
        _wait(lambda: sup.standby_counts() == (1, 0), timeout_s=90, what="a standby on the new node")
        (bundle,) = group.standbys
        assert bundle.pg_index == 0 and group.placed_bundles()[bundle] == added.node_id
    finally:
        _teardown(part)
        if added is not None:
            ray_cluster.loss_nodes.append(added)


def test_standby_options_are_checked_before_supervising(ray_cluster, no_leaks):
    pool = ResourcePool([1], max_colocate_count=1, accelerator_type=ONE_NODE)
    group = create_group(pool, ClassWithInitArgs(SlowStartWorker, start_s=0.0))
    try:
        with pytest.raises(ConfigError, match="wants 1 standby.*reserves 0 spare bundle.*capacity_factor"):
            GroupSupervisor(group, SupervisionConfig(standbys=1))
    finally:
        group.kill()
        pool.teardown()
    with pytest.raises(ConfigError, match="capacity_factor must be a number >= 1.0"):
        ResourcePool([1], capacity_factor=0.5)


def test_a_standby_is_ready_once_its_warm_up_ran_and_takes_over_warm(ray_cluster, no_leaks):
    part = pool, group, sup = _supervised(ONE_NODE, [1], capacity_factor=2.0, standbys=1, start_s=0.0, cls=WarmUpWorker, warm_up="warm_up")
    try:
        _wait(lambda: sup.standby_counts() == (1, 0), what="the standby to be ready")
        (standby,) = group.standbys.values()
        assert group.identity()[0]["warm_ups"] == 0, "ranks do not warm up"
        _kill_and_time_recovery(group, 0)
        assert group.worker_names[0] == standby.name
        me = group.identity()[0]
        assert (me["warm_ups"], me["initialized_as"]) == (1, 0), "warmed up once, as a standby, then the init as rank 0"
        # It warmed up at a lower CPU priority (every thread, standby_nice 10 by default, at most 19, and
        # SCHED_IDLE) and serves at the ranks' own (Ray starts workers at its worker_niceness, 15 by default).
        (base,) = set(me["nices"])
        assert set(me["warm_up_nices"]) == {min(19, base + 10)} and base < 19, me
        assert set(me["warm_up_policies"]) == {os.SCHED_IDLE} and set(me["policies"]) == {os.SCHED_OTHER}, me
        with pytest.raises(ConfigError, match="standby warm-up method 'warm_up_typo': WarmUpWorker has no such method"):
            check_standby_config(group, 1, "warm_up_typo")
    finally:
        _teardown(part)


def test_a_failing_warm_up_is_a_failed_standby_and_stops_them_after_three(ray_cluster, no_leaks):
    failed = []
    part = pool, group, sup = _supervised(
        ONE_NODE, [1], capacity_factor=2.0, standbys=1, start_s=0.0, cls=WarmUpWorker, warm_up="warm_up", fail_warm_up=True
    )
    try:
        sup.hooks.on_standby_failed = lambda group_name, name, error: failed.append(error)
        _wait(lambda: sup.standby.consecutive_failures >= 3, what="three failed standbys")
        assert not group.standbys and sup.standby_counts() == (0, 0)
        assert failed and all("no weights to load" in e for e in failed), failed
        assert group.generate(_batch(2)).batch["ids"].tolist() == [0, 1]  # the group itself runs on
    finally:
        _teardown(part)


def test_a_standby_not_ready_in_time_is_dropped_and_three_such_stop_standbys(ray_cluster, no_leaks):
    pool = ResourcePool([1], max_colocate_count=1, accelerator_type=ONE_NODE, capacity_factor=2.0)
    group = create_group(pool, ClassWithInitArgs(WarmUpWorker, warm_up_s=600.0))  # a warm-up that hangs
    init_group(group, "init_model", policy=FAST_INIT)
    quick = InitPolicy(timeout_s=1.0, attempts=1)
    config = SupervisionConfig(
        init_method="init_model", init_policy=quick, actor_start_timeout_s=2.0, standbys=1, standby_check_s=0.2, standby_warmup_method="warm_up"
    )  # fmt: skip
    failed = []
    sup = GroupSupervisor(group, config)
    sup.hooks.on_standby_failed = lambda group_name, name, error: failed.append(error)
    sup.start()
    try:
        assert sup.standby.ready_timeout_s == 3.0  # the constructor's limit, then the init's
        _wait(lambda: sup.standby.consecutive_failures >= 3, what="three standbys dropped as late")
        assert failed[:3] == ["not ready within 3s (constructor and warm-up)"] * 3
        assert not group.standbys and sup.standby_counts() == (0, 0), "a late standby is killed, its bundle freed"
        assert group.generate(_batch(2)).batch["ids"].tolist() == [0, 1]
    finally:
        _teardown((pool, group, sup))


def test_a_constructor_that_needs_the_rank_stops_standbys_after_three_tries(ray_cluster, no_leaks):
    part = pool, group, sup = _supervised(ONE_NODE, [1], capacity_factor=2.0, standbys=1, cls=RankDependentWorker)
    try:
        _wait(lambda: sup.standby.consecutive_failures >= 3, what="three failed standbys")
        time.sleep(1.0)
        assert sup.standby.consecutive_failures == 3 and not group.standbys
        assert group.generate(_batch(2)).batch["ids"].tolist() == [0, 1]  # the group itself runs on
        assert group.all_bundles() == [BundleRef(0, 0), BundleRef(1, 0)]
    finally:
        _teardown(part)
