"""State survives a replacement, against real Ray: peer recovery of replicated state, rollback of
sharded state to the newest complete snapshot (between calls, during a call, during a snapshot), the
disk fallback when a node goes with its shards' copies, the never-silent failure, and the memory bound.

The workers (tests/state_workers.py) change their state as a pure function of (rank, step), so every
check compares bit-exact digests with a fault-free run computed in the test.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import ray
from clusters import connected_cluster
from state_workers import StatefulWorker, expected_state

from supervisor import (
    ClassWithInitArgs,
    GroupSupervisor,
    ResourcePool,
    SupervisionConfig,
    create_group,
    init_group,
)
from supervisor.core.state_tree import WireState, from_wire, state_digest
from supervisor.errors import GroupFailedError, RolledBack, StateLostError
from supervisor.observability.metrics import REGISTRY
from supervisor.state import StateConfig, StateDomain, StateKind, StateRecovery
from supervisor.state.keeper import keeper_name
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.restart_policy import RestartPolicy

FAST_INIT = InitPolicy(timeout_s=30, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
SIZE = 4096


@pytest.fixture(scope="module")
def ray_cluster():
    """A CPU head and three nodes with 2 declared GPUs each (one spare node for a node loss)."""
    with connected_cluster({"num_cpus": 4, "num_gpus": 0}, [{"num_cpus": 2, "num_gpus": 2}] * 3) as (cluster, workers):
        cluster.gpu_nodes = workers
        yield cluster


def _supervised(kind, shared, tmp_path=None, process_on_nodes=(1, 1), step_s=0.0, domain=None, **state):
    pool = ResourcePool(list(process_on_nodes), use_gpu=True, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(StatefulWorker, size=SIZE, shared=shared, step_s=step_s))
    init_group(group, "init_model", policy=FAST_INIT)
    config = SupervisionConfig(
        init_method="init_model", init_policy=FAST_INIT, probe_period_s=1.0,
        restart=RestartPolicy(max_restarts=10, backoff_initial_s=0.0),
        state=StateConfig(kind=kind, **state),
    )  # fmt: skip
    sup = GroupSupervisor(group, config, state_domain=domain).start()
    return pool, group, sup


def _teardown(pool, group, sup):
    try:
        sup.stop()
    finally:
        group.kill()
        pool.teardown()


def _pid(group, rank):
    return ray.get(group.workers[rank].node_info.remote())["pid"]


def _kill(group, rank):
    os.kill(_pid(group, rank), signal.SIGKILL)


def _digests(group):
    return {i["rank"]: (i["step"], i["digest"]) for i in group.info()}


def _expected(group, steps, shared):
    return {r: (steps, state_digest(expected_state(SIZE, r, steps, shared))) for r in range(group.world_size)}


def _wait(predicate, timeout_s=60.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _logged_calls(sup, group):
    """The calls the group's replay log holds, as status shows them."""
    (status,) = [s for s in sup.state_domain.cached_status() if s.group == group.name]
    return status.replay_log_calls


