"""``WorkerGroup``: one named actor per rank, placed into its bundle, driven as a unit.

The group creates the actors (with the environment contract of :mod:`supervisor.core.env`), binds the
worker class's registered methods onto itself (:mod:`supervisor.core.binding`) and runs calls on all
ranks or on rank 0. Actors get deterministic names in a fixed namespace, so another driver can
re-attach to a detached group with :meth:`WorkerGroup.from_detached`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterUnavailableError, ConfigError, UnknownMethodError, first_line
from ..fencing import UNFENCED, Fence
from ..observability.log import get_logger
from ..placement.layout import BundleRef, BundleSlot, actor_name, validate_name_prefix
from ..placement.pool import PlacementStrategy, ResourcePool
from .actor_class import ClassWithInitArgs
from .binding import bind_registered_methods
from .decorator import MethodSpec, get_method_spec
from .env import Rendezvous, WorkerIdentity, check_user_env, standby_env_vars, worker_env_vars
from .heartbeat import clear_beats_once_ended, clear_beats_once_ended_later
from .rendezvous import pick_rendezvous
from .worker import (
    FUSED_EXECUTE_METHOD,
    FUSED_METHOD_SEPARATOR,
    SupervisedEndpoints,
    fused_method_name,
    send_rendezvous,
)
from .zygote import NodeZygotes, ZygoteLauncher

__all__ = ["WorkerGroup", "DEFAULT_NAMESPACE", "Standby", "Predecessor", "GroupPlacement"]

# Named actors are looked up per namespace; a fixed one lets any driver find a detached group.
DEFAULT_NAMESPACE = "ray_supervisor"
# How long a group's first ranks wait for the zygotes of their nodes (their imports) before those still
# missing start as plain processes: a zygote that takes longer is slowed by something a plain start would be too.
FIRST_FORK_WAIT_S = 120.0

log = get_logger("group")


@dataclass(frozen=True)
class Standby:
    """A pre-started actor of the group's class, waiting in a free bundle to take over a failed rank."""

    name: str
    handle: Any
    bundle: BundleRef
    zygote: str | None = None  # the zygote it was forked from (None: started as a plain process, or adopted)


@dataclass(frozen=True)
class Predecessor:
    """The old actor of a rank being handed over: it lends the rank its state, then is ended."""

    handle: Any
    bundle: BundleRef
    name: str
    node: str | None
    rendezvous: Rendezvous | None  # the group's rendezvous before the take-over (rank 0's picks a new one)


