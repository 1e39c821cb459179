"""WorkerGroup, ResourcePool and dispatch against a real two-node Ray cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import ray
from workers import ActorRole, AsyncProtoWorker, CounterWorker, CriticRole, MeshWorker, ProtoWorker

from supervisor import (
    ClassWithInitArgs,
    ClusterUnavailableError,
    ConfigError,
    DispatchError,
    ResourcePool,
    UnknownMethodError,
    WorkerEnvError,
    WorkerGroup,
    create_colocated_worker_cls,
    merge_resource_pool,
    split_resource_pool,
)
from supervisor.core.group.dispatch import DISPATCH_MODE_FN_REGISTRY, register_dispatch_mode
from supervisor.core.worker.dispatch_modes import Dispatch


@pytest.fixture(scope="module")
def counter_group(ray_cluster):
    """4 CPU-only workers that tests only read from (CPU-only so the module's GPUs stay free)."""
    pool = ResourcePool([4], use_gpu=False, max_colocate_count=1, name_prefix="counter")
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker), name_prefix="counter-")
    try:
        yield group
    finally:
        group.kill()
        pool.teardown()


@pytest.fixture
def fresh_counter(ray_cluster, no_leaks):
    """A small CPU-only group whose state each test may change."""
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker))
    try:
        yield group
    finally:
        group.kill()
        pool.teardown()


def test_readme_example_one_to_all_add(ray_cluster, no_leaks):
    pool = ResourcePool([4], use_gpu=True, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker))
    try:
        assert group.add(1) == [1, 2, 3, 4]
        assert group.world_size == 4
    finally:
        group.kill()
        pool.teardown()


def test_all_to_all_broadcasts_plain_args_and_splits_rank_lists(fresh_counter):
    assert fresh_counter.scale(10) == [0, 10]
    assert fresh_counter.scale([2, 3]) == [0, 3]


def test_rank_zero_dispatch_runs_only_rank_zero(fresh_counter):
    assert fresh_counter.whoami("t") == ("t", 0)


def test_execute_rank_zero_mode_returns_rank_zero_result(fresh_counter):
    fresh_counter.add(5)
    assert fresh_counter.rank_zero_value() == 5


def test_dp_compute_gives_each_rank_its_entry(fresh_counter):
    assert fresh_counter.times_rank([10, 20]) == [10, 40]


def test_dp_compute_rejects_wrong_length(fresh_counter):
    with pytest.raises(DispatchError, match=r"times_rank: DP_COMPUTE needs every argument to be a list with one entry per rank \(2\)"):
        fresh_counter.times_rank([1, 2, 3])


def test_non_blocking_returns_object_refs(fresh_counter):
    refs = fresh_counter.add_nonblocking(3)
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    assert ray.get(refs) == [3, 4]


def test_async_methods_blocking_and_not(fresh_counter):
    assert fresh_counter.async_add(100) == [100, 101]
    refs = fresh_counter.async_add_nonblocking(7)
    assert ray.get(refs) == [7, 8]


def test_execute_all_variants(fresh_counter):
    assert fresh_counter.execute_all_sync("add", 1) == [1, 2]
    assert ray.get(fresh_counter.execute_all_async("add", [10, 20])) == [11, 22]
    assert ray.get(fresh_counter.execute_all("scale", 1)) == [11, 22]
    assert fresh_counter.execute_rank_zero_sync("unregistered") == "direct"
    assert ray.get(fresh_counter.execute_rank_zero_async("scale", 2)) == 22
    assert ray.get(fresh_counter.execute_rank_zero("scale", 3)) == 33


def test_unknown_method_is_a_clear_error(fresh_counter):
    with pytest.raises(UnknownMethodError, match=r"CounterWorker has no method 'nope'"):
        fresh_counter.execute_all_sync("nope")


