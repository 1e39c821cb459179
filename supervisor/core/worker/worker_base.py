"""The :class:`Worker` base class: the code that runs inside each rank's actor.

A worker reads its identity from the environment contract (:mod:`supervisor.core.worker.env`) when it is
constructed, so subclasses can use ``self.rank`` and ``self.world_size`` in their ``__init__`` and
torch.distributed finds RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT where it expects them.

This module stays light on purpose (no torch import): every actor process imports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import WorkerEnvError
from . import cpu_priority
from .actor_heartbeat import start_heartbeat
from .dispatch_modes import Dispatch, Execute
from .env import STANDBY_ENV_KEY, STANDBY_NICE_ENV_KEY, STANDBY_SCHED_IDLE_ENV_KEY
from .registration import register

__all__ = [
    "DistGlobalInfo",
    "DistRankInfo",
    "Worker",
    "SupervisedEndpoints",
    "WorkerHelper",
    "find_free_port",
    "node_ip_address",
    "send_probe",
    "send_rendezvous",
    "RUN_IN_ORDER_METHOD",
    "MESH_INFO_METHOD",
    "FUSED_METHOD_SEPARATOR",
    "FUSED_EXECUTE_METHOD",
    "fused_method_name",
]

# No supervisor call runs in a concurrency group of its own: any group makes Ray run every call of the
# actor on a thread pool, which costs each of the user's calls. Deaths are seen by a call queued by a
# watcher and never sent (supervisor.supervision.death_watch), hangs by the heartbeat thread
# (supervisor.core.worker.actor_heartbeat); the supervisor's own calls queue behind the user's, in order.

# The endpoint that replays several init calls in one (see SupervisedEndpoints._supervisor_run_in_order).
RUN_IN_ORDER_METHOD = "_supervisor_run_in_order"
# The endpoint a verl group asks for each rank's place on a mesh (SupervisedEndpoints._supervisor_mesh_info).
MESH_INFO_METHOD = "_supervisor_mesh_info"
# verl's fused worker hosts every role in one actor and runs a role's method through one entry point,
# ``_fuw_execute("{role}_fwmn_{method}", ...)`` ("fused worker method name").
FUSED_EXECUTE_METHOD = "_fuw_execute"
FUSED_METHOD_SEPARATOR = "_fwmn_"


def fused_method_name(role: str, name: str) -> str:
    """A fused worker's name for ``role``'s method ``name`` (the argument of ``_fuw_execute``)."""
    return f"{role}{FUSED_METHOD_SEPARATOR}{name}"


def send_probe(handle: Any) -> Any:
    """Ask an actor where it runs (:meth:`SupervisedEndpoints.node_info`): answered once its
    constructor and the calls queued before this one ran."""
    return handle.node_info.remote()


def send_rendezvous(handle: Any, master_addr: str, master_port: int) -> Any:
    """Tell a supervised actor a new rendezvous (it takes it after the calls queued before)."""
    return handle._update_rendezvous.remote(master_addr, master_port)


def node_ip_address() -> str:
    """The IP address Ray uses for this node (loopback on a local cluster)."""
    import ray

    return ray.util.get_node_ip_address().strip("[]")


def find_free_port(host: str = "") -> int:
    """A TCP port that is free on this node right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_address_here(avoid_port: int | None) -> tuple[str, int]:
    """This node's address and a port free on it, never ``avoid_port`` (a rendezvous)."""
    port = find_free_port()
    while port == avoid_port:
        port = find_free_port()
    return node_ip_address(), port


@dataclass
class DistRankInfo:
    """A rank's coordinates in a parallel layout (tensor, data, pipeline, context parallel)."""

    tp_rank: int
    dp_rank: int
    pp_rank: int
    cp_rank: int


@dataclass
class DistGlobalInfo:
    """The sizes of a parallel layout (tensor, data, pipeline, context parallel)."""

    tp_size: int
    dp_size: int
    pp_size: int
    cp_size: int


class WorkerHelper:
    """Node-level helpers available to every worker (verl's names)."""

    @staticmethod
    def _get_node_ip() -> str:
        return node_ip_address()

    @staticmethod
    def _get_free_port() -> int:
        return find_free_port()

    def get_available_master_addr_port(self) -> tuple[str, str]:
        return node_ip_address(), str(find_free_port())

    # verl spelled it this way once; keep both so ported code runs.
    get_availale_master_addr_port = get_available_master_addr_port


