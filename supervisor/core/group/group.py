"""``WorkerGroup``: one named actor per rank, placed into its bundle, driven as a unit.

The group creates the actors (with the environment contract of :mod:`supervisor.core.worker.env`), binds the
worker class's registered methods onto itself (:mod:`supervisor.core.group.binding`) and runs calls on all
ranks or on rank 0. Actors get deterministic names in a fixed namespace, so another driver can
re-attach to a detached group with :meth:`WorkerGroup.from_detached`. Replacing ranks (fresh actors,
standbys, hand-overs) is in :mod:`supervisor.core.group.group_replacement`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...errors import ClusterUnavailableError, ConfigError, UnknownMethodError, first_line
from ...fencing import UNFENCED, Fence
from ...observability.log import get_logger
from ...placement.layout import BundleRef, BundleSlot, actor_name, validate_name_prefix
from ...placement.pool import PlacementStrategy, ResourcePool
from ..worker.env import Rendezvous, check_user_env
from ..worker.registration import MethodSpec, get_method_spec
from ..worker.worker_base import (
    FUSED_EXECUTE_METHOD,
    FUSED_METHOD_SEPARATOR,
    SupervisedEndpoints,
    fused_method_name,
)
from ..worker.zygote import NodeZygotes, ZygoteLauncher
from .actor_class import ClassWithInitArgs
from .binding import bind_registered_methods
from .group_placement import GroupPlacement
from .group_replacement import FIRST_FORK_WAIT_S, Predecessor, RankReplacement, Standby
from .rank_environment import ContractEnvironment, RankEnvironment
from .role_views import colocated_role_views, fused_role_views

if TYPE_CHECKING:
    from .call_runner import CallRunner

__all__ = ["WorkerGroup", "DEFAULT_NAMESPACE", "Standby", "Predecessor", "GroupPlacement"]

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
        master_addr: use this rendezvous address instead of picking one on rank 0's node.
        master_port: the rendezvous port that goes with ``master_addr``.
        adopt: with a resource pool, attach to the live actors that already carry this group's
            names (a detached group left by an earlier supervisor) and create only the missing ranks;
            ``adopted_ranks`` lists the ranks attached. If rank 0 is missing, a new rendezvous is picked.
        placement: with ``adopt``, the actor names and bundles an earlier supervisor recorded (after
            standby takeovers); default: the names and bundles of the layout.

    Raises:
        ConfigError / WorkerEnvError: invalid arguments (nothing is created).
        ClusterUnavailableError: Ray is not initialised.
        PlacementError: the pool's resources are not available.
    """

    # How a registration is read off a worker method; a group for classes decorated by another
    # library's ``register`` (verl's) reads that library's modes instead.
    read_method_spec: Callable[[Any], MethodSpec | None] = staticmethod(get_method_spec)

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
        placement: GroupPlacement | None = None,
        zygotes: NodeZygotes | None = None,
        environment: RankEnvironment | None = None,
    ) -> None:
        # Replacing ranks, with the strategy every rank's environment comes from (an integration's own).
        self.replacement = RankReplacement(self, environment or ContractEnvironment())
        self.name_prefix = validate_name_prefix(name_prefix) if name_prefix else f"wg-{uuid.uuid4().hex[:6]}-"
        self.namespace = namespace
        self.detached = bool(detached)
        self.cls_with_init = cls_with_init
        self.resource_pool = resource_pool
        self.worker_env = check_user_env(worker_env)
        # verl's fused workers: a group of a create_colocated_worker_raw_cls class reaches each role
        # through a sub-group (fuse/spawn_fused) whose calls go to _fuw_execute; sub_cls_name is its role.
        self.fused_worker_used = bool(getattr(cls_with_init, "fused_worker_used", False))
        self.sub_cls_name = ""
        self.wg_dict: dict[str, WorkerGroup] | None = None
        self.on_rendezvous_picked: Callable[[Rendezvous], None] | None = None
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        self._slots: list[BundleSlot] = []  # each rank's identity in the layout (LOCAL_RANK, ...)
        self._bundles: list[BundleRef] = []  # each rank's bundle now (a standby's, after it took over)
        self._standbys: dict[BundleRef, Standby] = {}
        # Old actors of ranks being handed over (their node drains): they serve until their successor
        # took the rank, and lend it their state; ended once it serves (end_predecessor).
        self.predecessors: dict[int, Predecessor] = {}
        # The nodes' zygotes fresh actors fork from: given (the job's, shared by its groups, never
        # killed with this group), or this group's own once standbys with a preload ask for them.
        self._zygotes: NodeZygotes | None = zygotes
        self._zygotes_shared = zygotes is not None
        self._pgs: list[Any] = []  # the pool's placement groups in rank order, then its spare group
        self._rendezvous: Rendezvous | None = None
        self._dispatch_info: dict[str, list[int]] = {}
        self._collect_info: dict[str, list[bool]] = {}
        self.method_names: list[str] = []
        self.adopted_ranks: list[int] = []
        # Node of each rank's current actor, once known (filled by create_group / init_group; a
        # replacement forgets its rank's entry).
        self.rank_nodes: dict[int, str] = {}
        # The GroupSupervisor supervising the group (None: none), and the runner it installs: blocking
        # calls then go through it and survive rank failures (see call_runner; None: run directly).
        self.supervisor: Any = None
        self.call_runner: CallRunner | None = None
        # The job's state domain (supervisor.state.StateDomain), set while a stateful group is supervised.
        self.state_domain: Any = None
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
            self._create_workers(resource_pool, cls_with_init, bin_pack, adopt, placement)
        if cls_with_init is not None:
            self.method_names = bind_registered_methods(self, cls_with_init.user_cls, type(self).read_method_spec)

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

    def _create_workers(
        self, pool: ResourcePool, cls_with_init: ClassWithInitArgs, bin_pack: bool, adopt: bool, placement: GroupPlacement | None
    ) -> None:
        if self.detached and not pool.detached:
            log.warning("detached_group_in_non_detached_pool", group=self.name_prefix, pool=pool.name_prefix)
        pgs = pool.get_placement_groups(strategy=None if bin_pack else PlacementStrategy.PACK)
        self._pgs = [*pgs, *([pool.spare_pg] if pool.spare_pg is not None else [])]
        slots = pool.rank_slots()
        class_name = cls_with_init.user_cls.__name__
        self._slots = list(slots)
        usable = set(self.all_bundles())
        if placement is not None and len(placement.actor_names) == len(slots) and len(placement.bundles) == len(slots) and set(placement.bundles) <= usable:
            names, bundles = list(placement.actor_names), list(placement.bundles)
        else:  # the layout's (also when the recorded bundles are gone, e.g. the spares were dropped from the spec)
            names, bundles = [actor_name(self.name_prefix, class_name, slot) for slot in slots], [s.bundle for s in slots]
        existing = {rank: handle for rank, name in enumerate(names) if adopt and (handle := self._find_actor(name)) is not None}
        self._bundles = bundles
        if self._rendezvous is None or (adopt and 0 not in existing):
            # Rank 0 is created now, so its rendezvous is picked now on its bundle's node, never on
            # an adopted group's earlier port (stale peers may still connect to it).
            self.replacement.pick_new_rendezvous()
        launchers = self._first_launchers(pool, [b for rank, b in enumerate(bundles) if rank not in existing])
        created: list[Any] = []
        try:
            for slot, name in zip(slots, names, strict=True):
                handle = existing.get(slot.rank)
                if handle is None:
                    handle = self._create_actor(bundles[slot.rank], name, self.replacement.rank_env(slot.rank), launchers.get(bundles[slot.rank]))
                    created.append(handle)
                self._workers.append(handle)
                self._worker_names.append(name)
        except BaseException:
            # Transactional start: a half-created group leaves no actors behind (adopted ones stay).
            self._workers = created
            self.kill()
            raise
        for bundle, name in (placement.standbys.items() if placement is not None and adopt else []):
            handle = self._find_actor(name) if bundle in usable and bundle not in bundles else None
            if handle is not None:
                self._standbys[bundle] = Standby(name, handle, bundle)
        self.adopted_ranks = sorted(existing)
        log.info(
            "group_adopted" if existing else "group_created",
            adopted=len(existing),
            group=self.name_prefix,
            cls=class_name,
            world_size=len(slots),
            pool=pool.name_prefix,
            master=f"{self._rendezvous.master_addr}:{self._rendezvous.master_port}",
            forked=len(launchers),  # actors forked from the job's zygotes (the others started plainly, or were adopted)
        )

    def _first_launchers(self, pool: ResourcePool, bundles: list[BundleRef]) -> dict[BundleRef, ZygoteLauncher]:
        """With the job's zygotes: how to fork each of ``bundles``' first actor, once the zygotes of
        their nodes are ready (waited for: each rank would otherwise pay for the imports itself, all
        at once). A bundle whose node has none ready starts plainly."""
        if self._zygotes is None or not self._zygotes_shared:
            return {}
        try:
            nodes = pool.original_bundle_nodes()
            if not bundles:  # every actor adopted: the zygotes come up for later replacements, unwaited
                self._zygotes.warm(nodes.values())
                return {}
            ready = self._zygotes.wait_ready((nodes.get(b, "") for b in bundles), FIRST_FORK_WAIT_S)
        except Exception as exc:  # a plain start is always possible
            log.warning("zygotes_unavailable", group=self.name_prefix, error=first_line(exc))
            return {}
        return {b: launcher for b in bundles if (launcher := ready.get(nodes.get(b, ""))) is not None}

    def _create_actor(self, bundle: BundleRef, name: str, env: dict[str, str], launcher: ZygoteLauncher | None = None) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pool, cls_with_init = self.resource_pool, self.cls_with_init
        assert pool is not None and cls_with_init is not None
        options = dict(cls_with_init.options)
        runtime_env = dict(options.pop("runtime_env", None) or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
        if launcher is not None:
            runtime_env = launcher.runtime_env(runtime_env)
        options.update(
            runtime_env=runtime_env,
            name=name,
            namespace=self.namespace,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self._pgs[bundle.pg_index], placement_group_bundle_index=bundle.bundle_index
            ),
        )
        if pool.use_gpu:
            options.setdefault("num_gpus", 1 / pool.max_colocate_count)  # an even share unless the class says
        if self.detached:
            options["lifetime"] = "detached"
        try:
            handle = cls_with_init.actor_class().options(**options).remote(*cls_with_init.args, **cls_with_init.kwargs)
        except ValueError as exc:
            if "already taken" in str(exc) or "already exists" in str(exc):
                raise ConfigError(
                    f"an actor named {name!r} already exists in namespace {self.namespace!r}: re-attach with "
                    f"WorkerGroup.from_detached(worker_names=[...]) or kill it first"
                ) from None
            raise
        if issubclass(cls_with_init.user_cls, SupervisedEndpoints):
            # Queued first, so the thread runs from right after the constructor, before any user call.
            handle._supervisor_start_heartbeat.remote()
        return handle

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
        if self.fused_worker_used:
            return self.spawn_fused(prefix_set)
        return colocated_role_views(self, prefix_set, self._attached_copy)

    def spawn_fused(self, prefix_set: Iterable[str]) -> dict[str, WorkerGroup]:
        """One group per role of a fused group (``create_colocated_worker_raw_cls``), sharing its actors;
        each has its role's methods, and calls them on the actors through ``_fuw_execute``.

        Raises:
            ConfigError: the group's class is not a fused worker class, or has no such role.
        """
        return fused_role_views(self, prefix_set, self._attached_copy)

    def fuse(self, prefix_set: Iterable[str]) -> None:
        """Attach the role groups of a fused group as attributes: ``group.actor.add(...)``."""
        if self.wg_dict is None:
            self.wg_dict = self.spawn(prefix_set)
        for role, role_group in self.wg_dict.items():
            setattr(self, role, role_group)

    def _attached_copy(self, cls_with_init: ClassWithInitArgs | None) -> WorkerGroup:
        # Bypass subclass constructors (the verl adapter renames arguments): same type, attached.
        group = type(self).__new__(type(self))
        WorkerGroup.__init__(
            group,
            cls_with_init=cls_with_init,
            name_prefix=self.name_prefix,
            worker_names=self._worker_names,
            worker_handles=self._workers,
            namespace=self.namespace,
            environment=self.replacement.environment,
        )
        group._slots = list(self._slots)
        group._bundles = list(self._bundles)
        group._pgs = list(self._pgs)
        group._rendezvous = self._rendezvous
        group.resource_pool = self.resource_pool
        return group

    # -- replacement: carried out by self.replacement (RankReplacement says each one's contract) --
    def replace_worker(self, rank: int, name_release_timeout_s: float = 30.0, bundle: BundleRef | None = None, fork: bool = True) -> Any:
        """Kill rank ``rank``'s actor and start a fresh one in its bundle (or ``bundle``); the new handle."""
        return self.replacement.replace_worker(rank, name_release_timeout_s, bundle, fork)

    def take_over(self, rank: int, bundle: BundleRef, timeout_s: float = 60.0, keep_old: bool = False) -> Any:
        """Let the standby in ``bundle`` become rank ``rank`` (a hand-over with ``keep_old``); its handle."""
        return self.replacement.take_over(rank, bundle, timeout_s, keep_old)

    def start_standbys(self, bundles: list[BundleRef], nice: int = 0, sched_idle: bool = False, preload: tuple[str, ...] = (), nodes: Mapping[BundleRef, str] | None = None) -> list[Standby]:
        """Start a rank-less standby in each of ``bundles`` (free bundles of the group)."""
        return self.replacement.start_standbys(bundles, nice, sched_idle, preload, nodes)

    def drop_standby(self, bundle: BundleRef) -> None:
        """Forget (and kill) the standby in ``bundle``."""
        self.replacement.drop_standby(bundle)

    def restore_predecessor(self, rank: int) -> None:
        """A hand-over whose successor failed: the old actor is rank ``rank`` again."""
        self.replacement.restore_predecessor(rank)

    def end_predecessor(self, rank: int) -> None:
        """End the old actor of a handed-over rank (nothing when it has none)."""
        self.replacement.end_predecessor(rank)

    def pick_new_rendezvous(self, rank_zero: Any = None, timeout_s: float = 120.0) -> Rendezvous:
        """A new rendezvous on rank 0's bundle, never the port in use; live ranks learn it through :meth:`propagate_rendezvous`."""
        return self.replacement.pick_new_rendezvous(rank_zero, timeout_s)

    def propagate_rendezvous(self, survivors: list[int], timeout_s: float = 60.0) -> list[int]:
        """Give the live ``survivors`` the current rendezvous; the ranks that could not take it (replaced by the caller)."""
        return self.replacement.propagate_rendezvous(survivors, timeout_s)

    def all_bundles(self) -> list[BundleRef]:
        """Every bundle the group may use: its ranks' bundles in the layout, then the pool's spares."""
        return self.replacement.all_bundles()

    def placed_bundles(self) -> dict[BundleRef, str]:
        """The node of every bundle of the group that is placed now, on an alive node."""
        return self.replacement.placed_bundles()

    @property
    def zygotes(self) -> NodeZygotes | None:
        """The nodes' zygotes fresh actors are forked from: the job's (given at creation), or the
        group's own once standbys with a preload start (None: neither)."""
        return self._zygotes

    @property
    def name(self) -> str:
        """The group's name in metrics and logs: its prefix without trailing separators."""
        return self.name_prefix.rstrip("-_:.") or self.name_prefix

    # -- execution ------------------------------------------------------------------------------
    def call_actor(self, worker: Any, method_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``method_name`` on one of the group's actors (a fused role's through its host); its ObjectRef.

        Raises:
            UnknownMethodError: the worker class has no such method.
        """
        if self.fused_worker_used:
            if FUSED_METHOD_SEPARATOR in method_name:  # a role's, bound on the fused group
                args = (method_name, *args)
                method_name = FUSED_EXECUTE_METHOD
            elif self.sub_cls_name:  # a role of a fused group: through its host
                args = (fused_method_name(self.sub_cls_name, method_name), *args)
                method_name = FUSED_EXECUTE_METHOD
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
        if not args and not kwargs:  # the commonest call of all, on every step: nothing to split
            return [((), {}) for _ in range(n)]
        values = [*args, *kwargs.values()]
        if all(isinstance(v, list) and len(v) == n for v in values):
            return [(tuple(a[i] for a in args), {k: v[i] for k, v in kwargs.items()}) for i in range(n)]
        return [(args, kwargs)] * n

    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call ``method_name`` on every rank; returns one ObjectRef per rank (see :meth:`rank_arguments`)."""
        if not args and not kwargs:  # nothing to split: the per-rank pairs are not built
            return [self.call_actor(w, method_name, args, kwargs) for w in self._workers]
        return [
            self.call_actor(w, method_name, a, k) for w, (a, k) in zip(self._workers, self.rank_arguments(args, kwargs), strict=True)
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
        return self.call_actor(self._workers[0], method_name, args, kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(self.execute_rank_zero_async(method_name, *args, **kwargs))

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        """Alias of :meth:`execute_rank_zero_async` (verl's semantics)."""
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    # -- mesh dispatch info ---------------------------------------------------------------------
    def dispatch_info(self, mesh_name: Any) -> list[int]:
        """dp rank of every rank on ``mesh_name`` (read once with :meth:`read_mesh_info`, then cached)."""
        return self._mesh_info(mesh_name)[0]

    def collect_info(self, mesh_name: Any) -> list[bool]:
        """Whether each rank's output is collected on ``mesh_name`` (read once, then cached)."""
        return self._mesh_info(mesh_name)[1]

    def read_mesh_info(self, mesh_name: Any) -> tuple[list[int], list[bool]]:
        """Ask every rank for its dp rank and whether its output is collected on ``mesh_name`` (a group
        whose workers register their meshes otherwise, verl's, asks its own way)."""
        return self.execute_all_sync("_query_dispatch_info", mesh_name), self.execute_all_sync("_query_collect_info", mesh_name)

    def _mesh_info(self, mesh_name: Any) -> tuple[list[int], list[bool]]:
        if mesh_name not in self._dispatch_info or mesh_name not in self._collect_info:
            self._dispatch_info[mesh_name], self._collect_info[mesh_name] = self.read_mesh_info(mesh_name)
        return self._dispatch_info[mesh_name], self._collect_info[mesh_name]

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
        """Every rank's place in the pool's layout, which fixes its identity (empty for attached groups)."""
        return list(self._slots)

    @property
    def rank_bundles(self) -> list[BundleRef]:
        """The bundle every rank runs in now (its layout slot's, until a standby or spare takes it over)."""
        return list(self._bundles)

    @property
    def standbys(self) -> dict[BundleRef, Standby]:
        return dict(self._standbys)

    def placement(self) -> GroupPlacement:
        """What a state record keeps to re-adopt this group (see :class:`GroupPlacement`)."""
        return GroupPlacement(list(self._worker_names), list(self._bundles), {b: s.name for b, s in self._standbys.items()})

    @property
    def fence(self) -> Fence:
        """Through what the group kills its actors: its pool's owner fence (a daemon's), else directly."""
        return self.resource_pool.owner_fence if self.resource_pool is not None else UNFENCED

    @property
    def current_rendezvous(self) -> Rendezvous | None:
        """The rendezvous (MASTER_ADDR/MASTER_PORT) every rank has, or is being given."""
        return self._rendezvous

    @property
    def placement_groups(self) -> list[Any]:
        """The pool's placement groups in rank order, then its spare group (empty for attached groups)."""
        return list(self._pgs)

    @property
    def master_address(self) -> str | None:
        return self._rendezvous.master_addr if self._rendezvous else None

    @property
    def master_port(self) -> str | None:
        return str(self._rendezvous.master_port) if self._rendezvous else None

    def snapshot(self, step: int) -> Any:
        """Snapshot every rank's state at the boundary before ``step`` (a supervised stateful group:
        ``SupervisionConfig(state=StateConfig(kind=...))``). Each rank copies its ``state_dict()`` to
        host memory and goes on; the copies reach the snapshot keepers beside its next call.

        Returns:
            None, or a :class:`~supervisor.state.domain.SnapshotSkipped` saying why it was skipped.

        Raises:
            ConfigError: the group is not a supervised stateful group.
            RolledBack: a rollback happened that the driver has not been told of yet.
        """
        if self.state_domain is None:
            from ...errors import ConfigError

            raise ConfigError(f"group {self.name} is not a supervised stateful group: nothing to snapshot")
        return self.state_domain.snapshot(self, step)

    def wait_ready(self, timeout_s: float = 300.0) -> list[dict[str, Any]]:
        """Wait until every actor has been constructed; return each rank's :meth:`Worker.node_info`."""
        import ray

        return list(ray.get([w.node_info.remote() for w in self._workers], timeout=timeout_s))

    # -- teardown -------------------------------------------------------------------------------
    def kill(self) -> None:
        """End the group's actors and standbys (detached ones too). Idempotent; safe when Ray is down."""
        import ray

        workers = [*self._workers, *(s.handle for s in self._standbys.values()), *(p.handle for p in self.predecessors.values())]
        self._workers, self.predecessors = [], {}
        keepers = self._zygotes.take_handles() if self._zygotes is not None and not self._zygotes_shared else []
        self._worker_names = []
        self._slots = []
        self._bundles = []
        self._standbys = {}
        if not ray.is_initialized():
            return
        self.replacement.end_actors(workers, wait=True)  # a daemon that ends next would leave late beats for gc
        if keepers:
            self.fence.kill_actors(keepers)
        if workers:
            log.info("group_killed", group=self.name_prefix, actors=len(workers))