def test_environment_contract(counter_group):
    keys = ["WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WG_PREFIX", "WG_BACKEND"]
    envs = counter_group.env(keys)
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["RAY_LOCAL_WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["WG_BACKEND"] for e in envs} == {"ray"}
    assert {e["WG_PREFIX"] for e in envs} == {"counter-"}
    # every rank learned rank 0's rendezvous
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {(counter_group.master_address, counter_group.master_port)}
    assert counter_group.master_address == "127.0.0.1"
    assert 0 < int(counter_group.master_port) < 65536


def test_master_port_was_picked_on_rank_zero_node_and_is_bindable(counter_group):
    import socket

    # The port was free when picked; nothing in the test binds it, so binding it from rank 0's node works.
    with socket.socket() as s:
        s.bind((counter_group.master_address, int(counter_group.master_port)))


def test_worker_env_is_added_but_cannot_override_contract(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    with pytest.raises(WorkerEnvError, match=r"worker_env may not override RANK"):
        WorkerGroup(pool, ClassWithInitArgs(CounterWorker), worker_env={"RANK": "7"})
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker), worker_env={"MY_FLAG": "on"})
    try:
        assert [e["MY_FLAG"] for e in group.env(["MY_FLAG"])] == ["on", "on"]
    finally:
        group.kill()
        pool.teardown()


def test_custom_dispatch_mode_registered_and_dict(ray_cluster, no_leaks):
    def dispatch_reverse(wg, *args, **kwargs):
        return tuple(list(reversed(a)) for a in args), kwargs

    def collect_sum(wg, output):
        return sum(output)

    name = "REVERSE_SUM_TEST"
    mode = register_dispatch_mode(name, dispatch_reverse, collect_sum)
    try:
        assert mode is Dispatch.REVERSE_SUM_TEST
        with pytest.raises(ValueError, match="already exists"):
            register_dispatch_mode(name, dispatch_reverse, collect_sum)

        from supervisor import Worker, register

        class Custom(Worker):
            @register(dispatch_mode=mode)
            def times(self, x):
                return x * (self.rank + 1)

            @register(dispatch_mode={"dispatch_fn": dispatch_reverse, "collect_fn": collect_sum})
            def plus(self, x):
                return x + self.rank

        pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
        group = WorkerGroup(pool, ClassWithInitArgs(Custom))
        try:
            # rank 0 gets 20, rank 1 gets 10: 20*1 + 10*2
            assert group.times([10, 20]) == 40
            assert group.plus([1, 2]) == 2 + 1 + 1
        finally:
            group.kill()
            pool.teardown()
    finally:
        DISPATCH_MODE_FN_REGISTRY.pop(mode, None)
        Dispatch.remove(name)


def test_dataproto_compute_with_auto_padding(ray_cluster, no_leaks):
    import numpy as np
    import torch

    from supervisor.core.protocol import DataProto, DataProtoFuture

    pool = ResourcePool([3], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(ProtoWorker))
    try:
        data = DataProto.from_dict(tensors={"x": torch.arange(7)}, auto_padding=True)
        out = group.double(data)
        assert len(data) == 7, "the caller's DataProto must not be padded in place"
        assert out.batch["x"].tolist() == [0, 2, 4, 6, 8, 10, 12]
        # 7 rows padded to 9: ranks see 3 rows each; the padding is stripped from the result
        assert list(out.non_tensor_batch["seen_by"]) == [0, 0, 0, 1, 1, 1, 2]
        assert out.meta_info["metrics"] == {"rows": [3, 3, 3]}

        future = group.double_nonblocking(data)
        assert isinstance(future, DataProtoFuture)
        assert future.get().batch["x"].tolist() == out.batch["x"].tolist()

        # a future is accepted as input and materialised inside the workers
        chained = group.double(group.double_nonblocking(DataProto.from_dict(tensors={"x": torch.arange(6)})))
        assert chained.batch["x"].tolist() == [0, 4, 8, 12, 16, 20]

        assert group.count(DataProto.from_dict(tensors={"x": torch.arange(6)})) == [
            {"rank": 0, "rows": 2},
            {"rank": 1, "rows": 2},
            {"rank": 2, "rows": 2},
        ]

        even = DataProto.from_dict(tensors={"x": torch.arange(6)}, non_tensors={"s": np.array(list("abcdef"), dtype=object)})
        assert group.double(even).batch["x"].tolist() == [0, 2, 4, 6, 8, 10]

        with pytest.raises(DispatchError, match=r"cannot split argument 0 of 7 rows evenly across 3 ranks"):
            group.double(DataProto.from_dict(tensors={"x": torch.arange(7)}))
        with pytest.raises(DispatchError, match=r"splits DataProto arguments; argument 0 is a int"):
            group.double(3)
    finally:
        group.kill()
        pool.teardown()


