"""create_group (lenient resource wait with diagnosis) and init_group (strict per-rank retries) on real Ray."""

from __future__ import annotations

import time

import pytest
import ray
from ray.util import placement_group, remove_placement_group
from workers import BrokenConstructor, CounterWorker, InitWorker, RendezvousWorker

from supervisor import ClassWithInitArgs, ResourcePool
from supervisor.observability.hooks import ObservingHooks
from supervisor.observability.metrics import REGISTRY
from supervisor.placement.resource_wait import InfeasibleResourcesError, ResourceWaitTimeout
from supervisor.supervision.init_policy import InitOutcome, InitPolicy
from supervisor.supervision.lifecycle import ActorStartError, InitGroupError, create_group, init_group

FAST = InitPolicy(timeout_s=20.0, attempts=3, backoff_initial_s=0.05, backoff_max_s=0.2, backoff_jitter_s=0.05)


class RecordingHooks(ObservingHooks):
    """The default hooks (metrics, logs) plus a record of progress reports and an optional action."""

    def __init__(self, on_first_progress=None):
        self.progress = []
        self.done = []
        self._on_first_progress = on_first_progress

    def on_resource_wait_progress(self, pool, waited_s, diagnosis):
        super().on_resource_wait_progress(pool, waited_s, diagnosis)
        self.progress.append((waited_s, diagnosis))
        if self._on_first_progress is not None and len(self.progress) == 1:
            self._on_first_progress()

    def on_resource_wait_done(self, pool, waited_s, outcome):
        super().on_resource_wait_done(pool, waited_s, outcome)
        self.done.append((outcome, waited_s))


@pytest.fixture
def blocker(ray_cluster):
    """Another job's placement group holding all 4 GPUs of one node."""
    pg = placement_group([{"GPU": 1, "CPU": 1}] * 4, strategy="STRICT_PACK", name="other-job-gpus")
    ray.get(pg.ready(), timeout=60)
    yield pg
    remove_placement_group(pg)


def _sample(name, **labels):
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_wait_reports_blocker_then_times_out_leaving_nothing(ray_cluster, blocker, no_leaks):
    pool = ResourcePool([4, 4], use_gpu=True, max_colocate_count=1, name_prefix="starved")
    hooks = RecordingHooks()
    before = _sample("supervisor_resource_wait_seconds_count", pool="starved")
    started = time.monotonic()
    with pytest.raises(ResourceWaitTimeout) as info:
        create_group(pool, ClassWithInitArgs(CounterWorker), resource_timeout_s=3, progress_interval_s=1, hooks=hooks)
    assert 3 <= time.monotonic() - started < 15
    message = str(info.value)
    assert "resources not available after 3s" in message
    assert "pool starved: 4/8 bundles placed" in message
    assert "GPU asks 8 (cluster total 8, available 0)" in message
    assert "pending: starved:pg4_4:1 (4 x CPU 1, GPU 1)" in message
    assert "other-job-gpus [CREATED] holds CPU 4, GPU 4" in message
    assert len(hooks.progress) >= 2, "progress must be reported at a steady cadence while waiting"
    diagnosis = hooks.progress[-1][1]
    assert diagnosis.bundles_requested == 8 and diagnosis.bundles_placed == 4
    assert any(b.startswith("other-job-gpus") for b in diagnosis.blockers)
    assert hooks.done == [("timeout", pytest.approx(3, abs=1.5))]
    assert _sample("supervisor_resource_wait_seconds_count", pool="starved") == before + 1
    assert pool.pgs is None


def test_infeasible_demand_fails_at_once(ray_cluster, no_leaks):
    pool = ResourcePool([5], use_gpu=True, max_colocate_count=1, name_prefix="toolarge")
    started = time.monotonic()
    with pytest.raises(InfeasibleResourcesError) as info:
        create_group(pool, ClassWithInitArgs(CounterWorker))
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"an infeasible demand must fail at once, took {elapsed:.1f}s"
    assert "toolarge:pg5:0 is STRICT_PACK: its 5 bundles need CPU 5, GPU 5 on one node, but the largest node has CPU 16, GPU 4" in str(info.value)

    too_many = ResourcePool([4, 4, 4], use_gpu=True, max_colocate_count=1, name_prefix="toomany")
    with pytest.raises(InfeasibleResourcesError, match=r"asks for more than the whole cluster has \(GPU: asks 12, cluster has 8\)"):
        create_group(too_many, ClassWithInitArgs(CounterWorker))


