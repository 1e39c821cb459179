"""Fault tolerance on a real multi-node Ray cluster: detection, replacement, in-flight calls, drift, budgets."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from signal import SIGKILL

import pytest
import ray
import torch
from clusters import connected_cluster
from supervised_workers import RolloutWorker, SlowInitWorker
from workers import ReinitFaultWorker

from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
from supervisor.core.protocol import DataProto
from supervisor.core.worker.actor_heartbeat import wait_for_beat
from supervisor.observability.hooks import ObservingHooks
from supervisor.observability.metrics import REGISTRY
from supervisor.supervision import (
    GroupFailedError,
    GroupState,
    GroupSupervisor,
    InFlightPolicy,
    SupervisionConfig,
)
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.restart_policy import FailureReason, RestartPolicy, RestartStrategy
from supervisor.supervision.supervised_call import WorkerFailedError

FAST_INIT = InitPolicy(timeout_s=30, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)


@pytest.fixture(scope="module")
def ray_cluster():
    """A CPU-only head and three worker nodes with 2 declared GPUs each (one spare for node-loss tests)."""
    with connected_cluster({"num_cpus": 8, "num_gpus": 0}, [{"num_cpus": 4, "num_gpus": 2}] * 3) as (cluster, workers):
        cluster.gpu_nodes = workers
        yield cluster


class RecordingHooks(ObservingHooks):
    def __init__(self):
        self.failed = []
        self.replaced = []
        self.drift = []

    def on_worker_failed(self, group, rank, reason, detail, detection_s):
        super().on_worker_failed(group, rank, reason, detail, detection_s)
        self.failed.append((time.monotonic(), rank, reason, detection_s))

    def on_worker_replaced(self, group, rank, reason):
        super().on_worker_replaced(group, rank, reason)
        self.replaced.append((rank, reason))

    def on_placement_drift(self, group, rank, original_node, current_node):
        super().on_placement_drift(group, rank, original_node, current_node)
        self.drift.append((rank, original_node, current_node))


def _metric(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _supervised(tmp_path, process_on_nodes=(4,), use_gpu=False, hooks=None, warm_up=False, **config):
    pool = ResourcePool(list(process_on_nodes), use_gpu=use_gpu, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(RolloutWorker, control_dir=str(tmp_path)))
    init_group(group, "init_model", policy=FAST_INIT)
    if warm_up:  # the first DataProto call imports tensordict in every actor: seconds, not a hang
        group.generate(_batch(4 * len(group.workers)))
    config.setdefault("init_method", "init_model")
    config.setdefault("init_policy", FAST_INIT)
    config.setdefault("probe_period_s", 1.0)
    sup = GroupSupervisor(group, SupervisionConfig(**config), hooks=hooks or RecordingHooks()).start()
    return pool, group, sup


def _teardown(pool, group, sup):
    sup.stop()
    try:
        # stop() ends the loop and every recovery task: no thread of this supervisor is left.
        _wait(lambda: not _threads_of(group), timeout_s=10, what=f"the supervisor's threads to end: {_threads_of(group)}")
    finally:
        group.kill()
        pool.teardown()


def _threads_of(group):
    return [t.name for t in threading.enumerate() if t.name in (f"supervisor-{group.name}",) or t.name.startswith(f"recovery-{group.name}-")]


def _pid(group, rank):
    # From the rank's heartbeat: there even while the rank runs a call.
    return wait_for_beat(group.workers[rank]).pid


def _wait(predicate, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _batch(n):
    return DataProto.from_dict(tensors={"ids": torch.arange(n)})


def test_idle_actor_killed_is_detected_fast_and_replaced_into_its_bundle(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    # Heartbeats read every 30 s: a detection sooner than that is the death watch's (an idle actor's
    # death is seen when it happens, not at the next probe); how soon is measured in bench/detection_cost.py.
    pool, group, sup = _supervised(tmp_path, hooks=hooks, probe_period_s=30.0, probe_timeout_s=60.0)
    try:
        name, slot = group.worker_names[2], group.slots[2]
        old_id = group.workers[2]._actor_id.hex()
        restarts = _metric("supervisor_worker_restarts_total", group=group.name, reason="died")
        killed_at = time.monotonic()
        os.kill(_pid(group, 2), signal.SIGKILL)
        _wait(lambda: hooks.failed, what="detection")
        detected_at, rank, reason, _ = hooks.failed[0]
        assert (rank, reason) == (2, "died")
        assert detected_at - killed_at < 30.0, f"detection took {detected_at - killed_at:.3f}s: not by the death watch"
        _wait(lambda: sup.generation(2) == 1, what="replacement")
        assert group.worker_names[2] == name and group.slots[2] == slot
        assert group.workers[2]._actor_id.hex() != old_id
        assert ray.get_actor(name, namespace="ray_supervisor")._actor_id.hex() == group.workers[2]._actor_id.hex()
        assert group.rendezvous()[2] is not None, "the replacement re-ran the init method"
        assert _metric("supervisor_worker_restarts_total", group=group.name, reason="died") == restarts + 1
        assert _metric("supervisor_workers", group=group.name, state="running") == 4
        assert sup.state is GroupState.RUNNING
        assert [p.drifted for p in sup.drift()] == [False] * 4
    finally:
        _teardown(pool, group, sup)


def test_kills_mid_rollout_with_retry_lose_and_duplicate_nothing(ray_cluster, tmp_path, no_leaks):
    # Kills every ~0.5 s can hit a rank again while it re-initialises: give init more attempts.
    chaos_init = InitPolicy(timeout_s=30, attempts=10, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
    pool, group, sup = _supervised(tmp_path, restart=RestartPolicy(max_restarts=1000), init_policy=chaos_init)
    stop = threading.Event()
    kills = []
    rng = random.Random(7)

    def killer():
        # One kill every 1-2 s: about the time a recovery takes on this 2-core machine, so kills land
        # mid-call and mid-recovery without starving the job.
        # At most 8 kills: on a loaded machine steps slow down, and unbounded kills would pile up.
        while len(kills) < 8 and not stop.wait(rng.uniform(1.0, 2.0)):
            rank = rng.randrange(group.world_size)
            try:
                pid = _pid(group, rank)
                os.kill(pid, SIGKILL)
                kills.append(pid)
            except Exception:
                pass  # that rank is being replaced right now

    thread = threading.Thread(target=killer, daemon=True)
    try:
        thread.start()
        step = 0
        # Bounded by time, not steps: on a slow day 60 fast steps can pass between two kills that land.
        deadline = time.monotonic() + 120.0
        while step < 8 or (len(set(kills)) < 4 and time.monotonic() < deadline):
            out = group.generate(_batch(64))
            assert out.batch["ids"].tolist() == list(range(64)), f"step {step}: items lost, duplicated or reordered"
            step += 1
        stop.set()
        thread.join()
        assert len(set(kills)) >= 4, f"only {len(set(kills))} kills landed"
        # Every distinct process killed is replaced exactly once (a killed process lingers as a zombie
        # for a moment, so the same pid can be "killed" twice). The last kill may still be recovering.
        _wait(lambda: sum(r.restarts for r in sup.ranks()) == len(set(kills)), what=f"{len(set(kills))} restarts")
        _wait(lambda: sup.state is GroupState.RUNNING and all(r.state.value == "running" for r in sup.ranks()), what="recovery")
        assert sum(r.restarts for r in sup.ranks()) == len(set(kills))
    finally:
        stop.set()
        _teardown(pool, group, sup)


def test_in_flight_raise_policy_reports_failed_ranks_and_keeps_survivors(ray_cluster, tmp_path, no_leaks):
    pool, group, sup = _supervised(tmp_path, in_flight=InFlightPolicy.RAISE)
    try:
        (tmp_path / "hang1").touch()  # rank 1 blocks inside the call until it is killed
        pid = _pid(group, 1)
        timer = threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL))
        timer.start()
        with pytest.raises(WorkerFailedError) as info:
            group.score(_batch(8))
        timer.join()
        assert sorted(info.value.failed) == [1]
        assert "died on node" in info.value.failed[1]
        assert sorted(info.value.partial_results) == [0, 2, 3]
        assert info.value.partial_results[0].batch["ids"].tolist() == [0, 1]
    finally:
        _teardown(pool, group, sup)


def test_rank_zero_killed_every_rank_learns_the_new_rendezvous(ray_cluster, tmp_path, no_leaks):
    pool, group, sup = _supervised(tmp_path)
    try:
        old = group.rendezvous()
        assert len(set(old)) == 1
        os.kill(_pid(group, 0), signal.SIGKILL)
        _wait(lambda: sup.generation(0) == 1, what="rank 0 replacement")
        new = group.rendezvous()
        assert len(set(new)) == 1 and new[0] != old[0], f"ranks disagree or kept the old rendezvous: {new}"
        assert new[0] == f"{group.master_address}:{group.master_port}"
    finally:
        _teardown(pool, group, sup)


def test_one_for_all_rebuilds_every_rank(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    pool, group, sup = _supervised(tmp_path, hooks=hooks, restart=RestartPolicy(strategy=RestartStrategy.ONE_FOR_ALL))
    try:
        before = [w._actor_id.hex() for w in group.workers]
        os.kill(_pid(group, 2), signal.SIGKILL)
        _wait(lambda: all(sup.generation(r) == 1 for r in range(4)) and len(hooks.replaced) == 4, what="rebuild")
        after = [w._actor_id.hex() for w in group.workers]
        assert all(a != b for a, b in zip(before, after, strict=True))
        assert sorted(r for r, _ in hooks.replaced) == [0, 1, 2, 3]
        assert {reason for _, reason in hooks.replaced} == {"died"}
        assert [r.restarts for r in sup.ranks()] == [1, 1, 1, 1]
        assert group.generate(_batch(8)).batch["ids"].tolist() == list(range(8))
    finally:
        _teardown(pool, group, sup)


def test_crash_loop_stops_at_the_budget_and_fails_the_group(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    pool, group, sup = _supervised(tmp_path, hooks=hooks, restart=RestartPolicy(max_restarts=3, restart_window_s=60), init_method=None)
    try:
        (tmp_path / "crashloop1").touch()  # from now on rank 1 dies 0.3 s after every start
        assert _metric("supervisor_group_state", group=group.name, state="running") == 1.0
        os.kill(_pid(group, 1), signal.SIGKILL)
        _wait(lambda: sup.state is GroupState.FAILED, timeout_s=60, what="FAILED")
        # The alert SupervisorGroupFailed reads this, not the ranks' states (see ops/alerts.yml).
        assert _metric("supervisor_group_state", group=group.name, state="failed") == 1.0
        assert _metric("supervisor_group_state", group=group.name, state="running") == 0.0
        assert _metric("supervisor_group_state", group=group.name, state="recovering") == 0.0
        assert len(hooks.replaced) == 3
        assert isinstance(sup.failure, GroupFailedError)
        message = str(sup.failure)
        assert "restart budget exhausted: 3 restart(s) in the last 60s (max_restarts=3)" in message
        assert "rank 1 died" in message
        with pytest.raises(GroupFailedError):
            group.generate(_batch(4))
    finally:
        _teardown(pool, group, sup)


def test_hung_rank_inside_a_call_is_detected_by_its_timeout_and_replaced(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    pool, group, sup = _supervised(tmp_path, hooks=hooks, call_timeout_s=8.0, warm_up=True)
    try:
        (tmp_path / "hang3").touch()
        started = time.monotonic()
        out = group.generate(_batch(16))
        assert out.batch["ids"].tolist() == list(range(16))
        assert 8.0 <= time.monotonic() - started < 60
        assert (3, "hung") in [(r, reason) for _, r, reason, _ in hooks.failed]
        assert (3, "hung") in hooks.replaced
        assert sup.generation(3) == 1
    finally:
        _teardown(pool, group, sup)


def test_a_stopped_rank_is_hung_by_its_silent_heartbeat_while_a_busy_one_is_not(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    pool, group, sup = _supervised(tmp_path, hooks=hooks, probe_period_s=0.5, probe_timeout_s=4.0, warm_up=True)
    stopped = _pid(group, 2)
    try:
        (tmp_path / "hang1").touch()  # rank 1's next call sleeps for an hour: busy, not stuck
        group.workers[1].generate.remote(_batch(1))
        time.sleep(1.0)
        os.kill(stopped, signal.SIGSTOP)
        paused = time.monotonic()
        _wait(lambda: hooks.failed, timeout_s=30, what="the stopped rank to be found hung")
        assert [(r, reason) for _, r, reason, _ in hooks.failed] == [(2, "hung")]
        assert hooks.failed[0][0] - paused < 4.0 + 2 * 0.5 + 2.0
        _wait(lambda: sup.generation(2) == 1, timeout_s=60, what="the hung rank's replacement")
        time.sleep(5.0)  # well past probe_timeout_s again: rank 1, busy all along, still beats
        assert [r for _, r, _, _ in hooks.failed] == [2]
    finally:
        try:
            os.kill(stopped, signal.SIGCONT)  # if it was never replaced
        except ProcessLookupError:
            pass
        _teardown(pool, group, sup)


def test_node_loss_replaces_affected_ranks_and_reports_drift_for_exactly_them(ray_cluster, tmp_path, no_leaks):
    hooks = RecordingHooks()
    pool, group, sup = _supervised(tmp_path, process_on_nodes=(2, 2), use_gpu=True, hooks=hooks)
    try:
        original = pool.original_bundle_nodes()
        lost_node_id = original[(1, 0)]
        node = next(n for n in ray_cluster.gpu_nodes if n.node_id == lost_node_id)
        moved = [s.rank for s in group.slots if original[(s.pg_index, s.bundle_index)] == lost_node_id]
        assert moved == [2, 3]
        ray_cluster.remove_node(node)
        ray_cluster.gpu_nodes.remove(node)
        _wait(lambda: all(sup.generation(r) == 1 for r in moved), timeout_s=90, what="replacement after node loss")
        drift = {p.rank: p for p in sup.drift()}
        assert [r for r, p in drift.items() if p.drifted] == moved
        for r in moved:
            assert drift[r].original_node == lost_node_id and drift[r].current_node != lost_node_id
        assert {reason for _, reason in hooks.replaced} == {"node_lost"}
        assert sorted(r for r, _, _ in hooks.drift) == moved
        assert _metric("supervisor_placement_drift_workers", group=group.name) == 2
        assert group.generate(_batch(8)).batch["ids"].tolist() == list(range(8))
    finally:
        _teardown(pool, group, sup)
        ray_cluster.gpu_nodes.append(ray_cluster.add_node(num_cpus=4, num_gpus=2))


def test_node_loss_without_spare_capacity_waits_with_diagnosis_then_recovers(ray_cluster, tmp_path, no_leaks):
    from ray.util import placement_group, remove_placement_group

    class WaitHooks(RecordingHooks):
        def __init__(self):
            super().__init__()
            self.waits = []

        def on_resource_wait_progress(self, pool, waited_s, diagnosis):
            super().on_resource_wait_progress(pool, waited_s, diagnosis)
            self.waits.append(diagnosis)
            if len(self.waits) == 1:
                remove_placement_group(blocker)  # capacity comes back while the supervisor waits

    hooks = WaitHooks()
    pool, group, sup = _supervised(tmp_path, process_on_nodes=(2, 2), use_gpu=True, hooks=hooks)
    blocker = placement_group([{"GPU": 2, "CPU": 1}], strategy="STRICT_PACK", name="spare-node-taken")
    try:
        ray.get(blocker.ready(), timeout=60)  # takes the one spare node
        lost = next(n for n in ray_cluster.gpu_nodes if n.node_id == pool.original_bundle_nodes()[(0, 0)])
        ray_cluster.remove_node(lost)
        ray_cluster.gpu_nodes.remove(lost)
        _wait(lambda: all(sup.generation(r) == 1 for r in (0, 1)), timeout_s=120, what="recovery after capacity returned")
        assert hooks.waits, "a long wait for re-placed bundles must report what it waits for"
        assert any("spare-node-taken" in b for b in hooks.waits[0].blockers)
        assert sorted(p.rank for p in sup.drift() if p.drifted) == [0, 1]
        assert group.generate(_batch(8)).batch["ids"].tolist() == list(range(8))
    finally:
        remove_placement_group(blocker)
        _teardown(pool, group, sup)
        ray_cluster.gpu_nodes.append(ray_cluster.add_node(num_cpus=4, num_gpus=2))


def test_call_timeouts_run_per_rank_from_submission(ray_cluster, tmp_path, no_leaks):
    """4 ranks, an idempotent 3 s method, call_timeout_s = 8, a 10 s init, one rank SIGKILLed 1 s
    into a call: the survivors' results were in before the replacement was, so they are not hung,
    and the killed rank's shard is timed from its re-submission: one restart, every result."""
    policy = InitPolicy(timeout_s=60, attempts=1)
    pool = ResourcePool([4], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(SlowInitWorker, init_s=10.0, call_s=3.0))
    hooks = RecordingHooks()
    try:
        init_group(group, "init_model", policy=policy)
        config = SupervisionConfig(init_method="init_model", init_policy=policy, call_timeout_s=8.0, probe_period_s=1.0, probe_timeout_s=20.0)
        sup = GroupSupervisor(group, config, hooks=hooks).start()
        try:
            threading.Timer(1.0, os.kill, args=(_pid(group, 1), SIGKILL)).start()
            assert group.work() == [0, 1, 2, 3]
            assert hooks.replaced == [(1, "died")]
            assert [r.restarts for r in sup.ranks()] == [0, 1, 0, 0]
        finally:
            sup.stop()
    finally:
        group.kill()
        pool.teardown()