def test_async_actor_awaits_future_arguments(ray_cluster, no_leaks):
    import torch

    from supervisor.core.protocol import DataProto

    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(AsyncProtoWorker))
    try:
        data = DataProto.from_dict(tensors={"x": torch.arange(5)}, auto_padding=True)
        assert group.async_double(data).batch["x"].tolist() == [0, 2, 4, 6, 8]
        # the producer is still queued when the consumer arrives; awaiting keeps the event loop free
        chained = group.async_double(group.double_nonblocking(DataProto.from_dict(tensors={"x": torch.arange(4)})))
        assert chained.batch["x"].tolist() == [0, 4, 8, 12]
    finally:
        group.kill()
        pool.teardown()


def test_dp_compute_proto_with_func(ray_cluster, no_leaks):
    import torch

    from supervisor.core.protocol import DataProto

    def add_rank(worker, data):
        return DataProto.from_dict(tensors={"x": data.batch["x"] + worker.rank})

    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(ProtoWorker))
    try:
        out = group.execute_with_func_generator(add_rank, DataProto.from_dict(tensors={"x": torch.zeros(4, dtype=torch.long)}))
        assert out.batch["x"].tolist() == [0, 0, 1, 1]
        assert group.execute_func_rank_zero(lambda a, b: a * b, 6, 7) == 42
    finally:
        group.kill()
        pool.teardown()


def test_mesh_dispatch_routes_by_dp_rank_and_collects_flagged_ranks(ray_cluster, no_leaks):
    import torch

    from supervisor.core.protocol import DataProto

    pool = ResourcePool([4], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(MeshWorker))
    try:
        out = group.tag(DataProto.from_dict(tensors={"x": torch.arange(4)}))
        assert group.dispatch_info("train") == [0, 0, 1, 1]
        assert group.collect_info("train") == [True, False, True, False]
        # dp size 2: chunk 0 ([0, 1]) to ranks 0-1, chunk 1 ([2, 3]) to ranks 2-3; ranks 0 and 2 collected
        assert out.batch["x"].tolist() == [0, 1, 2, 3]
        assert list(out.non_tensor_batch["dp_rank"]) == [0, 0, 1, 1]
    finally:
        group.kill()
        pool.teardown()


def test_colocated_roles_share_one_process_per_rank(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=True, max_colocate_count=2)
    cls = create_colocated_worker_cls({"actor": ClassWithInitArgs(ActorRole, lr=0.5), "critic": ClassWithInitArgs(CriticRole)})
    group = WorkerGroup(pool, cls)
    try:
        roles = group.spawn({"actor", "critic"})
        actor, critic = roles["actor"], roles["critic"]
        a = actor.describe()
        c = critic.describe()
        assert [(r[0], r[1], r[2]) for r in a] == [("actor", 0, 0.5), ("actor", 1, 0.5)]
        assert [(r[0], r[1]) for r in c] == [("critic", 0), ("critic", 1)]
        assert [r[3] for r in a] == [r[2] for r in c], "roles of a rank must run in the same process"
        assert critic.value(10) == [10, 11]
        assert group.actor_describe()[0][0] == "actor"
    finally:
        group.kill()
        pool.teardown()


def test_colocation_requires_worker_subclasses():
    class NotAWorker:
        pass

    with pytest.raises(ConfigError, match="must derive from supervisor.Worker"):
        create_colocated_worker_cls({"x": ClassWithInitArgs(NotAWorker)})