def _metric(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _train(group, steps):
    for step in steps:
        group.train_step(step)


def _train_past_a_snapshot(domain, *groups):
    """Steps 0-2 with a snapshot at every boundary, waited for at step 2: the groups end at step 3,
    their newest complete snapshot at step 2."""
    for step in range(2):
        domain.step_boundary(step)
        for group in groups:
            group.train_step(step)
    domain.step_boundary(2)
    for group in groups:
        domain.wait_snapshots(group)
    for group in groups:
        group.train_step(2)


def test_replicated_rank_killed_between_steps_gets_a_peers_state_bit_exact(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.REPLICATED, shared=True)
    try:
        _train(group, range(3))
        before = _metric("supervisor_state_restore_seconds_count", group=group.name, kind="peer")
        old_pid = _pid(group, 1)
        _kill(group, 1)
        _wait(lambda: sup.generation(1) == 1 and sup.state.value == "running", what="rank 1 replaced")
        assert _pid(group, 1) != old_pid
        assert _digests(group) == _expected(group, 3, shared=True)  # the replacement has its peer's step 3
        _train(group, range(3, 5))  # no rollback: the next step is simply the next one
        assert _digests(group) == _expected(group, 5, shared=True)
        assert _metric("supervisor_state_restore_seconds_count", group=group.name, kind="peer") == before + 1
    finally:
        _teardown(pool, group, sup)


def test_sharded_rank_killed_between_steps_rolls_back_to_the_latest_snapshot(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False)
    try:
        for step in range(3):
            group.snapshot(step)
            group.train_step(step)
        group.snapshot(3)
        sup.state_domain.wait_snapshots(group)
        group.train_step(3)  # state at step 4 now, newest snapshot at 3
        _kill(group, 0)
        with pytest.raises(RolledBack) as raised:
            _wait(lambda: sup.generation(0) == 1, what="rank 0 replaced")
            group.info()  # the next call of the group announces the rollback, once
        assert raised.value.step == 3 and raised.value.medium == "memory"
        assert _digests(group) == _expected(group, 3, shared=False)  # every rank, the replacement too
        _train(group, range(3, 6))  # step 3 applied again, exactly once
        assert _digests(group) == _expected(group, 6, shared=False)
    finally:
        _teardown(pool, group, sup)


def test_sharded_rank_killed_during_an_update_raises_rolled_back_from_that_call(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, step_s=1.0)
    try:
        group.snapshot(0)
        group.train_step(0)
        group.snapshot(1)
        sup.state_domain.wait_snapshots(group)
        ref_pid = _pid(group, 1)
        import threading

        threading.Timer(0.4, os.kill, args=(ref_pid, signal.SIGKILL)).start()
        with pytest.raises(RolledBack) as raised:
            group.train_step(1)
        assert raised.value.step == 1
        assert _digests(group) == _expected(group, 1, shared=False)
        group.train_step(1)
        assert _digests(group) == _expected(group, 2, shared=False)
    finally:
        _teardown(pool, group, sup)


REPLAY = {"recovery": StateRecovery.REPLAY, "mutating_methods": ("train_step",)}


def test_sharded_rank_killed_during_an_update_is_replayed_and_the_call_returns_as_if_nothing_happened(ray_cluster, no_leaks):
    """Restore, replay, retry in the group itself: the driver gets the call's results, no RolledBack."""
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, step_s=1.0, **REPLAY)
    try:
        group.snapshot(0)
        sup.state_domain.wait_snapshots(group)
        _train(group, range(2))  # logged: the replay brings a restore of step 0 to step 2
        assert _logged_calls(sup, group) == 2
        replayed = _metric("supervisor_state_replayed_calls_total", group=group.name)
        import threading

        threading.Timer(0.4, os.kill, args=(_pid(group, 1), signal.SIGKILL)).start()
        assert group.train_step(2) == [3, 3]  # retried once the group was restored and replayed
        assert sup.generation(1) == 1
        assert _digests(group) == _expected(group, 3, shared=False)  # every step applied exactly once
        assert _metric("supervisor_state_replayed_calls_total", group=group.name) == replayed + 2
        _train(group, range(3, 5))  # no rollback to announce: the next step is simply the next one
        assert _digests(group) == _expected(group, 5, shared=False)
    finally:
        _teardown(pool, group, sup)


def test_sharded_rank_killed_between_calls_is_replayed_without_telling_the_driver(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, **REPLAY)
    try:
        group.snapshot(0)
        sup.state_domain.wait_snapshots(group)
        _train(group, range(3))
        _kill(group, 0)
        _wait(lambda: sup.generation(0) == 1 and sup.state.value == "running", what="rank 0 replaced")
        assert _digests(group) == _expected(group, 3, shared=False)  # snapshot of step 0, three calls replayed
        _train(group, range(3, 5))
        assert _digests(group) == _expected(group, 5, shared=False)
        group.snapshot(5)
        sup.state_domain.wait_snapshots(group)
        _train(group, range(5, 6))
        assert _logged_calls(sup, group) == 6  # steps 0-5, since the snapshot of step 0
        sup.state_domain.snapshot(group, 6)  # reads the inventory: step 5 is complete, the log drops what precedes it
        assert _logged_calls(sup, group) == 1  # step 5's call
    finally:
        _teardown(pool, group, sup)


def test_a_replay_that_fails_fails_the_group_in_one_line_naming_the_call(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, **REPLAY)
    try:
        group.snapshot(0)
        sup.state_domain.wait_snapshots(group)
        group.update_once()
        _kill(group, 1)
        with pytest.raises(GroupFailedError) as failed:
            _wait(lambda: sup.state.value == "failed", what="the group failed")
            group.info()
        message = str(failed.value)
        assert "replay from step 0 failed at call 1 of 1 (update_once)" in message and "\n" not in message
    finally:
        _teardown(pool, group, sup)


def test_a_rank_killed_during_its_snapshot_rolls_back_to_a_complete_one(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False)
    try:
        group.snapshot(0)
        group.train_step(0)
        group.snapshot(1)
        sup.state_domain.wait_snapshots(group)
        group.train_step(1)
        group.snapshot(2)  # the copy is taken; rank 1 dies while it is handed to the keepers
        _kill(group, 1)
        with pytest.raises(RolledBack) as raised:
            _wait(lambda: sup.generation(1) == 1, what="rank 1 replaced")
            group.info()
        step = raised.value.step
        assert step in (1, 2)  # 2 only if its shards reached both keepers before the kill
        assert _digests(group) == _expected(group, step, shared=False)
    finally:
        _teardown(pool, group, sup)