def _lose_a_node_with_no_spare(ray_cluster, pool):
    """Take the one spare GPU node with a placement group of the test's, then remove a node of the pool."""
    from ray.util import placement_group

    blocker = placement_group([{"GPU": 2, "CPU": 1}], strategy="STRICT_PACK", name="spare-node-taken")
    ray.get(blocker.ready(), timeout=60)
    lost = next(n for n in ray_cluster.gpu_nodes if n.node_id == pool.original_bundle_nodes()[(0, 0)])
    ray_cluster.remove_node(lost)
    ray_cluster.gpu_nodes.remove(lost)
    return blocker


def test_a_recovery_step_that_times_out_is_retried_and_charged_not_fatal(ray_cluster, tmp_path, no_leaks):
    from ray.util import remove_placement_group

    hooks = RecordingHooks()
    pool, group, sup = _supervised(
        tmp_path, process_on_nodes=(2, 2), use_gpu=True, hooks=hooks, bundle_wait_timeout_s=1.0,
        restart=RestartPolicy(max_restarts=40, backoff_initial_s=0.2, backoff_max_s=0.5),
    )  # fmt: skip
    blocker = None
    try:
        blocker = _lose_a_node_with_no_spare(ray_cluster, pool)
        # Each wait for the lost bundles gives up after 1 s: a transient error, retried with backoff.
        _wait(lambda: max(r.restarts for r in sup.ranks()) >= 3, timeout_s=60, what="retried recovery attempts")
        assert sup.state is GroupState.RECOVERING
        remove_placement_group(blocker)  # capacity comes back
        blocker = None
        _wait(lambda: all(sup.generation(r) >= 1 for r in (0, 1)), timeout_s=120, what="recovery after capacity returned")
        _wait(lambda: sup.state is GroupState.RUNNING, timeout_s=60, what="the group to run again")
        assert group.generate(_batch(8)).batch["ids"].tolist() == list(range(8))
        # Every failed attempt was a restart of the lost ranks, on the budget and on the metric. (When
        # rank 0 is recovered first, rank 1 is replaced with it, as a survivor that cannot take the
        # new rendezvous: reason "died".)
        history = sup.restart_history()
        restarts = {r.rank: r.restarts for r in sup.ranks()}
        assert restarts[2] == restarts[3] == 0 and max(restarts.values()) >= 3
        assert len(history) == sum(restarts.values()) and {h.reason.value for h in history} <= {"node_lost", "died"}
        assert sorted(r for r, _ in hooks.replaced) == sorted(r for r, n in restarts.items() for _ in range(n))
    finally:
        if blocker is not None:
            remove_placement_group(blocker)
        _teardown(pool, group, sup)
        ray_cluster.gpu_nodes.append(ray_cluster.add_node(num_cpus=4, num_gpus=2))