def test_bundles_placed_across_two_nodes_and_recorded(ray_cluster, no_leaks):
    pool = ResourcePool([4, 4], use_gpu=True, max_colocate_count=1, name_prefix="twonode")
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker))
    try:
        infos = group.wait_ready()
        nodes = pool.original_bundle_nodes()
        assert len(set(nodes.values())) == 2, "two STRICT_PACK groups of 4 GPUs need both 4-GPU nodes"
        for slot, info in zip(group.slots, infos, strict=True):
            assert info["rank"] == slot.rank
            assert info["node_id"] == pool.bundle_node(slot.pg_index, slot.bundle_index)
        # ranks of one placement group share a node
        assert len({i["node_id"] for i in infos[:4]}) == 1
        assert len({i["node_id"] for i in infos[4:]}) == 1
        assert [s.local_rank for s in group.slots] == [0, 1, 2, 3, 0, 1, 2, 3]
        assert group.add(0) == list(range(8))
    finally:
        group.kill()
        pool.teardown()


def test_teardown_removes_placement_groups_and_is_idempotent(ray_cluster):
    from ray.util import placement_group_table

    pool = ResourcePool([2, 1], use_gpu=True, max_colocate_count=1, name_prefix="teardown")
    pgs = pool.get_placement_groups()
    ids = [pg.id.hex() for pg in pgs]
    assert pool.placement_group_names() == ["teardown:pg2_1:0", "teardown:pg2_1:1"]
    pool.teardown()
    pool.teardown()
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = {i: placement_group_table()[i]["state"] for i in ids}
        if set(states.values()) == {"REMOVED"}:
            break
        time.sleep(0.2)
    assert set(states.values()) == {"REMOVED"}
    # the names are free again: a retried job creates them anew
    again = ResourcePool([2, 1], use_gpu=True, max_colocate_count=1, name_prefix="teardown")
    try:
        assert [pg.id.hex() for pg in again.get_placement_groups()] != ids
    finally:
        again.teardown()


def test_existing_placement_group_is_adopted_not_duplicated(ray_cluster, no_leaks):
    first = ResourcePool([1], use_gpu=False, max_colocate_count=1, name_prefix="adopt", detached=True)
    pg = first.get_placement_groups()[0]
    try:
        second = ResourcePool([1], use_gpu=False, max_colocate_count=1, name_prefix="adopt", detached=True)
        assert second.get_placement_groups()[0].id == pg.id
        other_shape = ResourcePool([1], use_gpu=False, max_colocate_count=2, name_prefix="adopt")
        with pytest.raises(Exception, match="exists with bundles"):
            other_shape.get_placement_groups()
    finally:
        first.teardown()


def test_impossible_pool_fails_at_once_and_leaves_nothing(ray_cluster, no_leaks):
    from supervisor import InfeasibleResourcesError

    pool = ResourcePool([5], use_gpu=True, max_colocate_count=1, name_prefix="toobig")
    with pytest.raises(InfeasibleResourcesError, match=r"toobig:pg5:0 is STRICT_PACK"):
        pool.get_placement_groups(timeout_s=60)
    assert pool.pgs is None


def test_pool_wait_times_out_with_diagnosis_and_leaves_nothing(ray_cluster, no_leaks):
    from supervisor import ResourceWaitTimeout

    holder = ResourcePool([4], use_gpu=True, max_colocate_count=1, name_prefix="holder")
    holder.get_placement_groups()
    try:
        pool = ResourcePool([4, 4], use_gpu=True, max_colocate_count=1, name_prefix="waiter")
        with pytest.raises(ResourceWaitTimeout, match=r"holder:pg4:0 \[CREATED\] holds CPU 4, GPU 4"):
            pool.get_placement_groups(timeout_s=2, progress_interval_s=1)
        assert pool.pgs is None
    finally:
        holder.teardown()


