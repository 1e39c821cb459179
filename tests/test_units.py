"""Fast tests of the pure parts: modes, registration, dispatch arithmetic, layout, environment contract.

No Ray cluster: these functions take plain values. Where a dispatch function needs a group, a tiny
object with ``world_size`` stands in; dispatch functions only read that attribute.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pytest

from supervisor.core.group.dispatch import (
    PADDING_SIZE_KEY,
    collect_dp_compute,
    collect_nd_compute,
    dispatch_dp_compute,
    dispatch_dp_compute_data_proto,
    dispatch_one_to_all,
    get_predefined_execute_fn,
    resolve_dispatch_fns,
    update_dispatch_mode,
)
from supervisor.core.worker.dispatch_modes import Dispatch, Execute
from supervisor.core.worker.env import (
    RESERVED_ENV_KEYS,
    STANDBY_ENV_KEY,
    STANDBY_NICE_ENV_KEY,
    STANDBY_SCHED_IDLE_ENV_KEY,
    Rendezvous,
    WorkerIdentity,
    check_user_env,
    standby_env_vars,
    worker_env_vars,
)
from supervisor.core.worker.registration import MAGIC_ATTR, get_method_spec, register
from supervisor.errors import ConfigError, DispatchError, SupervisorError, WorkerEnvError
from supervisor.placement.layout import actor_name, bundle_resources, placement_group_name, rank_layout
from supervisor.placement.pool import PlacementStrategy, ResourcePool


@dataclass
class Shape:
    world_size: int


def test_modes_are_singletons_and_pickle_by_name():
    assert Dispatch.get("ONE_TO_ALL") is Dispatch.ONE_TO_ALL
    assert pickle.loads(pickle.dumps(Dispatch.DP_COMPUTE_PROTO)) is Dispatch.DP_COMPUTE_PROTO
    assert isinstance(Execute.ALL, Execute) and not isinstance(Execute.ALL, Dispatch)
    with pytest.raises(KeyError, match="has no member 'NOPE'"):
        Dispatch.get("NOPE")
    with pytest.raises(ValueError, match="must be an identifier"):
        Dispatch.register("not valid")


def test_custom_mode_unpickles_where_it_was_never_registered():
    mode = Dispatch.register("ONLY_HERE_TEST")
    data = pickle.dumps(mode)
    Dispatch.remove("ONLY_HERE_TEST")
    try:
        again = pickle.loads(data)
        assert again.name == "ONLY_HERE_TEST" and again is Dispatch.ONLY_HERE_TEST
    finally:
        Dispatch.remove("ONLY_HERE_TEST")


def test_register_attaches_spec_and_validates():
    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO, blocking=False)
    def f(self, x):
        return x + 1

    spec = get_method_spec(f)
    assert spec is not None
    assert (spec.dispatch_mode, spec.execute_mode, spec.blocking) == (Dispatch.ONE_TO_ALL, Execute.RANK_ZERO, False)
    assert getattr(f, MAGIC_ATTR)["blocking"] is False
    assert f(None, 1) == 2
    assert get_method_spec(lambda: 0) is None
    with pytest.raises(ValueError, match="dispatch_mode must be a Dispatch member or a dict"):
        register(dispatch_mode="ONE_TO_ALL")
    with pytest.raises(ValueError, match=r"missing \['collect_fn'\]"):
        register(dispatch_mode={"dispatch_fn": lambda *a: a})
    with pytest.raises(ValueError, match="execute_mode must be an Execute member"):
        register(execute_mode="ALL")


def test_register_keeps_async_methods_async():
    import asyncio
    import inspect

    @register(Dispatch.ONE_TO_ALL)
    async def g(self, x):
        return x * 2

    assert inspect.iscoroutinefunction(g)
    assert asyncio.run(g(None, 4)) == 8


def test_one_to_all_and_dp_compute():
    args, kwargs = dispatch_one_to_all(Shape(3), 1, k="v")
    assert args == ([1, 1, 1],) and kwargs == {"k": ["v", "v", "v"]}
    assert dispatch_dp_compute(Shape(2), [1, 2], k=[3, 4]) == (([1, 2],), {"k": [3, 4]})
    with pytest.raises(DispatchError, match=r"keyword 'k' is a list of length 3"):
        dispatch_dp_compute(Shape(2), [1, 2], k=[1, 2, 3])
    assert collect_dp_compute(Shape(2), [5, 6]) == [5, 6]
    with pytest.raises(DispatchError, match="expected 2 outputs, got 1"):
        collect_dp_compute(Shape(2), [5])


def test_dataproto_dispatch_pads_a_copy_and_reports_padding():
    import torch

    from supervisor.core.protocol import DataProto

    data = DataProto.from_dict(tensors={"x": torch.arange(5)}, auto_padding=True)
    args, kwargs = dispatch_dp_compute_data_proto(Shape(4), data)
    assert len(data) == 5
    assert kwargs[PADDING_SIZE_KEY] == 3
    assert [len(c) for c in args[0]] == [2, 2, 2, 2]
    with pytest.raises(DispatchError, match="cannot split argument 0 of 5 rows evenly across 4 ranks"):
        dispatch_dp_compute_data_proto(Shape(4), DataProto.from_dict(tensors={"x": torch.arange(5)}))


def test_nd_collect_keeps_flagged_ranks_in_order():
    assert collect_nd_compute([True, False, True, False], Shape(4), ["a", "b", "c", "d"]) == ["a", "c"]


def test_execute_fn_names_and_update_mode():
    assert get_predefined_execute_fn(Execute.ALL) == {"execute_fn_name": "execute_all"}
    assert get_predefined_execute_fn(Execute.RANK_ZERO) == {"execute_fn_name": "execute_rank_zero"}
    original = resolve_dispatch_fns(Dispatch.ALL_TO_ALL)

    def d(wg, *a, **k):
        return a, k

    def c(wg, o):
        return "custom"

    update_dispatch_mode(Dispatch.ALL_TO_ALL, d, c)
    try:
        assert resolve_dispatch_fns(Dispatch.ALL_TO_ALL) == (d, c)
    finally:
        update_dispatch_mode(Dispatch.ALL_TO_ALL, *original)
    with pytest.raises(ValueError, match="is not registered"):
        update_dispatch_mode(Dispatch.register("UNREGISTERED_TEST"), d, c)
    Dispatch.remove("UNREGISTERED_TEST")


def test_rank_layout_orders_ranks_by_placement_group_then_bundle():
    slots = rank_layout([2, 3])
    assert [(s.rank, s.pg_index, s.bundle_index, s.local_rank, s.local_world_size) for s in slots] == [
        (0, 0, 0, 0, 2),
        (1, 0, 1, 1, 2),
        (2, 1, 0, 0, 3),
        (3, 1, 1, 1, 3),
        (4, 1, 2, 2, 3),
    ]
    sub = rank_layout([4, 4], start=3, world_size=2)
    assert [(s.rank, s.pg_index, s.bundle_index) for s in sub] == [(0, 0, 3), (1, 1, 0)]
    with pytest.raises(ConfigError, match="do not fit a pool of 8 bundles"):
        rank_layout([4, 4], start=6, world_size=4)


def test_names_are_deterministic_and_shape_scoped():
    assert placement_group_name("p", [4, 4], 1) == "p:pg4_4:1"
    assert placement_group_name("p", [4, 4], 1) != placement_group_name("p", [4, 2], 1)
    slot = rank_layout([2])[1]
    assert actor_name("g-", "Cls", slot) == "g-Cls_0:1"


def test_bundle_resources():
    assert bundle_resources(3, use_gpu=True) == {"CPU": 3, "GPU": 1}
    assert bundle_resources(1, use_gpu=False) == {"CPU": 1}
    assert bundle_resources(1, use_gpu=True, accelerator_type="A100") == {"CPU": 1, "GPU": 1, "accelerator_type:A100": 0.001}
    with pytest.raises(ConfigError, match="max_colocate_count must be a positive int"):
        bundle_resources(0, use_gpu=True)


def test_pool_validation_without_ray():
    pool = ResourcePool([2, 2], use_gpu=True, max_colocate_count=2, name_prefix="unit")
    assert pool.world_size == 4
    assert pool.local_world_size_list() == [2, 2, 2, 2]
    assert pool.local_rank_list() == [0, 1, 0, 1]
    assert pool.placement_group_names() == ["unit:pg2_2:0", "unit:pg2_2:1"]
    assert pool.strategy is PlacementStrategy.STRICT_PACK
    with pytest.raises(ConfigError, match=r"process_on_nodes\[1\] must be a positive int, got 0"):
        ResourcePool([2, 0])
    with pytest.raises(ConfigError, match="strategy 'diagonal' is not one of"):
        ResourcePool([1], strategy="diagonal")
    with pytest.raises(ConfigError, match="name prefix 'a b'"):
        ResourcePool([1], name_prefix="a b")
    assert ResourcePool([1]).name_prefix != ResourcePool([1]).name_prefix


def test_worker_env_contract():
    env = worker_env_vars(
        WorkerIdentity(rank=3, world_size=8, local_rank=1, local_world_size=2, prefix="g-"),
        Rendezvous("10.0.0.1", 29500),
        {"EXTRA": "1"},
    )
    assert env == {
        "EXTRA": "1",
        "WORLD_SIZE": "8",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "RAY_LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WG_PREFIX": "g-",
        "WG_BACKEND": "ray",
    }
    assert set(env) - {"EXTRA"} == RESERVED_ENV_KEYS - {STANDBY_ENV_KEY, STANDBY_NICE_ENV_KEY, STANDBY_SCHED_IDLE_ENV_KEY}
    standby = standby_env_vars(8, "g-", Rendezvous("10.0.0.1", 29500), {"EXTRA": "1"})
    assert standby == {k: v for k, v in env.items() if k not in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE")} | {
        STANDBY_ENV_KEY: "1"
    }
    assert standby_env_vars(8, "g-", Rendezvous("10.0.0.1", 29500), {"EXTRA": "1"}, nice=10) == standby | {STANDBY_NICE_ENV_KEY: "10"}
    idle = standby_env_vars(8, "g-", Rendezvous("10.0.0.1", 29500), {"EXTRA": "1"}, sched_idle=True)
    assert idle == standby | {STANDBY_SCHED_IDLE_ENV_KEY: "1"}
    with pytest.raises(WorkerEnvError, match="may not override SUPERVISOR_STANDBY"):
        check_user_env({STANDBY_ENV_KEY: "1"})
    with pytest.raises(WorkerEnvError, match="may not override MASTER_PORT, RANK"):
        check_user_env({"RANK": "1", "MASTER_PORT": "1"})
    with pytest.raises(WorkerEnvError, match=r"worker_env\['X'\] must be a string"):
        check_user_env({"X": [1]})


def test_worker_outside_a_group_says_why(monkeypatch):
    from supervisor.core.worker.worker_base import Worker

    for key in RESERVED_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(WorkerEnvError, match="WORLD_SIZE is not set: a Worker must be created by a WorkerGroup"):
        Worker()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(WorkerEnvError, match=r"RANK=5 is outside 0..WORLD_SIZE-1"):
        Worker()


def test_a_standby_worker_has_no_rank_until_it_takes_one_over(monkeypatch):
    from supervisor.core.worker.worker_base import Worker

    env = standby_env_vars(4, "g-", Rendezvous("127.0.0.1", 29500))
    for key in RESERVED_ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    worker = Worker()
    assert worker.is_standby and worker.world_size == 4
    with pytest.raises(WorkerEnvError, match="rank of a standby is unknown.*move rank-dependent setup from Worker.__init__ into the group's init_method"):
        _ = worker.rank
    rank_env = worker_env_vars(WorkerIdentity(rank=2, world_size=4, local_rank=0, local_world_size=2, prefix="g-"), Rendezvous("127.0.0.1", 29600))
    monkeypatch.delenv(STANDBY_ENV_KEY)
    for key, value in rank_env.items():
        monkeypatch.setenv(key, value)
    worker._read_identity()  # what _supervisor_take_over does after updating the environment
    assert (worker.is_standby, worker.rank, worker.local_rank, worker.local_world_size) == (False, 2, 0, 2)
    assert worker.get_master_addr_port() == ("127.0.0.1", "29600")


def test_errors_pickle_and_share_a_base():
    for exc in (ConfigError("a"), DispatchError("b"), WorkerEnvError("c")):
        again = pickle.loads(pickle.dumps(exc))
        assert type(again) is type(exc) and str(again) == str(exc)
        assert isinstance(again, SupervisorError)


def test_mesh_dispatch_chunks_of_a_tensordict_carry_only_their_rows():
    """A row slice of a tensor is a view, and a view pickles its whole storage: each dp rank's chunk
    must be a copy, or the object store gets dp_size times the batch."""
    import pickle

    import torch
    from tensordict import TensorDict

    from supervisor.core.group.dispatch import _chunk_tensordict

    batch = TensorDict({"x": torch.zeros(1000, 1000)}, batch_size=[1000])
    chunks = _chunk_tensordict("test", "argument 0", batch, 4)
    whole = len(pickle.dumps(batch))
    assert [len(c) for c in chunks] == [250] * 4
    assert all(len(pickle.dumps(c)) < whole / 3 for c in chunks)
    chunks[0]["x"][0, 0] = 1.0
    assert batch["x"][0, 0].item() == 0.0  # the caller's batch is untouched