def test_retries_of_a_recovery_stop_at_the_restart_budget(ray_cluster, tmp_path, no_leaks):
    from ray.util import remove_placement_group

    pool, group, sup = _supervised(
        tmp_path, process_on_nodes=(2, 2), use_gpu=True, bundle_wait_timeout_s=0.5,
        restart=RestartPolicy(max_restarts=6, backoff_initial_s=0.1, backoff_max_s=0.2),
    )  # fmt: skip
    blocker = _lose_a_node_with_no_spare(ray_cluster, pool)
    try:
        _wait(lambda: sup.state is GroupState.FAILED, timeout_s=60, what="the budget to run out")
        # Both ranks of the lost node were seen and retried side by side, each attempt a restart.
        message = str(sup.failure)
        assert "restart budget exhausted" in message
        assert "rank 0 node_lost" in message and "rank 1 node_lost" in message, message
        assert len(sup.restart_history()) <= 6
    finally:
        remove_placement_group(blocker)
        _teardown(pool, group, sup)
        ray_cluster.gpu_nodes.append(ray_cluster.add_node(num_cpus=4, num_gpus=2))


def _supervised_reinit(tmp_path, **config):
    pool = ResourcePool([3], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(ReinitFaultWorker, fault_dir=str(tmp_path)))
    init_group(group, "init_model", policy=FAST_INIT)
    policy = InitPolicy(timeout_s=30.0, attempts=3, backoff_initial_s=0.1, backoff_max_s=0.2, backoff_jitter_s=0.0)
    sup = GroupSupervisor(group, SupervisionConfig(init_method="init_model", init_policy=policy, probe_period_s=1.0, **config), hooks=RecordingHooks()).start()
    return pool, group, sup


