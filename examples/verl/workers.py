"""Seed workers written only against the installed verl's API (no supervisor import).

They are what a verl user's own worker module looks like: a ``verl.single_controller.base.Worker``
subclass with methods registered by verl's ``register(Dispatch...)``, taking verl's ``DataProto``.
The supervisor's verl integration must run them unchanged; ``examples/verl/seed_job.py`` drives them
the way verl's trainer drives its roles, and the verl-environment tests use them against a real cluster.

* :class:`SeedWorker`: independent replicas (no collective group).
* :class:`DistSeedWorker`: ranks that form a torch.distributed group in their constructor, as verl's
  FSDP workers do (gloo on CPU here);
* :class:`LateDistSeedWorker`: ranks that form it in ``init_model``;
* :class:`RoleWorker`: one role of a colocated worker, as verl's trainer builds its roles
  (``create_colocated_worker_cls``: every role of a pool in one actor per bundle).
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray
import torch
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import (
    Dispatch,
    Execute,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)

__all__ = ["SeedWorker", "DistSeedWorker", "LateDistSeedWorker", "RoleWorker", "TrainedRoleWorker", "VERL_ENV_KEYS"]

# What verl's RayWorkerGroup puts into every rank's environment (verl 0.9.1, ray/base.py _create_worker).
VERL_ENV_KEYS = ("WORLD_SIZE", "RANK", "WG_PREFIX", "WG_BACKEND", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class SeedWorker(Worker):
    """A replica that doubles a tensor column; it keeps no state a peer depends on.

    Args:
        scale: the factor :meth:`compute` multiplies by (2: "doubles").
    """

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.scale = scale
        self.inits = 0
        self.calls = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        """The role's one-time setup (verl's trainer calls ``init_model`` on every group); returns this rank."""
        self.inits += 1
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def model_info(self) -> dict[str, Any]:
        """Who and where this rank is: pid, rank, the verl environment it started with, its node."""
        return {
            "pid": os.getpid(),
            "rank": self.rank,
            "world_size": self.world_size,
            "env": {k: os.environ.get(k) for k in VERL_ENV_KEYS},
            "node_id": ray.get_runtime_context().get_node_id(),
            "inits": self.inits,
            "calls": self.calls,
            "dist_initialized": _dist_initialized(),
        }

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        """Multiply ``data.batch["x"]`` by ``scale``; keep ``idx`` and tag each row with this rank.

        ``data.meta_info["sleep_s"]`` makes the call wait first (so a test can kill a rank mid-call);
        ``data.meta_info["sleep_rank"]``, when given, limits the wait to that rank.
        """
        self.calls += 1
        sleep_s = float(data.meta_info.get("sleep_s", 0.0))
        sleep_rank = data.meta_info.get("sleep_rank")
        if sleep_s and (sleep_rank is None or int(sleep_rank) == self.rank):
            time.sleep(sleep_s)
        out = {"x": data.batch["x"] * self.scale, "idx": data.batch["idx"].clone()}
        out["rank"] = torch.full_like(data.batch["idx"], self.rank)
        return DataProto.from_dict(tensors=out)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def compute_later(self, data: DataProto) -> DataProto:
        """:meth:`compute`, non-blocking: the group call returns verl's DataProtoFuture at once."""
        return self.compute(data)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def echo(self, value: Any) -> Any:
        """Return ``value`` (each rank gets its own entry when given one per rank)."""
        return value

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def rank_zero_pid(self) -> int:
        """Rank 0's process id (a RANK_ZERO execute mode)."""
        return os.getpid()


class DistSeedWorker(SeedWorker):
    """A rank of a torch.distributed (gloo) group formed in the constructor, like verl's FSDP workers:
    a lone replacement cannot rejoin its peers' process group, so the whole group must be rebuilt."""

    def __init__(self, scale: float = 2.0, timeout_s: float = 60.0) -> None:
        super().__init__(scale)
        import datetime

        import torch.distributed as dist

        # env:// reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which the group set.
        dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce_rank(self) -> float:
        """Sum of every rank's (rank + 1) over the process group: proves the collective group works."""
        import torch.distributed as dist

        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return float(t.item())