def test_a_node_lost_with_its_shards_copies_falls_back_to_disk(ray_cluster, tmp_path, no_leaks):
    pool, group, sup = _supervised(
        StateKind.SHARDED, shared=False, snapshot_every=1, disk_dir=str(tmp_path / "snapshots"), disk_snapshot_every=2
    )
    removed = None
    try:
        domain = sup.state_domain
        for step in range(3):
            domain.step_boundary(step)  # memory at 0, 1, 2; disk at 0, 2
            group.train_step(step)
        domain.step_boundary(3)
        domain.wait_snapshots(group)
        group.train_step(3)
        # Rank 0's node goes, and the keeper holding the other copy of its shards with it.
        node = group.rank_nodes[0]
        others = [n for n in domain.keepers.handles() if n != node]
        from supervisor.state.planning import copy_nodes

        second = copy_nodes(node, [node, *others])[1]
        ray.kill(ray.get_actor(keeper_name(group.name_prefix, second), namespace=group.namespace))
        removed = next(n for n in ray_cluster.gpu_nodes if n.node_id == node)
        ray_cluster.remove_node(removed)
        with pytest.raises(RolledBack) as raised:
            _wait(lambda: sup.generation(0) == 1, timeout_s=120, what="rank 0 replaced on another node")
            group.info()
        assert raised.value.step == 2 and raised.value.medium == "disk"
        assert _digests(group) == _expected(group, 2, shared=False)
        _train(group, range(2, 4))
        assert _digests(group) == _expected(group, 4, shared=False)
    finally:
        _teardown(pool, group, sup)
        if removed is not None:
            ray_cluster.gpu_nodes[ray_cluster.gpu_nodes.index(removed)] = ray_cluster.add_node(num_cpus=2, num_gpus=2)
            ray_cluster.wait_for_nodes()


def test_sharded_state_without_a_snapshot_fails_the_group_saying_what_would_have_saved_it(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False)
    try:
        _train(group, range(2))
        _kill(group, 1)
        _wait(lambda: sup.state.value == "failed", what="the group to fail")
        message = str(sup.failure)
        assert "snapshot_every" in message and group.name in message, message
        assert len(message.splitlines()) == 1
        with pytest.raises(GroupFailedError):
            group.info()
    finally:
        _teardown(pool, group, sup)


def test_snapshots_stay_within_their_memory_bound_and_two_are_kept(ray_cluster, no_leaks):
    # One snapshot: 2 ranks x 4096 float64 (32 KiB) x 2 copies = 128 KiB; the bound holds two of them.
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, snapshot_memory_mb=0.3)
    try:
        domain = sup.state_domain
        for step in range(5):
            group.snapshot(step)
            domain.wait_snapshots(group)
            (status,) = domain.status()
            assert status.held_bytes <= status.bound_bytes
            group.train_step(step)
        (status,) = domain.status()
        assert status.steps_in_memory == (3, 4) and status.last_complete_step == 4
    finally:
        _teardown(pool, group, sup)


def test_a_rollback_takes_every_stateful_group_of_the_domain_back(ray_cluster, no_leaks):
    domain = StateDomain("state-test-", "state-test")
    actor = _supervised(StateKind.SHARDED, shared=False, domain=domain, snapshot_every=1)
    critic = _supervised(StateKind.REPLICATED, shared=True, domain=domain, snapshot_every=1)
    try:
        _train_past_a_snapshot(domain, actor[1], critic[1])
        _kill(actor[1], 1)
        with pytest.raises(RolledBack) as raised:
            _wait(lambda: actor[2].generation(1) == 1, what="actor rank 1 replaced")
            critic[1].train_step(3)  # any stateful group's next call announces it
        assert raised.value.step == 2 and set(raised.value.groups) == {actor[1].name, critic[1].name}
        assert _digests(actor[1]) == _expected(actor[1], 2, shared=False)
        assert _digests(critic[1]) == _expected(critic[1], 2, shared=True)
    finally:
        for parts in (actor, critic):
            _teardown(*parts)
        domain.close()


