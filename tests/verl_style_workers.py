"""Worker classes written the way verl users write them, for tests/test_compat_verl.py.

Everything is imported from ``supervisor.compat.verl...``: the only change from verl code is the import
prefix. The module stays light (no torch at module level): every actor process imports it.
"""

from __future__ import annotations

import os

import ray

from supervisor.compat.verl.single_controller.base import Worker
from supervisor.compat.verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    collect_all_to_all,
    register,
)
from supervisor.compat.verl.single_controller.ray import RayClassWithInitArgs, RayWorkerGroup


def two_to_all_dispatch_fn(worker_group, *args, **kwargs):
    """verl's custom-dispatch example: lists of 2 are repeated to every rank, interleaved."""
    for arg in args:
        assert len(arg) == 2
        for i in range(worker_group.world_size - 2):
            arg.append(arg[i % 2])
    for v in kwargs.values():
        assert len(v) == 2
        for i in range(worker_group.world_size - 2):
            v.append(v[i % 2])
    return args, kwargs


class VerlStyleWorker(Worker):
    """A trainer-like worker: ``init_model`` once on every rank, then data-parallel compute."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.weight = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        # every rank receives the same call; the "model" depends on the config and the rank
        self.weight = self.config["scale"]
        return None

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data):
        import numpy as np

        from supervisor.compat.verl import DataProto

        assert self.weight is not None, "init_model was not called on this rank"
        return DataProto.from_dict(
            tensors={"y": data.batch["x"] * self.weight},
            non_tensors={"rank": np.array([self.rank] * len(data), dtype=object)},
            meta_info={"metrics": {"rows": len(data)}, "weight": self.weight},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add_rank(self, data):
        # verl's own tests mutate the received chunk in place and return it
        data.batch["a"] += self.rank
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def save_checkpoint(self, path):
        return {"rank": self.rank, "world_size": self.world_size, "path": path, "weight": self.weight}

    @register(Dispatch.ONE_TO_ALL, blocking=False)
    def foo_one_to_all(self, x, y):
        return self.config["scale"] + x + y

    @register(Dispatch.ALL_TO_ALL, blocking=False)
    def foo_all_to_all(self, x, y):
        return self.config["scale"] + x + y

    @register(dispatch_mode={"dispatch_fn": two_to_all_dispatch_fn, "collect_fn": collect_all_to_all})
    def foo_custom(self, x, y):
        return self.config["scale"] + x + y

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def foo_rank_zero(self, x, y):
        return self.config["scale"] + x + y

    def getenv(self, key):
        # not registered: reached through execute_all_sync, as in verl's tests
        return os.getenv(key, f"{key} not set")

    def pid(self):
        return os.getpid()


@ray.remote
class Actor(Worker):
    """verl's colocation example (tests/single_controller/test_colocated_workers.py)."""

    def __init__(self) -> None:
        super().__init__()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data):
        data.batch["a"] += self.rank
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "actor", self.rank, os.getpid()


@ray.remote
class Critic(Worker):
    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def sub(self, data):
        data.batch["a"] -= self.config["b"]
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return "critic", self.rank, os.getpid()


@ray.remote
class SplitActor(Worker):
    """verl's split_resource_pool example (tests/single_controller/test_split_resource_pool.py), minus torch."""

    def __init__(self, worker_id) -> None:
        super().__init__()
        self.worker_id = worker_id

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def add(self, data):
        data.batch["a"] += self.rank + self.worker_id
        return data

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def placement(self):
        ctx = ray.get_runtime_context()
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "worker_id": self.worker_id,
            "node_id": ctx.get_node_id(),
        }


def attach_and_call(worker_names):
    """verl's ``remote_call_wg``: re-attach to a detached group from another process and drive it."""
    worker_group = RayWorkerGroup.from_detached(
        worker_names=worker_names,
        ray_cls_with_init=RayClassWithInitArgs(cls=ray.remote(VerlStyleWorker), config={}),
        name_prefix=None,
    )
    return {
        "worker_names": list(worker_group.worker_names),
        "foo_custom": worker_group.foo_custom(x=[1, 2], y=[5, 6]),
        "foo_rank_zero": worker_group.foo_rank_zero(x=1, y=2),
        "pids": worker_group.execute_all_sync("pid"),
    }
