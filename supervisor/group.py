"""``WorkerGroup``: one named actor per rank, placed into its bundle, driven as a unit.

The group creates the actors (with the environment contract of :mod:`supervisor.env`), binds the
worker class's registered methods onto itself (:mod:`supervisor.binding`) and runs calls on all
ranks or on rank 0. Actors get deterministic names in a fixed namespace, so another driver can
re-attach to a detached group with :meth:`WorkerGroup.from_detached`.
"""

from __future__ import annotations

import uuid
from typing import Any

from .actor_class import ClassWithInitArgs
from .binding import bind_registered_methods
from .env import Rendezvous, WorkerIdentity, check_user_env, worker_env_vars
from .errors import ClusterUnavailableError, ConfigError, UnknownMethodError
from .layout import BundleSlot, actor_name, validate_name_prefix
from .log import get_logger
from .pool import PlacementStrategy, ResourcePool
from .rendezvous import pick_rendezvous
from .worker import SUPERVISION_CONCURRENCY_GROUPS, Worker, send_rendezvous

__all__ = ["WorkerGroup", "DEFAULT_NAMESPACE"]

# Named actors are looked up per namespace; a fixed one lets any driver find a detached group.
DEFAULT_NAMESPACE = "ray_supervisor"

log = get_logger("group")