def test_a_replacement_whose_init_fails_is_replaced_again_by_the_one_planner_and_charged(ray_cluster, tmp_path, no_leaks):
    """The supervisor's init task runs one round and replaces nothing: the planner replaces the rank
    whose init raised (its backoff, a plain start), runs the round again, and charges every replacement."""
    pool, group, sup = part = _supervised_reinit(tmp_path)
    try:
        pids = [pid for pid, _ in group.info()]
        (tmp_path / "init-fails-1").write_text("2")  # the replacement's init raises twice, then succeeds
        os.kill(pids[1], signal.SIGKILL)
        _wait(lambda: sup.state is GroupState.RECOVERING, what="the death to be seen")
        _wait(lambda: sup.state is GroupState.RUNNING, timeout_s=90, what="rank 1 to serve again")
        assert (tmp_path / "init-fails-1").read_text() == "0"
        after = group.info()
        assert after[0][0] == pids[0] and after[2][0] == pids[2] and after[1][0] != pids[1]  # only rank 1 was replaced
        assert [s.restarts for s in sup.ranks()] == [0, 3, 0]  # its death, then each failed init
        reasons = [r.reason for r in sup.restart_history()]
        assert reasons == [FailureReason.DIED, FailureReason.INIT_FAILED, FailureReason.INIT_FAILED]
        assert sup.ranks()[1].generation == 1  # one new incarnation served, however many actors it took
        assert not sup.recovery_tasks()
    finally:
        _teardown(*part)


def test_a_replacement_out_of_init_attempts_fails_the_group_saying_why(ray_cluster, tmp_path, no_leaks):
    pool, group, sup = part = _supervised_reinit(tmp_path)
    try:
        pids = [pid for pid, _ in group.info()]
        (tmp_path / "init-fails-2").write_text("-1")
        os.kill(pids[2], signal.SIGKILL)
        _wait(lambda: sup.state is GroupState.FAILED, timeout_s=90, what="the group to fail")
        message = str(sup.failure)
        assert "failed to initialise: init_model: rank(s) [2] out of attempts" in message
        assert "attempt 3/3: raised: ValueError: bad weights on rank 2" in message
        assert not sup.recovery_tasks()
    finally:
        _teardown(*part)