@dataclass(frozen=True)
class GroupPlacement:
    """Where an earlier supervisor left a group's actors: what a state record keeps to re-adopt them
    once standbys have taken ranks over (Ray cannot rename an actor, so names no longer follow the layout).

    Attributes:
        actor_names: each rank's actor name, in rank order.
        bundles: each rank's bundle, in rank order.
        standbys: standby actor name by bundle.
    """

    actor_names: list[str]
    bundles: list[BundleRef]
    standbys: dict[BundleRef, str] = field(default_factory=dict)


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
    # The environment of one rank (the contract of :mod:`supervisor.core.env`); verl's integration
    # gives its ranks exactly verl's variables.
    rank_env_vars: Callable[..., dict[str, str]] = staticmethod(worker_env_vars)

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
    ) -> None:
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
        # Set by a GroupSupervisor: blocking calls then survive rank failures (see supervised_call).
        self.supervisor: Any = None
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
            self._pick_new_rendezvous()
        launchers = self._first_launchers(pool, [b for rank, b in enumerate(bundles) if rank not in existing])
        created: list[Any] = []
        try:
            for slot, name in zip(slots, names, strict=True):
                handle = existing.get(slot.rank)
                if handle is None:
                    handle = self._create_actor(bundles[slot.rank], name, self._rank_env(slot.rank), launchers.get(bundles[slot.rank]))
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

    def _rank_env(self, rank: int) -> dict[str, str]:
        """The environment of ``rank`` (what its actor starts with, or a standby adopts)."""
        assert self._rendezvous is not None
        slot = self._slots[rank]
        identity = WorkerIdentity(
            rank=rank,
            world_size=len(self._slots),
            local_rank=slot.local_rank,
            local_world_size=slot.local_world_size,
            prefix=self.name_prefix,
        )
        return type(self).rank_env_vars(identity, self._rendezvous, self.worker_env)

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
        out: dict[str, WorkerGroup] = {}
        for role in prefix_set:
            group = self._attached_copy(self.cls_with_init)
            prefix = role + "_"
            for method_name in list(group.method_names):
                if method_name.startswith(prefix):
                    setattr(group, method_name[len(prefix) :], getattr(group, method_name))
            group.sub_cls_name = role
            out[role] = group
        return out

    def spawn_fused(self, prefix_set: Iterable[str]) -> dict[str, WorkerGroup]:
        """One group per role of a fused group (``create_colocated_worker_raw_cls``), sharing its actors;
        each has its role's methods, and calls them on the actors through ``_fuw_execute``.

        Raises:
            ConfigError: the group's class is not a fused worker class, or has no such role.
        """
        raw_cls_dict = getattr(self.cls_with_init.user_cls if self.cls_with_init else None, "raw_cls_dict", None)
        if raw_cls_dict is None:
            raise ConfigError(f"group {self.name_prefix} is not a fused worker group (create_colocated_worker_raw_cls)")
        out: dict[str, WorkerGroup] = {}
        for role in prefix_set:
            if role not in raw_cls_dict:
                raise ConfigError(f"fused worker group {self.name_prefix} has no role {role!r} (roles: {sorted(raw_cls_dict)})")
            group = self._attached_copy(ClassWithInitArgs(raw_cls_dict[role]))
            group.fused_worker_used = True
            group.sub_cls_name = role
            out[role] = group
        return out

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
        )
        group._slots = list(self._slots)
        group._bundles = list(self._bundles)
        group._pgs = list(self._pgs)
        group._rendezvous = self._rendezvous
        group.resource_pool = self.resource_pool
        return group

    # -- replacement ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The group's name in metrics and logs: its prefix without trailing separators."""
        return self.name_prefix.rstrip("-_:.") or self.name_prefix

    def replace_worker(
        self, rank: int, name_release_timeout_s: float = 30.0, bundle: BundleRef | None = None, fork: bool = True
    ) -> Any:
        """Kill rank ``rank``'s actor and create a fresh one into the same bundle (or into ``bundle``).

        The new actor has the same name, rank and environment; where the group's zygotes (the job's,
        or those its standbys' preload started) have a ready one on the bundle's node, it is forked
        from it (unless not ``fork``: a plain start, for retries after a failure). Replacing rank 0 also replaces the
        rendezvous (it lives on rank 0's node): once the old actor is gone a fresh MASTER_ADDR/PORT is
        picked on its bundle and the new rank 0 starts with it; live ranks learn it through
        :meth:`propagate_rendezvous`. Only groups that created their actors can replace them.

        Args:
            bundle: a free bundle of the group (a spare) to move the rank to; default: its own bundle.

        Returns:
            The new actor handle.

        Raises:
            ConfigError: the group was attached by name or handle, or ``rank`` is out of range.
            TimeoutError: Ray did not release the old actor's name in time.
        """
        self._check_replaceable(rank)
        name = self._worker_names[rank]
        self._kill_rank(rank)
        self._wait_name_released(name, name_release_timeout_s)
        if bundle is not None:
            self._bundles[rank] = bundle
        if rank == 0:
            self._pick_new_rendezvous()
        launcher = self._fork_launcher(self._bundles[rank]) if fork else None
        handle = self._create_actor(self._bundles[rank], name, self._rank_env(rank), launcher)
        self._workers[rank] = handle
        if launcher is not None:
            log.info("replacement_forked", group=self.name_prefix, rank=rank, zygote=launcher.name)
        return handle

    def _fork_launcher(self, bundle: BundleRef) -> ZygoteLauncher | None:
        """How to fork a fresh rank in ``bundle`` from its node's zygote: only with the job's zygotes
        or once standbys with a preload started some. A node without one (a node loss's bundles
        re-placed on a node the job had no rank on) gets one started, and the replacement waits for it
        (at most :data:`FIRST_FORK_WAIT_S`): the ranks of one node loss then pay for one import
        between them, not one each side by side on the same cores. Any error means a plain start: the
        old actor is gone already."""
        from ray.util import placement_group_table

        if self._zygotes is None:
            return None
        try:
            node = placement_group_table(self._pgs[bundle.pg_index]).get("bundles_to_node_id", {}).get(bundle.bundle_index)
            if not node:
                return None
            return self._zygotes.wait_ready([node], FIRST_FORK_WAIT_S)[node]
        except Exception as exc:
            log.debug("replacement_not_forked", group=self.name_prefix, bundle=str(bundle), error=first_line(exc))
            return None

    def take_over(self, rank: int, bundle: BundleRef, timeout_s: float = 60.0, keep_old: bool = False) -> Any:
        """Kill rank ``rank``'s actor and let the standby in ``bundle`` become that rank.

        With ``keep_old`` (a hand-over: the rank's node drains), the old actor is not killed but kept
        in :attr:`predecessors` until :meth:`end_predecessor`; if the take-over fails, the old actor
        is still the rank.

        The standby adopts the rank's environment (RANK, LOCAL_RANK, the rendezvous, the user's
        variables) and from then on is that rank; it keeps its own actor name (Ray cannot rename an
        actor), which :attr:`worker_names` reports. A standby taking over rank 0 gets a fresh
        rendezvous on its own node (survivors learn it through :meth:`propagate_rendezvous`).

        Returns:
            The standby's handle, now rank ``rank``.

        Raises:
            ConfigError: no standby in ``bundle``, or the rank cannot be replaced.
            ray.exceptions.RayError / TimeoutError: the standby died or did not answer; it is dropped
                and the rank is left without an actor (replace it with :meth:`replace_worker`).
        """
        import ray

        self._check_replaceable(rank)
        standby = self._standbys.pop(bundle, None)
        if standby is None:
            raise ConfigError(f"group {self.name_prefix} has no standby in bundle {bundle}")
        if not keep_old:
            self._kill_rank(rank)
        previous, rendezvous = self._bundles[rank], self._rendezvous
        self._bundles[rank] = bundle
        try:
            if rank == 0:
                self._pick_new_rendezvous(rank_zero=standby.handle, timeout_s=timeout_s)
            info = ray.get(standby.handle._supervisor_take_over.remote(self._rank_env(rank)), timeout=timeout_s)
        except BaseException:
            self._bundles[rank] = previous
            if keep_old:  # the old rank 0 serves on: so does the rendezvous the others use
                self._rendezvous = rendezvous
            self._end([standby.handle])
            raise
        if keep_old:
            self.predecessors[rank] = Predecessor(self._workers[rank], previous, self._worker_names[rank], self.rank_nodes.get(rank), rendezvous)
        self._workers[rank] = standby.handle
        self._worker_names[rank] = standby.name
        self.rank_nodes[rank] = info["node_id"]
        log.info("standby_took_over", group=self.name_prefix, rank=rank, actor=standby.name, bundle=str(bundle))
        return standby.handle

    def start_standbys(
        self, bundles: list[BundleRef], nice: int = 0, sched_idle: bool = False, preload: tuple[str, ...] = (),
        nodes: Mapping[BundleRef, str] | None = None,
    ) -> list[Standby]:  # fmt: skip
        """Start a standby in each of ``bundles`` (free bundles of the group); returns without waiting
        for their constructors. A standby has the group's environment but no rank (see
        :data:`~supervisor.core.env.STANDBY_ENV_KEY`), and lowers its CPU priority by ``nice`` (and
        to ``SCHED_IDLE`` with ``sched_idle``) until it takes one over (:mod:`supervisor.core.cpu_priority`).

        With ``preload`` (module names), a standby whose bundle's node (``nodes``) has a ready zygote
        that imported them is forked from it (:mod:`supervisor.core.zygote`); the zygote is started
        on the first call for its node, and until it is ready standbys there start as plain processes."""
        if self.resource_pool is None or self.cls_with_init is None or self._rendezvous is None:
            raise ConfigError(f"group {self.name_prefix} did not create its actors, so it cannot start standbys")
        env = standby_env_vars(len(self._slots), self.name_prefix, self._rendezvous, self.worker_env, nice, sched_idle)
        started = []
        if not preload and self._zygotes_shared and self._zygotes is not None:
            preload = self._zygotes.preload  # the job's zygotes, which the ranks were forked from
        if preload:  # a zygote on every node of the group: a standby may next be due in any of its bundles
            self._zygotes_of(preload).warm((nodes or {}).values())
        for bundle in bundles:
            if bundle in self._standbys or bundle in self._bundles:
                raise ConfigError(f"bundle {bundle} of group {self.name_prefix} is not free")
            name = f"{self.name_prefix}{self.cls_with_init.user_cls.__name__}_standby-{uuid.uuid4().hex[:8]}"
            launcher = self._zygotes_of(preload).launcher((nodes or {}).get(bundle)) if preload else None
            zygote = launcher.name if launcher is not None else None
            standby = Standby(name, self._create_actor(bundle, name, env, launcher), bundle, zygote)
            self._standbys[bundle] = standby
            started.append(standby)
        return started

    @property
    def zygotes(self) -> NodeZygotes | None:
        """The nodes' zygotes fresh actors are forked from: the job's (given at creation), or the
        group's own once standbys with a preload start (None: neither)."""
        return self._zygotes

    def _zygotes_of(self, preload: tuple[str, ...]) -> NodeZygotes:
        if self._zygotes is None or self._zygotes.preload != tuple(preload):
            if self._zygotes is not None and not self._zygotes_shared:
                self.fence.kill_actors(self._zygotes.take_handles())
            self._zygotes_shared = False  # standbys of another preload: zygotes of this group's own
            runtime_env = self.cls_with_init.options.get("runtime_env") if self.cls_with_init is not None else None
            self._zygotes = NodeZygotes(
                self.name_prefix, self.namespace, tuple(preload), self.detached, lambda handles: self.fence.kill_actors(handles), runtime_env
            )
        return self._zygotes

    def drop_standby(self, bundle: BundleRef) -> None:
        """Forget (and kill) the standby in ``bundle``, e.g. because it died."""
        standby = self._standbys.pop(bundle, None)
        if standby is not None:
            self._end([standby.handle])

    def all_bundles(self) -> list[BundleRef]:
        """Every bundle the group may use: its ranks' bundles in the layout, then the pool's spares."""
        layout = [s.bundle for s in self._slots]
        spares = []
        if self.resource_pool is not None and self.resource_pool.spare_pg is not None:
            spare_index = len(self._pgs) - 1
            spares = [BundleRef(spare_index, b) for b in range(self.resource_pool.spare_bundle_count)]
        return [*layout, *spares]

    def placed_bundles(self) -> dict[BundleRef, str]:
        """The node of every bundle of the group that is placed now, on an alive node; bundles of a
        lost node that Ray is re-placing are absent (the other bundles of their SPREAD placement group,
        RESCHEDULING as a whole, still count)."""
        import ray
        from ray.util import placement_group_table

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        out: dict[BundleRef, str] = {}
        for index in sorted({b.pg_index for b in self.all_bundles()}):
            table = placement_group_table(self._pgs[index])
            for bundle_index, node in table.get("bundles_to_node_id", {}).items():
                if node in alive:
                    out[BundleRef(index, int(bundle_index))] = str(node)
        return out

    def _check_replaceable(self, rank: int) -> None:
        if not self._slots or self.resource_pool is None or self.cls_with_init is None:
            raise ConfigError(f"group {self.name_prefix} did not create its actors, so it cannot replace them")
        if not 0 <= rank < len(self._workers):
            raise ConfigError(f"rank {rank} is outside 0..{len(self._workers) - 1}")

    def _end(self, handles: list[Any], wait: bool = False) -> None:
        """Kill actors of this group (through the owner fence) and delete their heartbeats once their
        processes have ended: waiting for that when ``wait``, else on a thread of its own."""
        self.fence.kill_actors(handles)
        ids = [h._actor_id.hex() for h in handles]
        try:
            if wait:
                clear_beats_once_ended(ids)
            else:
                clear_beats_once_ended_later(ids)
        except Exception as exc:  # a leftover beat is a few bytes in the GCS: not worth failing a kill
            log.debug("heartbeats_not_cleared", group=self.name_prefix, error=first_line(exc))

    def restore_predecessor(self, rank: int) -> None:
        """A hand-over whose successor failed after taking the rank: the old actor is the rank again
        (with its bundle, name, node and, for rank 0, the rendezvous the other ranks still use), and
        the successor is ended."""
        old = self.predecessors.pop(rank)
        failed = self._workers[rank]
        self._workers[rank], self._bundles[rank], self._worker_names[rank] = old.handle, old.bundle, old.name
        if old.node is not None:
            self.rank_nodes[rank] = old.node
        if rank == 0 and old.rendezvous is not None:
            self._rendezvous = old.rendezvous
        self._end([failed])

    def end_predecessor(self, rank: int) -> None:
        """End the old actor of a handed-over rank (nothing when it has none)."""
        old = self.predecessors.pop(rank, None)
        if old is not None:
            self._end([old.handle])

    def _kill_rank(self, rank: int) -> None:
        self._end([self._workers[rank]])
        self.rank_nodes.pop(rank, None)  # the new incarnation's node is learnt when it answers

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

    def _pick_new_rendezvous(self, rank_zero: Any = None, timeout_s: float = 120.0) -> Rendezvous:
        # On rank 0's bundle (asked of rank 0's actor when it runs already), and never the previous
        # port: stale peers may still connect to it.
        first = self._bundles[0]
        previous = self._rendezvous.master_port if self._rendezvous else None
        self._rendezvous = pick_rendezvous(self._pgs[first.pg_index], first.bundle_index, avoid_port=previous, timeout_s=timeout_s, rank_zero=rank_zero)
        if self.on_rendezvous_picked is not None:
            # Before any actor has it: an owner that persists the rendezvous (the daemon's record)
            # must know it first, or a crash now would leave a rank 0 nobody knows the address of.
            self.on_rendezvous_picked(self._rendezvous)
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
            return [self._remote(w, method_name, args, kwargs) for w in self._workers]
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
            from ..errors import ConfigError

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
        self._end(workers, wait=True)  # a daemon that ends next would leave late beats for gc
        if keepers:
            self.fence.kill_actors(keepers)
        if workers:
            log.info("group_killed", group=self.name_prefix, actors=len(workers))