def test_resources_freed_during_wait_complete_without_restart(ray_cluster, blocker, no_leaks):
    pool = ResourcePool([4, 4], use_gpu=True, max_colocate_count=1, name_prefix="freed")
    hooks = RecordingHooks(on_first_progress=lambda: remove_placement_group(blocker))
    group = create_group(pool, ClassWithInitArgs(CounterWorker), resource_timeout_s=60, progress_interval_s=1, hooks=hooks)
    try:
        assert len(hooks.progress) >= 1
        assert [o for o, _ in hooks.done] == ["ready"]
        assert group.add(0) == list(range(8))
        assert sorted(group.rank_nodes) == list(range(8))
    finally:
        group.kill()
        pool.teardown()


def test_create_group_runs_no_init_and_records_nodes(ray_cluster, tmp_path, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(InitWorker, counter_dir=str(tmp_path)))
    try:
        assert [s[0] for s in group.status()] == [False, False]
        assert not list(tmp_path.iterdir()), "create_group must not call the init method"
        assert set(group.rank_nodes) == {0, 1}
    finally:
        group.kill()
        pool.teardown()


def test_broken_constructor_cleans_up(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="brokenctor")
    with pytest.raises(ActorStartError, match=r"rank 0: constructor raised RuntimeError: cannot load tokenizer; rank 1: "):
        create_group(pool, ClassWithInitArgs(BrokenConstructor))
    assert pool.pgs is None


def _actor_ids(group):
    return [w._actor_id.hex() for w in group.workers]


def _make(tmp_path, world=3, **kwargs):
    pool = ResourcePool([world], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(InitWorker, counter_dir=str(tmp_path), **kwargs))
    return pool, group


def test_rank_raising_twice_then_succeeding_is_replaced_alone(ray_cluster, tmp_path, no_leaks):
    pool, group = _make(tmp_path, bad_rank=1, bad_times=2, mode="raise")
    try:
        before = _actor_ids(group)
        raised_before = _sample("supervisor_init_attempts_total", group=group.name, outcome="raised")
        history = init_group(group, policy=FAST)
        rank1 = [a for a in history if a.rank == 1]
        assert [a.outcome for a in rank1] == [InitOutcome.RAISED, InitOutcome.RAISED, InitOutcome.OK]
        assert [a.attempt for a in rank1] == [1, 2, 3]
        assert "ValueError: bad weights on rank 1" in rank1[0].error
        assert rank1[0].bundle == "0:1" and rank1[0].node_id
        after = _actor_ids(group)
        assert after[0] == before[0] and after[2] == before[2], "ranks that succeeded must not be touched"
        assert after[1] != before[1]
        assert [s[0] for s in group.status()] == [True, True, True]
        assert _sample("supervisor_init_attempts_total", group=group.name, outcome="raised") == raised_before + 2
        assert _sample("supervisor_init_attempts_total", group=group.name, outcome="ok") >= 3
    finally:
        group.kill()
        pool.teardown()


def test_hanging_rank_times_out_and_is_replaced(ray_cluster, tmp_path, no_leaks):
    pool, group = _make(tmp_path, world=2, bad_rank=1, bad_times=1, mode="hang")
    try:
        policy = InitPolicy(timeout_s=3.0, attempts=2, backoff_initial_s=0.05, backoff_max_s=0.1, backoff_jitter_s=0.0)
        history = init_group(group, policy=policy)
        first = [a for a in history if a.rank == 1][0]
        assert first.outcome is InitOutcome.TIMED_OUT
        assert "timed out" in first.error
        assert [s[0] for s in group.status()] == [True, True]
    finally:
        group.kill()
        pool.teardown()