class LateDistSeedWorker(SeedWorker):
    """A rank that joins its torch.distributed (gloo) group in ``init_model``, not in its constructor
    (as verl's Megatron workers set up their parallel state at init)."""

    def __init__(self, scale: float = 2.0, timeout_s: float = 60.0) -> None:
        super().__init__(scale)
        self.timeout_s = timeout_s

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        import datetime

        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout_s))
        self.inits += 1
        return self.rank

    all_reduce_rank = DistSeedWorker.all_reduce_rank


# Every role init this process ran, in order: the roles of a colocated worker share one process.
_INITS_IN_PROCESS: list[str] = []


class RoleWorker(Worker):
    """One role of a colocated worker: it serves only after it was set up in this process
    (``init_model``, or ``reset`` as verl's critic is), and the process logs every setup call of its
    roles, in order.

    Its mesh ``train`` (the name every verl engine worker uses) is laid out per role, as two colocated
    roles may lay it out differently: ``ref`` on one dp rank (every rank gets the whole batch, rank 0's
    output is kept), any other role with one dp rank per rank.

    Args:
        role: the role's name (verl's trainer: ``actor_rollout``, ``critic``, ``ref``).
        scale: the factor :meth:`compute` multiplies by.
    """

    def __init__(self, role: str, scale: float) -> None:
        super().__init__()
        self.role = role
        self.scale = scale
        self.ready = False
        self.loss_fn: Any = None

    def _set_up(self, what: str) -> None:
        _INITS_IN_PROCESS.append(f"{self.role}.{what}")
        if not self.ready:
            whole = self.role == "ref"
            self._register_dispatch_collect_info("train", dp_rank=0 if whole else self.rank, is_collect=self.rank == 0 or not whole)
        self.ready = True

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        self._set_up("init_model")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def reset(self) -> None:
        """verl's engine workers: initialise the engine (the trainer's critic setup)."""
        self._set_up("reset")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def set_loss_fn(self, loss_fn: Any) -> None:
        self.loss_fn = loss_fn
        _INITS_IN_PROCESS.append(f"{self.role}.set_loss_fn:{getattr(loss_fn, '__name__', loss_fn)}")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def process_info(self) -> dict[str, Any]:
        """This process: pid, rank, and every setup call of its roles, in order."""
        return {"pid": os.getpid(), "rank": self.rank, "inits": list(_INITS_IN_PROCESS)}

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute(self, data: DataProto) -> DataProto:
        """``data.batch["x"]`` times ``scale``, ``idx`` kept, rows tagged with this rank; refused before setup."""
        if not self.ready:
            raise RuntimeError(f"role {self.role}: not set up in this process (init_model or reset)")
        idx = data.batch["idx"].clone()
        return DataProto.from_dict(tensors={"x": data.batch["x"] * self.scale, "idx": idx, "rank": torch.full_like(idx, self.rank)})

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"))
    def compute_on_mesh(self, data: DataProto) -> DataProto:
        """:meth:`compute` dispatched on the role's ``train`` mesh (verl's engine workers' mode)."""
        return self.compute(data)


def _dist_initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


class TrainedRoleWorker(RoleWorker):
    """A role that trains (verl's actor roles): ``update_actor`` changes what the rank holds, and
    nothing here can restore it, so the supervisor must never re-initialise it silently."""

    def __init__(self, role: str, scale: float) -> None:
        super().__init__(role, scale)
        self.updates = 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_actor(self) -> int:
        if not self.ready:
            raise RuntimeError(f"role {self.role}: not set up in this process (init_model or reset)")
        self.updates += 1
        self.scale += 1.0
        return self.updates