def _env_int(name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise WorkerEnvError(
                f"{name} is not set: a Worker must be created by a WorkerGroup (or with RANK, WORLD_SIZE, "
                "MASTER_ADDR and MASTER_PORT in its environment)"
            )
        return default
    try:
        return int(raw)
    except ValueError:
        raise WorkerEnvError(f"{name}={raw!r} is not an integer") from None


class SupervisedEndpoints:
    """What the supervisor calls on every supervised actor, apart from the user's methods.

    :class:`Worker` has these; a class written against another Worker base (verl's own) gets them
    mixed in by its integration, so its actors are watched, beat and are told a new rendezvous the
    same way. The class must keep its rank in ``_rank`` and its rendezvous in ``_master_addr`` and
    ``_master_port`` (verl's Worker and ours both do).
    """

    _rank: int | None

    def node_info(self) -> dict[str, Any]:
        """Where this worker runs: Ray node id, node IP and process id (for placement and drift checks)."""
        import ray

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "node_ip": node_ip_address(), "pid": os.getpid(), "rank": self._rank}

    def _supervisor_free_address(self, avoid_port: int | None) -> tuple[str, int]:
        """This node's address and a free port: a rendezvous picked where rank 0 runs (a standby about
        to become rank 0, or a live rank 0 whose collective re-forms around a replacement)."""
        return free_address_here(avoid_port)

    def _supervisor_sentinel(self, _never: Any = None) -> int:
        """The target of a death watch: queued with an argument that never exists, so it never runs
        (Ray fails it when this process dies)."""
        return os.getpid()

    def _supervisor_start_heartbeat(self) -> dict[str, Any]:
        """Start this process's heartbeat thread (the group calls it first thing on every actor)."""
        return start_heartbeat(lambda: self._rank)

    def _supervisor_collective(self) -> bool:
        """Whether this process has joined a torch.distributed process group (never imports torch)."""
        import sys

        dist = sys.modules.get("torch.distributed")
        return bool(dist is not None and dist.is_available() and dist.is_initialized())

    def _supervisor_run_in_order(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
        """Run ``method(*args, **kwargs)`` for each call, in order, on this actor: the inits of every role
        of a colocated worker, replayed on a replacement as the program ran them."""
        for method, args, kwargs in calls:
            if FUSED_METHOD_SEPARATOR in method and not hasattr(self, method):  # a role of a fused worker
                result = getattr(self, FUSED_EXECUTE_METHOD)(method, *args, **kwargs)
            else:
                result = getattr(self, method)(*args, **kwargs)
            if inspect.iscoroutine(result):  # an async role's init: its own loop, off the actor's thread
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    pool.submit(asyncio.run, result).result()

    def _supervisor_mesh_info(self, mesh: str | tuple[str, str]) -> tuple[int, bool]:
        """This process's dp rank on ``mesh`` and whether its output is collected there: its own
        registration, or for ``(role, mesh)`` that of a colocated worker's role (each role registers
        on its own inner worker, and two roles may use the same mesh name)."""
        # A WorkerDict keeps its roles in worker_dict, a fused worker in fused_worker_dict.
        roles: dict[str, Any] = getattr(self, "worker_dict", None) or getattr(self, "fused_worker_dict", None) or {}
        if isinstance(mesh, (tuple, list)):
            role, name = mesh
            if role not in roles:
                raise ValueError(f"{type(self).__name__} has no role {role!r}")
            return _mesh_place(roles[role], name)
        try:
            return _mesh_place(self, mesh)
        except (AssertionError, KeyError, ValueError, AttributeError):
            # Not registered on the worker itself: a colocated worker's roles, if they agree.
            places = set()
            for worker in roles.values():
                try:
                    places.add(_mesh_place(worker, mesh))
                except (AssertionError, KeyError, ValueError, AttributeError):
                    continue
            if len(places) == 1:
                return places.pop()
            raise ValueError(f"mesh {mesh!r} is registered by {'no role' if not places else 'several roles, differently'} of {type(self).__name__}") from None

    # -- state (supervisor.core.worker.state_endpoints: the worker's state_dict / load_state_dict) ----------
    def _supervisor_snapshot(self, group: str, step: int, keepers: Sequence[Any], disk_dir: str | None = None) -> dict[str, Any]:
        """Copy this rank's state to host memory; hand it to ``keepers`` (and disk) in the background."""
        from .state_endpoints import start_snapshot

        return start_snapshot(self, group, step, keepers, disk_dir)

    def _supervisor_snapshot_wait(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        from .state_endpoints import wait_snapshot

        return wait_snapshot(self, timeout_s)

    def _supervisor_capture_state(self) -> tuple[Any, str]:
        from .state_endpoints import capture_state

        return capture_state(self)

    def _supervisor_load_state(self, state: Any, digest: str) -> dict[str, Any]:
        from .state_endpoints import load_state

        return load_state(self, state, digest)

    def _supervisor_load_disk_state(self, disk_dir: str, group: str, step: int, rank: int, digest: str) -> dict[str, Any]:
        from .state_endpoints import load_disk_state

        return load_disk_state(self, disk_dir, group, step, rank, digest)

    def _supervisor_state_info(self) -> dict[str, Any]:
        from .state_endpoints import state_info

        return state_info(self)

    def _update_rendezvous(self, master_addr: str, master_port: int | str) -> None:
        """Adopt a new rendezvous (rank 0 was replaced); the next init reads it from the environment."""
        self._master_addr, self._master_port = str(master_addr), str(master_port)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = self._master_addr, self._master_port


def _mesh_place(worker: Any, mesh: str) -> tuple[int, bool]:
    return int(worker._query_dispatch_info(mesh)), bool(worker.query_collect_info(mesh))


class _StandbyPriority:
    """Lowers a standby's CPU priority before anything of the user's class runs: its start and warm-up
    take the CPU the ranks leave (core/cpu_priority.py), until it takes over a rank.

    A base of its own, not ``Worker.__new__``: ``inspect.signature(Worker)`` takes a ``__new__``
    defined beside ``__init__`` over it, and Worker's signature must stay verl's.
    """

    _standby_priority: cpu_priority.Lowered | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        instance._standby_priority = None
        if os.environ.get(STANDBY_ENV_KEY):
            nice, idle = _env_int(STANDBY_NICE_ENV_KEY, 0), os.environ.get(STANDBY_SCHED_IDLE_ENV_KEY) == "1"
            instance._standby_priority = cpu_priority.lower(nice, sched_idle=idle)
        return instance


class Worker(SupervisedEndpoints, WorkerHelper, _StandbyPriority):
    """Base class of the user's worker classes.

    Subclasses add methods decorated with :func:`~supervisor.core.worker.registration.register`; the group binds them.
    The constructor must be called (``super().__init__()``) before ``rank``/``world_size`` are used.

    Raises:
        WorkerEnvError: the contract variables are missing or malformed.
    """

    fused_worker_attr_name = "fused_worker_dict"

    @classmethod
    def env_keys(cls) -> list[str]:
        """The environment variables that configure a worker."""
        return ["WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES"]

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        if cuda_visible_devices is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(cuda_visible_devices)
        self._read_identity()
        self.fused_worker_dict: dict[str, Any] = {}
        self._mesh_dispatch_dp_rank: dict[str, int] = {}
        self._mesh_collect_dp_rank: dict[str, bool] = {}

    def _read_identity(self) -> None:
        # A standby starts before it knows which rank it will replace: it has no RANK until it takes one over.
        self._world_size = _env_int("WORLD_SIZE")
        self._rank: int | None = None
        self._local_rank: int | None = None
        self._local_world_size: int | None = None
        if not os.environ.get(STANDBY_ENV_KEY):
            self._rank = _env_int("RANK")
            if not 0 <= self._rank < self._world_size:
                raise WorkerEnvError(f"RANK={self._rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={self._world_size})")
            self._local_world_size = _env_int("LOCAL_WORLD_SIZE", 1)
            self._local_rank = self._resolve_local_rank()
            os.environ["LOCAL_RANK"] = str(self._local_rank)
        master_addr = os.environ.get("MASTER_ADDR")
        master_port = os.environ.get("MASTER_PORT")
        if not master_addr or not master_port:
            raise WorkerEnvError("MASTER_ADDR and MASTER_PORT must be set for a Worker (the group sets them)")
        self._master_addr = master_addr
        self._master_port = master_port

    @staticmethod
    def _resolve_local_rank() -> int:
        # When Ray is told not to set CUDA_VISIBLE_DEVICES, every process sees all GPUs, so the local
        # rank must be the device Ray assigned to this actor rather than the position in the bundle list.
        if os.environ.get("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):
            import ray

            gpu_ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
            if gpu_ids:
                return int(gpu_ids[0])
        return _env_int("LOCAL_RANK", 0)

    # -- identity -------------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def is_standby(self) -> bool:
        """A pre-started standby that has not taken over a rank yet."""
        return self._rank is None

    @property
    def rank(self) -> int:
        return self._identity("rank", self._rank)

    @property
    def local_rank(self) -> int:
        return self._identity("local_rank", self._local_rank)

    @property
    def local_world_size(self) -> int:
        return self._identity("local_world_size", self._local_world_size)

    def _identity(self, what: str, value: int | None) -> int:
        if value is None:
            raise WorkerEnvError(
                f"{what} of a standby is unknown until it takes over a rank: move rank-dependent setup from "
                f"{type(self).__name__}.__init__ into the group's init_method"
            )
        return value

    def get_master_addr_port(self) -> tuple[str, str]:
        return self._master_addr, self._master_port

    def get_cuda_visible_devices(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "not set")

    def get_fused_worker_by_name(self, worker_name: str) -> Any:
        return self.fused_worker_dict.get(worker_name)

    # -- supervision ----------------------------------------------------------------------------
    def _supervisor_take_over(self, env: dict[str, str]) -> dict[str, Any]:
        """Become a rank: a standby adopts the failed rank's environment (rank, rendezvous, user env)."""
        if not self.is_standby:
            raise WorkerEnvError(f"rank {self._rank} is not a standby and cannot take over another rank")
        cpu_priority.restore(self._standby_priority)  # first: it serves as a rank from here on
        self._standby_priority = None
        os.environ.pop(STANDBY_ENV_KEY, None)
        os.environ.update(env)
        self._read_identity()
        for role in getattr(self, "worker_dict", {}).values():  # colocated roles share this process's identity
            if isinstance(role, Worker):
                role._read_identity()
        return self.node_info()

    def _supervisor_warm_up(self, method: str) -> dict[str, Any]:
        """A standby's rank-independent preparation (``method``, the group's standby warm-up), then
        where it runs: its answer is what makes the standby ready."""
        if not self.is_standby:
            raise WorkerEnvError(f"rank {self._rank} is not a standby: only a standby warms up")
        getattr(self, method)()
        return self.node_info()

    # -- mesh dispatch --------------------------------------------------------------------------
    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this rank's data-parallel rank on ``mesh_name`` and whether its output is collected.

        Raises:
            ValueError: ``mesh_name`` was already registered on this worker.
        """
        if mesh_name in self._mesh_dispatch_dp_rank:
            raise ValueError(f"mesh {mesh_name!r} is already registered on rank {self._rank}")
        self._mesh_dispatch_dp_rank[mesh_name] = int(dp_rank)
        self._mesh_collect_dp_rank[mesh_name] = bool(is_collect)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        if mesh_name not in self._mesh_dispatch_dp_rank:
            raise KeyError(f"mesh {mesh_name!r} is not registered on rank {self._rank} of {type(self).__name__}")
        return self._mesh_dispatch_dp_rank[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        return self.query_collect_info(mesh_name)

    def query_collect_info(self, mesh_name: str) -> bool:
        if mesh_name not in self._mesh_collect_dp_rank:
            raise KeyError(f"mesh {mesh_name!r} is not registered on rank {self._rank} of {type(self).__name__}")
        return self._mesh_collect_dp_rank[mesh_name]

    def get_dispatch_collect(self) -> dict[str, dict[str, Any]]:
        return {"dispatch_dp_rank": dict(self._mesh_dispatch_dp_rank), "collect_dp_rank": dict(self._mesh_collect_dp_rank)}

    def set_dispatch_collect(self, mesh_name: str, dispatch_dp_rank: dict[str, int], collect_dp_rank: dict[str, bool]) -> None:
        """Register another worker's mesh registration (its :meth:`get_dispatch_collect`) on this worker
        under ``mesh_name``: colocated roles share one process, each role had its own mesh. As in verl, the
        other worker's last registered mesh is the one taken.

        Raises:
            AssertionError: ``mesh_name`` is already registered here, or the other worker registered nothing.
        """
        assert mesh_name not in self._mesh_dispatch_dp_rank and mesh_name not in self._mesh_collect_dp_rank, (
            f"{mesh_name} is already registered, {list(self._mesh_dispatch_dp_rank)}"
        )
        assert dispatch_dp_rank and collect_dp_rank, f"no mesh registration to set for {mesh_name}"
        self._register_dispatch_collect_info(
            mesh_name, list(dispatch_dp_rank.values())[-1], list(collect_dp_rank.values())[-1]
        )

    # -- generic execution ----------------------------------------------------------------------
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``func(self, *chunks)`` on every rank with this rank's chunk of the DataProto arguments."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``func(*args, **kwargs)`` on rank 0 only."""
        return func(*args, **kwargs)