def test_rank_dying_in_init_is_classified_died_and_replaced(ray_cluster, tmp_path, no_leaks):
    pool, group = _make(tmp_path, world=2, bad_rank=1, bad_times=1, mode="die")
    try:
        history = init_group(group, policy=FAST)
        first = [a for a in history if a.rank == 1][0]
        assert first.outcome is InitOutcome.DIED
        assert "actor died" in first.error
        assert [s[0] for s in group.status()] == [True, True]
    finally:
        group.kill()
        pool.teardown()


def test_a_rank_dying_in_a_collective_init_abandons_its_peers_calls_instead_of_waiting_them_out(ray_cluster, tmp_path, no_leaks):
    """Three ranks join a real gloo rendezvous and rank 1 dies before joining: ranks 0 and 2 wait in
    it for a peer that never comes. A collective init does not wait out their store timeout: their
    calls are abandoned, all three get fresh actors (rank 0's brings a new rendezvous) and the group
    forms; only rank 1 is charged an attempt."""
    pool = ResourcePool([3], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(RendezvousWorker, counter_dir=str(tmp_path), dead_rank=1))
    try:
        history = init_group(group, policy=FAST, collective=True)
        first = {a.rank: a for a in history[:3]}
        assert first[1].outcome is InitOutcome.DIED
        assert first[0].outcome is first[2].outcome is InitOutcome.ABANDONED
        assert "rank 1's init died first" in first[0].error
        assert [a.outcome for a in history[3:]] == [InitOutcome.OK] * 3
    finally:
        group.kill()
        pool.teardown()


def test_rank_zero_replaced_gives_every_rank_the_new_rendezvous(ray_cluster, tmp_path, no_leaks):
    pool, group = _make(tmp_path, world=3, bad_rank=0, bad_times=1, mode="raise")
    try:
        old = f"{group.master_address}:{group.master_port}"
        before = _actor_ids(group)
        history = init_group(group, policy=FAST)
        new = f"{group.master_address}:{group.master_port}"
        statuses = group.status()
        assert {s[1] for s in statuses} == {new}, "every rank must end with the same, new MASTER_ADDR/PORT"
        assert new != old
        after = _actor_ids(group)
        assert after[0] != before[0] and after[1:] == before[1:], "only rank 0's actor is replaced"
        # ranks 1 and 2 succeeded in round 1 and re-ran init in round 2 because of the new rendezvous
        assert [a.outcome for a in history if a.rank == 1] == [InitOutcome.OK, InitOutcome.OK]
        assert [s[0] for s in statuses] == [True, True, True]
    finally:
        group.kill()
        pool.teardown()


def test_rank_that_always_fails_fails_the_group_and_kills_its_actors(ray_cluster, tmp_path, no_leaks):
    pool, group = _make(tmp_path, world=3, bad_rank=2, bad_times=-1, mode="raise")
    names = list(group.worker_names)
    try:
        with pytest.raises(InitGroupError) as info:
            init_group(group, policy=FAST)
        message = str(info.value)
        assert "init_model failed on group" in message and "rank(s) [2] out of attempts" in message
        assert "rank 2 (node" in message and "bundle 0:2) attempt 3/3: raised: ValueError: bad weights on rank 2" in message
        assert "rank 0 (node" in message and "ok on attempt 1" in message
        assert [o.outcome for o in info.value.outcomes] == [InitOutcome.OK, InitOutcome.OK, InitOutcome.RAISED]
        deadline = time.monotonic() + 10
        alive = names
        while alive and time.monotonic() < deadline:
            alive = [n for n in names if _named_actor_alive(n)]
            time.sleep(0.2)
        assert not alive, f"actors survived a failed init_group: {alive}"
        assert pool.pgs is not None, "the pool is left for its owner"
    finally:
        group.kill()
        pool.teardown()


def _named_actor_alive(name):
    try:
        ray.get_actor(name, namespace="ray_supervisor")
    except ValueError:
        return False
    return True