def test_a_keepers_copy_outlives_the_rank_whose_object_it_holds_in_place(ray_cluster, no_leaks):
    """The keeper on a rank's node holds the shard's arrays in place in the object store, in an object
    the rank put (and so owned): after the rank's SIGKILL the copy is still whole."""
    pool, group, sup = _supervised(StateKind.SHARDED, shared=False, snapshot_every=1)
    try:
        domain = sup.state_domain
        domain.step_boundary(0)
        domain.wait_snapshots(group)
        keeper = ray.get_actor(keeper_name(group.name_prefix, group.rank_nodes[0]), namespace=group.namespace)
        _kill(group, 0)
        _wait(lambda: sup.generation(0) == 1, what="rank 0 replaced")
        held = ray.get(keeper.fetch.remote(group.name, 0, 0))
        assert isinstance(held, WireState)
        assert state_digest(from_wire(held)) == state_digest(expected_state(SIZE, 0, 0, False))
    finally:
        _teardown(pool, group, sup)


def test_a_restarted_daemon_keeps_live_state_when_it_died_inside_the_first_step_boundary(ray_cluster, no_leaks):
    """The groups snapshot in turn: a daemon killed between the first group's first snapshot and the
    second's leaves no step complete in both. Nothing has stepped yet, so the restart keeps the live
    state; a group that the earlier daemon had recorded as snapshotted and that has no copy now has
    lost them, and that is an error naming it, never a quiet restart from live state."""
    domain = StateDomain("state-test-first-", "state-test")
    actor = _supervised(StateKind.SHARDED, shared=False, domain=domain, snapshot_every=1)
    critic = _supervised(StateKind.REPLICATED, shared=True, domain=domain, snapshot_every=1)
    try:
        domain.snapshot(actor[1], 0)
        domain.wait_snapshots(actor[1])
        assert domain.restore_all("the daemon re-adopted the job") is None
        assert _digests(actor[1]) == _expected(actor[1], 0, shared=False)
        with pytest.raises(StateLostError, match=f"{critic[1].name} .*no complete snapshot"):
            domain.restore_all("the daemon re-adopted the job", snapshotted_before=[critic[1].name])
    finally:
        for parts in (actor, critic):
            _teardown(*parts)
        domain.close()


def test_a_peer_capture_older_than_a_rollback_restores_the_rollbacks_step_instead(ray_cluster, no_leaks):
    """Two groups recover side by side: a replica's replacement captures a live peer's state, then
    the other group's failure rolls the whole job back. The capture is of a history undone: the
    replacement must join at the rollback's step, not the peer's older capture."""
    domain = StateDomain("state-test-race-", "state-test")
    actor = _supervised(StateKind.SHARDED, shared=False, domain=domain, snapshot_every=1)
    critic = _supervised(StateKind.REPLICATED, shared=True, domain=domain, snapshot_every=1)
    try:
        _train_past_a_snapshot(domain, actor[1], critic[1])
        captured = domain.capture_peer(critic[1], survivors=[0], targets=[1])
        assert captured is not None
        domain.roll_back(actor[1], "a test's rollback")
        domain.restore_from_peer(critic[1], captured, [1])
        with pytest.raises(RolledBack):  # the rollback's announcement, once
            critic[1].info()
        assert _digests(critic[1]) == _expected(critic[1], 2, shared=True)
    finally:
        for parts in (actor, critic):
            _teardown(*parts)
        domain.close()


def test_status_shows_the_last_complete_snapshot_and_a_replica_whose_state_diverged(ray_cluster, no_leaks):
    pool, group, sup = _supervised(StateKind.REPLICATED, shared=True, process_on_nodes=(1, 1, 1), snapshot_every=1)
    domain = sup.state_domain
    try:
        for step in range(3):
            group.snapshot(step)
            group.train_step(step)
        domain.wait_snapshots(group)  # step 2's hand-off runs beside the next call: landed before 3's inventory
        group.snapshot(3)  # each snapshot's ack reports the previous one's digests
        (status,) = domain.cached_status()
        assert (status.kind, status.last_complete_step, status.digest_step) == (StateKind.REPLICATED, 2, 2)
        # As the inventory at snapshot 3 showed it: before 3 landed, once 0 was freed (two complete kept).
        assert status.steps_in_memory == (1, 2) and 0 < status.held_bytes <= status.bound_bytes
        assert len(set(status.replica_digests.values())) == 1 and sorted(status.replica_digests) == [0, 1, 2]
        assert status.diverged_ranks == []
        group.perturb([2])
        group.snapshot(4)
        group.snapshot(5)
        (status,) = domain.cached_status()
        assert status.digest_step == 4 and status.diverged_ranks == [2]
        domain.wait_snapshots(group)
        assert [s.last_complete_step for s in domain.status()] == [5]  # asking the keepers, once step 5 landed
    finally:
        _teardown(pool, group, sup)