class WorkerGroup:
    """A group of worker actors, one per rank of a resource pool.

    Args:
        resource_pool: where the ranks go; None when attaching to existing actors.
        cls_with_init: the worker class and its constructor arguments.
        bin_pack: create the pool's placement groups with STRICT_PACK (else PACK) if not created yet.
        name_prefix: prefix of the actor names; a fresh unique one when None.
        detached: actors outlive the creating job.
        worker_names: attach to these existing actors instead of creating new ones.
        worker_handles: attach to these actor handles (keeps strong references).
        worker_env: extra environment variables for every rank; may not override the contract.
        namespace: Ray namespace of the named actors.
        master_addr, master_port: use this rendezvous instead of picking one on rank 0's node.
        adopt: with a resource pool, attach to the live actors that already carry this group's
            names (a detached group left by an earlier supervisor) and create only the missing ranks;
            ``adopted_ranks`` lists the ranks attached. If rank 0 is missing, a new rendezvous is picked.

    Raises:
        ConfigError / WorkerEnvError: invalid arguments (nothing is created).
        ClusterUnavailableError: Ray is not initialised.
        PlacementError: the pool's resources are not available.
    """

    def __init__(
        self,
        resource_pool: ResourcePool | None = None,
        cls_with_init: ClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        worker_env: dict[str, str] | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        master_addr: str | None = None,
        master_port: int | str | None = None,
        adopt: bool = False,
    ) -> None:
        self.name_prefix = validate_name_prefix(name_prefix) if name_prefix else f"wg-{uuid.uuid4().hex[:6]}-"
        self.namespace = namespace
        self.detached = bool(detached)
        self.cls_with_init = cls_with_init
        self.resource_pool = resource_pool
        self.worker_env = check_user_env(worker_env)
        self.fused_worker_used = False
        self.sub_cls_name = ""
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        self._slots: list[BundleSlot] = []
        self._pgs: list[Any] = []
        self._rendezvous: Rendezvous | None = None
        self._dispatch_info: dict[str, list[int]] = {}
        self._collect_info: dict[str, list[bool]] = {}
        self.method_names: list[str] = []
        self.adopted_ranks: list[int] = []
        # Node of each rank's current actor, once known (filled by create_group / init_group; a
        # replacement forgets its rank's entry).
        self.rank_nodes: dict[int, str] = {}
        # Set by a GroupSupervisor: blocking calls then survive rank failures (see supervised_call).
        self.supervisor: Any = None
        if (master_addr is None) != (master_port is None):
            raise ConfigError("give both master_addr and master_port, or neither (rank 0's node is then used)")
        if master_addr is not None:
            self._rendezvous = Rendezvous(str(master_addr), int(master_port))  # type: ignore[arg-type]

        import ray

        if not ray.is_initialized():
            raise ClusterUnavailableError("Ray is not initialised: call ray.init(address=...) before creating a WorkerGroup")
        if resource_pool is None:
            if not worker_names and not worker_handles:
                raise ConfigError("a WorkerGroup needs a resource_pool, or worker_names/worker_handles to attach to")
            self._attach(worker_names, worker_handles)
        else:
            if cls_with_init is None:
                raise ConfigError("cls_with_init is required to create workers in a resource pool")
            self._create_workers(resource_pool, cls_with_init, bin_pack, adopt)
        if cls_with_init is not None:
            self.method_names = bind_registered_methods(self, cls_with_init.user_cls)

    # -- construction ---------------------------------------------------------------------------
    def _attach(self, worker_names: list[str] | None, worker_handles: list[Any] | None) -> None:
        import ray

        if worker_handles:
            self._workers = list(worker_handles)
            self._worker_names = list(worker_names) if worker_names else []
            return
        assert worker_names is not None
        handles = []
        for name in worker_names:
            try:
                handles.append(ray.get_actor(name, namespace=self.namespace))
            except ValueError:
                raise ConfigError(f"no actor named {name!r} in namespace {self.namespace!r}") from None
        self._workers = handles
        self._worker_names = list(worker_names)

    def _create_workers(self, pool: ResourcePool, cls_with_init: ClassWithInitArgs, bin_pack: bool, adopt: bool) -> None:
        if self.detached and not pool.detached:
            log.warning("detached_group_in_non_detached_pool", group=self.name_prefix, pool=pool.name_prefix)
        pgs = pool.get_placement_groups(strategy=None if bin_pack else PlacementStrategy.PACK)
        self._pgs = list(pgs)
        slots = pool.rank_slots()
        class_name = cls_with_init.user_cls.__name__
        names = [actor_name(self.name_prefix, class_name, slot) for slot in slots]
        existing = {rank: handle for rank, name in enumerate(names) if adopt and (handle := self._find_actor(name)) is not None}
        if self._rendezvous is None or (adopt and 0 not in existing):
            # Rank 0 is created now, so its rendezvous is picked now on its bundle's node, never on
            # an adopted group's earlier port (stale peers may still connect to it).
            first = slots[0]
            previous = self._rendezvous.master_port if self._rendezvous else None
            self._rendezvous = pick_rendezvous(pgs[first.pg_index], first.bundle_index, avoid_port=previous)
        created: list[Any] = []
        try:
            for slot, name in zip(slots, names, strict=True):
                handle = existing.get(slot.rank)
                if handle is None:
                    handle = self._create_actor(pool, pgs, cls_with_init, slot, name, len(slots))
                    created.append(handle)
                self._workers.append(handle)
                self._worker_names.append(name)
                self._slots.append(slot)
        except BaseException:
            # Transactional start: a half-created group leaves no actors behind (adopted ones stay).
            self._workers = created
            self.kill()
            raise
        self.adopted_ranks = sorted(existing)
        log.info(
            "group_adopted" if existing else "group_created",
            adopted=len(existing),
            group=self.name_prefix,
            cls=class_name,
            world_size=len(slots),
            pool=pool.name_prefix,
            master=f"{self._rendezvous.master_addr}:{self._rendezvous.master_port}",
        )

    def _create_actor(
        self, pool: ResourcePool, pgs: list[Any], cls_with_init: ClassWithInitArgs, slot: BundleSlot, name: str, world_size: int
    ) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        assert self._rendezvous is not None
        identity = WorkerIdentity(
            rank=slot.rank,
            world_size=world_size,
            local_rank=slot.local_rank,
            local_world_size=slot.local_world_size,
            prefix=self.name_prefix,
        )
        options = dict(cls_with_init.options)
        runtime_env = dict(options.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **worker_env_vars(identity, self._rendezvous, self.worker_env)}
        options.update(
            runtime_env=runtime_env,
            name=name,
            namespace=self.namespace,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=pgs[slot.pg_index], placement_group_bundle_index=slot.bundle_index
            ),
        )
        if pool.use_gpu:
            options.setdefault("num_gpus", 1 / pool.max_colocate_count)  # an even share unless the class says
        # Worker subclasses carry the supervisor's sentinel and probe, which run in their own groups.
        groups = SUPERVISION_CONCURRENCY_GROUPS if issubclass(cls_with_init.user_cls, Worker) else None
        if self.detached:
            options["lifetime"] = "detached"
        try:
            actor_cls = cls_with_init.actor_class(concurrency_groups=groups)
            return actor_cls.options(**options).remote(*cls_with_init.args, **cls_with_init.kwargs)
        except ValueError as exc:
            if "already taken" in str(exc) or "already exists" in str(exc):
                raise ConfigError(
                    f"an actor named {name!r} already exists in namespace {self.namespace!r}: re-attach with "
                    f"WorkerGroup.from_detached(worker_names=[...]) or kill it first"
                ) from None
            raise

    def _find_actor(self, name: str) -> Any | None:
        import ray

        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:  # no live actor of that name (a dead detached actor frees its name)
            return None

    @classmethod
    def from_detached(
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        cls_with_init: ClassWithInitArgs | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        **kwargs: Any,
    ) -> WorkerGroup:
        """Attach to existing (typically detached) actors by name or handle, and bind the class's methods.

        Raises:
            ConfigError: a named actor does not exist in ``namespace``.
        """
        return cls(
            resource_pool=None,
            cls_with_init=cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            namespace=namespace,
            **kwargs,
        )

    def spawn(self, prefix_set: set[str] | list[str]) -> dict[str, WorkerGroup]:
        """One group per role of a colocated group, sharing its actors, with the role's methods unprefixed.

        Returns:
            ``{role: group}``; ``group.method(...)`` calls ``role_method`` on the colocated actors.
        """
        out: dict[str, WorkerGroup] = {}
        for role in prefix_set:
            # Bypass subclass constructors (the verl adapter renames arguments): same type, attached.
            group = type(self).__new__(type(self))
            WorkerGroup.__init__(
                group,
                cls_with_init=self.cls_with_init,
                name_prefix=self.name_prefix,
                worker_names=self._worker_names,
                worker_handles=self._workers,
                namespace=self.namespace,
            )
            group._slots = list(self._slots)
            group._pgs = list(self._pgs)
            group._rendezvous = self._rendezvous
            group.resource_pool = self.resource_pool
            prefix = role + "_"
            for method_name in list(group.method_names):
                if method_name.startswith(prefix):
                    setattr(group, method_name[len(prefix) :], getattr(group, method_name))
            group.sub_cls_name = role
            out[role] = group
        return out

    # -- replacement ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The group's name in metrics and logs: its prefix without trailing separators."""
        return self.name_prefix.rstrip("-_:.") or self.name_prefix

    def replace_worker(self, rank: int, name_release_timeout_s: float = 30.0) -> Any:
        """Kill rank ``rank``'s actor and create a fresh one into the same bundle.

        The new actor has the same name, rank and environment. Replacing rank 0 also replaces the
        rendezvous (it lives on rank 0's node): once the old actor is gone a fresh MASTER_ADDR/PORT is
        picked on its bundle and the new rank 0 starts with it; live ranks learn it through
        :meth:`propagate_rendezvous`. Only groups that created their actors can replace them.

        Returns:
            The new actor handle.

        Raises:
            ConfigError: the group was attached by name or handle, or ``rank`` is out of range.
            TimeoutError: Ray did not release the old actor's name in time.
        """
        if not self._slots or self.resource_pool is None or self.cls_with_init is None:
            raise ConfigError(f"group {self.name_prefix} did not create its actors, so it cannot replace them")
        if not 0 <= rank < len(self._workers):
            raise ConfigError(f"rank {rank} is outside 0..{len(self._workers) - 1}")
        import ray

        name = self._worker_names[rank]
        try:
            ray.kill(self._workers[rank], no_restart=True)
        except Exception as exc:  # already dead
            log.debug("actor_kill_failed", group=self.name_prefix, rank=rank, error=str(exc))
        self._wait_name_released(name, name_release_timeout_s)
        self.rank_nodes.pop(rank, None)  # the new incarnation's node is learnt when it answers
        if rank == 0:
            self._pick_new_rendezvous()
        handle = self._create_actor(self.resource_pool, self._pgs, self.cls_with_init, self._slots[rank], name, len(self._workers))
        self._workers[rank] = handle
        return handle

    def _wait_name_released(self, name: str, timeout_s: float) -> None:
        # ray.kill is asynchronous: the GCS frees the name once the actor is DEAD.
        import time

        import ray

        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            try:
                ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"actor name {name!r} still taken {timeout_s:.0f}s after killing its actor")
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _pick_new_rendezvous(self) -> Rendezvous:
        # On rank 0's bundle, and never the previous port: stale peers may still connect to it.
        first = self._slots[0]
        previous = self._rendezvous.master_port if self._rendezvous else None
        self._rendezvous = pick_rendezvous(self._pgs[first.pg_index], first.bundle_index, avoid_port=previous)
        return self._rendezvous

    def propagate_rendezvous(self, survivors: list[int], timeout_s: float = 60.0) -> list[int]:
        """After rank 0 was replaced, tell the live ``survivors`` the new rendezvous (updated in place).

        A survivor that cannot take it within ``timeout_s`` (dead or stuck) is replaced instead, so it
        starts with the new rendezvous in its environment.

        Returns:
            The survivors that were replaced.
        """
        import ray

        assert self._rendezvous is not None
        rdv = self._rendezvous
        refs = {send_rendezvous(self._workers[r], rdv.master_addr, rdv.master_port): r for r in survivors}
        # One deadline for all: stuck ranks must not add up their timeouts.
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        lost = [refs[ref] for ref in refs if ref not in set(ready)]
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                lost.append(refs[ref])
        for rank in sorted(lost):
            self.replace_worker(rank)
        return sorted(lost)

    # -- execution ------------------------------------------------------------------------------
    def _remote(self, worker: Any, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            method = getattr(worker, method_name)
        except AttributeError:
            cls_name = self.cls_with_init.user_cls.__name__ if self.cls_with_init else "the worker class"
            raise UnknownMethodError(f"{cls_name} has no method {method_name!r} (group {self.name_prefix})") from None
        return method.remote(*args, **kwargs)

    def rank_arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """The arguments each rank receives from an ``execute_all`` call.

        When every argument is a list of world_size entries, rank i gets entry i of each; otherwise
        every rank gets the arguments as they are (verl's rule).
        """
        n = len(self._workers)
        values = [*args, *kwargs.values()]
        if all(isinstance(v, list) and len(v) == n for v in values):
            return [(tuple(a[i] for a in args), {k: v[i] for k, v in kwargs.items()}) for i in range(n)]
        return [(args, kwargs)] * n

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method_name`` on every rank; returns one ObjectRef per rank (see :meth:`rank_arguments`)."""
        return [
            self._remote(w, method_name, a, k) for w, (a, k) in zip(self._workers, self.rank_arguments(args, kwargs), strict=True)
        ]

    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method_name`` on every rank and wait for the results (in rank order)."""
        import ray

        return list(ray.get(self.execute_all_async(method_name, *args, **kwargs)))

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Alias of :meth:`execute_all_async` (verl's semantics)."""
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method_name`` on rank 0; returns its ObjectRef."""
        return self._remote(self._workers[0], method_name, args, kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(self.execute_rank_zero_async(method_name, *args, **kwargs))

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Alias of :meth:`execute_rank_zero_async` (verl's semantics)."""
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    # -- mesh dispatch info ---------------------------------------------------------------------
    def dispatch_info(self, mesh_name: str) -> list[int]:
        """dp rank of every rank on ``mesh_name`` (asked once, then cached)."""
        if mesh_name not in self._dispatch_info:
            self._dispatch_info[mesh_name] = self.execute_all_sync("_query_dispatch_info", mesh_name)
        return self._dispatch_info[mesh_name]

    def collect_info(self, mesh_name: str) -> list[bool]:
        """Whether each rank's output is collected on ``mesh_name`` (asked once, then cached)."""
        if mesh_name not in self._collect_info:
            self._collect_info[mesh_name] = self.execute_all_sync("_query_collect_info", mesh_name)
        return self._collect_info[mesh_name]

    # -- introspection --------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> list[Any]:
        return self._workers

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    @property
    def slots(self) -> list[BundleSlot]:
        """Bundle of every rank (empty for groups attached by name)."""
        return list(self._slots)

    @property
    def master_address(self) -> str | None:
        return self._rendezvous.master_addr if self._rendezvous else None

    @property
    def master_port(self) -> str | None:
        return str(self._rendezvous.master_port) if self._rendezvous else None

    def wait_ready(self, timeout_s: float = 300.0) -> list[dict[str, Any]]:
        """Wait until every actor has been constructed; return each rank's :meth:`Worker.node_info`."""
        import ray

        return list(ray.get([w.node_info.remote() for w in self._workers], timeout=timeout_s))

    # -- teardown -------------------------------------------------------------------------------
    def kill(self) -> None:
        """End the group's actors (detached ones too). Idempotent; safe when Ray is down."""
        import ray

        workers, self._workers = self._workers, []
        self._worker_names = []
        self._slots = []
        if not ray.is_initialized():
            return
        for worker in workers:
            try:
                ray.kill(worker, no_restart=True)
            except Exception as exc:  # already dead, or the cluster is gone
                log.debug("actor_kill_failed", group=self.name_prefix, error=str(exc))
        if workers:
            log.info("group_killed", group=self.name_prefix, actors=len(workers))