def test_split_and_merge_pools(ray_cluster, no_leaks):
    pool = ResourcePool([4], use_gpu=True, max_colocate_count=1, name_prefix="splitme")
    other = ResourcePool([2], use_gpu=True, max_colocate_count=1, name_prefix="mergeme")
    try:
        left, right = split_resource_pool(pool, 2)
        assert [left.world_size, right.world_size] == [2, 2]
        g_left = WorkerGroup(left, ClassWithInitArgs(CounterWorker))
        g_right = WorkerGroup(right, ClassWithInitArgs(CounterWorker))
        assert [s.bundle_index for s in g_left.slots] == [0, 1]
        assert [s.bundle_index for s in g_right.slots] == [2, 3]
        assert g_right.add(0) == [0, 1], "ranks restart at 0 in each sub-pool"
        g_left.kill()
        g_right.kill()
        left.teardown()  # a view: owns nothing
        assert pool.pgs is not None

        uneven = split_resource_pool(pool, [1, 3])
        assert [p.world_size for p in uneven] == [1, 3]
        with pytest.raises(ConfigError, match="must divide"):
            split_resource_pool(pool, 3)

        merged = merge_resource_pool(pool, other)
        assert merged.world_size == 6
        g = WorkerGroup(merged, ClassWithInitArgs(CounterWorker))
        try:
            assert g.add(0) == [0, 1, 2, 3, 4, 5]
            assert [(s.pg_index, s.bundle_index) for s in g.slots][-2:] == [(1, 0), (1, 1)]
        finally:
            g.kill()
    finally:
        pool.teardown()
        other.teardown()


def test_from_detached_in_a_second_driver_process(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="detached", detached=True)
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker, offset=100), name_prefix="det-", detached=True)
    try:
        assert group.add(1) == [101, 102]
        script = textwrap.dedent(
            f"""
            import json, os, ray
            from supervisor import ClassWithInitArgs, WorkerGroup
            from workers import CounterWorker
            ray.init(address={ray_cluster.address!r}, include_dashboard=False, log_to_driver=False)
            g = WorkerGroup.from_detached(worker_names={group.worker_names!r}, cls_with_init=ClassWithInitArgs(CounterWorker))
            print(json.dumps(g.add(10)))
            """
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [111, 112]
        # state changed by the other driver is visible here: same actors
        assert group.add(0) == [111, 112]
    finally:
        group.kill()
        pool.teardown()


def test_from_detached_unknown_name_is_clear(ray_cluster):
    with pytest.raises(ConfigError, match=r"no actor named 'ghost' in namespace 'ray_supervisor'"):
        WorkerGroup.from_detached(worker_names=["ghost"], cls_with_init=ClassWithInitArgs(CounterWorker))


def test_duplicate_actor_names_fail_cleanly(ray_cluster, no_leaks):
    pool = ResourcePool([1], use_gpu=False, max_colocate_count=2)
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker), name_prefix="dup-")
    try:
        with pytest.raises(ConfigError, match=r"an actor named 'dup-CounterWorker_0:0' already exists"):
            WorkerGroup(pool, ClassWithInitArgs(CounterWorker), name_prefix="dup-")
    finally:
        group.kill()
        pool.teardown()


def _named_actor_alive(name: str) -> bool:
    try:
        ray.get_actor(name, namespace="ray_supervisor")
    except ValueError:
        return False
    return True


def test_kill_ends_actors(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = WorkerGroup(pool, ClassWithInitArgs(CounterWorker), name_prefix="killme-")
    names = list(group.worker_names)
    group.wait_ready()
    group.kill()
    group.kill()
    pool.teardown()
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [n for n in names if _named_actor_alive(n)]
        if not alive:
            break
        time.sleep(0.2)
    assert not alive


def test_ray_not_initialised_is_a_clear_error(ray_cluster):
    ray.shutdown()
    try:
        with pytest.raises(ClusterUnavailableError, match="Ray is not initialised"):
            ResourcePool([1], use_gpu=False).get_placement_groups()
        with pytest.raises(ClusterUnavailableError, match="Ray is not initialised"):
            WorkerGroup(ResourcePool([1], use_gpu=False), ClassWithInitArgs(CounterWorker))
        ResourcePool([1]).teardown()  # safe without Ray
    finally:
        ray.init(address=ray_cluster.address, include_dashboard=False, log_to_driver=False)
