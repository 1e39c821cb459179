"""Resource pools: the placement groups a set of worker groups runs in.

A :class:`ResourcePool` describes ranks per node (``process_on_nodes``) and reserves one placement
group per entry, each with one bundle per rank. Placement groups are created lazily (on first use),
named deterministically from the pool's prefix and shape, and adopted instead of re-created when a
placement group of that name and shape already exists (a detached pool re-attached by a restarted
supervisor). When the groups become ready the pool records the node of every bundle; that record is
the reference for placement-drift checks.

Split and merged pools (:func:`split_resource_pool`, :func:`merge_resource_pool`) are views: they use
the placement groups of the pools they came from and do not own them, so only the original pool's
:meth:`ResourcePool.teardown` removes them.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import ClusterUnavailableError, ConfigError, PlacementError
from ..fencing import UNFENCED, Fence
from ..observability.hooks import LifecycleHooks, default_hooks
from ..observability.log import get_logger
from .layout import (
    BundleRef,
    BundleSlot,
    bundle_resources,
    check_capacity_factor,
    check_process_on_nodes,
    placement_group_name,
    rank_layout,
    spare_bundle_count,
    spare_placement_group_name,
    validate_name_prefix,
)
from .resource_wait import (
    RESOURCE_TIMEOUT_S,
    InfeasibleResourcesError,
    check_feasible,
    wait_for_placement_groups,
)
from .resources import PoolDemand

__all__ = [
    "PlacementStrategy",
    "ResourcePool",
    "SubResourcePool",
    "split_resource_pool",
    "merge_resource_pool",
    "BundlePlacement",
    "extract_pg_from_exist",
    "sort_placement_group_by_node_ip",
]

log = get_logger("pool")


class PlacementStrategy(enum.Enum):
    """Ray's placement-group strategies (within one placement group = one pool entry)."""

    STRICT_PACK = "STRICT_PACK"
    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_SPREAD = "STRICT_SPREAD"

    @classmethod
    def parse(cls, value: PlacementStrategy | str) -> PlacementStrategy:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            raise ConfigError(f"strategy {value!r} is not one of {[s.value for s in cls]}") from None


@dataclass(frozen=True)
class BundlePlacement:
    """A bundle and the node it was on when its placement group became ready."""

    bundle: BundleRef
    node_id: str


def _require_ray() -> Any:
    import ray

    if not ray.is_initialized():
        raise ClusterUnavailableError("Ray is not initialised: call ray.init(address=...) before using a ResourcePool")
    return ray


def _named_in_another_namespace(pg_name: str) -> Any | None:
    """A live placement group named ``pg_name`` created from any Ray namespace, or None (for a pool
    whose names a supervisor's prefix makes unique: :attr:`ResourcePool.adopt_from_any_namespace`)."""
    import ray
    from ray.util import placement_group_table
    from ray.util.placement_group import PlacementGroup

    for pg_id, info in placement_group_table().items():
        if info.get("name") == pg_name and info.get("state") != "REMOVED":
            return PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id)))
    return None


def _pg_state(pg: Any) -> str:
    from ray.util import placement_group_table

    return str(placement_group_table(pg).get("state", "UNKNOWN"))


class ResourcePool:
    """Ranks per node, reserved as one placement group per node.

    Args:
        process_on_nodes: ranks per placement group, e.g. ``[4, 4]`` for two nodes of four GPUs.
        use_gpu: reserve one GPU per bundle (else bundles are CPU-only).
        max_colocate_count: how many worker groups may share a bundle; each bundle gets this many
            CPUs and each worker asks for ``1 / max_colocate_count`` GPU.
        name_prefix: prefix of the placement-group names; a fresh unique one when None. Give one to
            make the names deterministic (needed to re-adopt detached pools).
        detached: placement groups outlive the creating job (``lifetime="detached"``).
        strategy: placement strategy inside each placement group (STRICT_PACK keeps a node's ranks on
            one node).
        accelerator_type: optional Ray accelerator type to pin bundles to (e.g. ``"A100"``).
        n_gpus_per_node: informational, as in verl.
        capacity_factor: reserve ``ceil(world_size * (capacity_factor - 1))`` spare bundles beyond the
            ranks' (1.0: none), in one more placement group spread over nodes. Replacements (and groups'
            standbys) use them when a rank's own bundle is gone or being re-placed. They are reserved,
            idle resources: 1.25 on 8 GPUs holds 2 more GPUs for the whole run.

    Raises:
        ConfigError: invalid layout, prefix or strategy.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        max_colocate_count: int = 10,
        name_prefix: str | None = None,
        detached: bool = False,
        strategy: PlacementStrategy | str = PlacementStrategy.STRICT_PACK,
        accelerator_type: str | None = None,
        n_gpus_per_node: int = 8,
        capacity_factor: float = 1.0,
    ) -> None:
        self._store: list[int] = check_process_on_nodes(process_on_nodes) if process_on_nodes else []
        self.use_gpu = bool(use_gpu)
        self.max_colocate_count = max_colocate_count
        bundle_resources(max_colocate_count, use_gpu)  # validates max_colocate_count
        self.name_prefix = validate_name_prefix(name_prefix) if name_prefix is not None else f"pool-{uuid.uuid4().hex[:8]}"
        self.detached = bool(detached)
        self.strategy = PlacementStrategy.parse(strategy)
        self.accelerator_type = accelerator_type
        self.n_gpus_per_node = n_gpus_per_node
        # Ray finds placement groups by name in the caller's namespace only. A pool whose names a
        # supervisor owns (``supervisor run``'s, whose programs each get a namespace of their own) also
        # adopts its placement groups from another namespace; any other pool must not, or two jobs
        # with the same pool name would share one job's bundles.
        self.adopt_from_any_namespace = False
        self.capacity_factor = check_capacity_factor(capacity_factor)
        self.pgs: list[Any] | None = None
        self.spare_pg: Any | None = None  # the placement group of the spare bundles, once ready
        self._owns_pgs = True
        self._created: list[Any] = []  # placement groups this pool created (not adopted)
        self._parent: ResourcePool | None = None
        self._original_nodes: dict[BundleRef, str] = {}
        # Who may remove this pool's placement groups (and kill its groups' actors): a daemon sets
        # its owner fence here, so a superseded daemon destroys nothing.
        self.fence: Fence = UNFENCED

    @property
    def owner_fence(self) -> Fence:
        """The fence of the pool that owns the placement groups (a split or merged view's parent)."""
        return self._parent.owner_fence if self._parent is not None else self.fence

    # -- layout (pure) --------------------------------------------------------------------------
    def add_node(self, process_count: int) -> None:
        if self.pgs is not None:
            raise PlacementError("cannot add a node to a pool whose placement groups already exist")
        self._store = check_process_on_nodes([*self._store, process_count])

    @property
    def store(self) -> list[int]:
        return self._store

    def __call__(self) -> list[int]:
        return self._store

    @property
    def world_size(self) -> int:
        return sum(self._store)

    def local_world_size_list(self) -> list[int]:
        return [n for n in self._store for _ in range(n)]

    def local_rank_list(self) -> list[int]:
        return [i for n in self._store for i in range(n)]

    def bundle(self) -> dict[str, float]:
        """Resources of one bundle."""
        return bundle_resources(self.max_colocate_count, self.use_gpu, self.accelerator_type)

    def placement_group_names(self) -> list[str]:
        return [placement_group_name(self.name_prefix, self._store, i) for i in range(len(self._store))]

    def rank_slots(self) -> list[BundleSlot]:
        """Bundle of every rank of a group that spans this pool, in rank order."""
        return rank_layout(self._store)

    @property
    def spare_bundle_count(self) -> int:
        """Spare bundles reserved beyond the ranks' (see ``capacity_factor``)."""
        return spare_bundle_count(self.world_size, self.capacity_factor)

    def spare_placement_group_name(self) -> str | None:
        return spare_placement_group_name(self.name_prefix, self._store, self.spare_bundle_count) if self.spare_bundle_count else None

    # -- placement groups (Ray) -----------------------------------------------------------------
    def demand(self, strategy: PlacementStrategy | str | None = None) -> PoolDemand:
        """What the pool asks the cluster for (input of feasibility checks and diagnosis)."""
        strat = PlacementStrategy.parse(strategy) if strategy is not None else self.strategy
        bundle = self.bundle()
        return PoolDemand(
            pool=self.name_prefix,
            strategy=strat.value,
            placement_groups=tuple(
                (name, tuple(dict(bundle) for _ in range(n))) for name, n in zip(self.placement_group_names(), self._store, strict=True)
            ),
        )

    def spare_demand(self) -> PoolDemand | None:
        """What the spare bundles ask for (spread over nodes), or None without spares."""
        name = self.spare_placement_group_name()
        if name is None:
            return None
        bundle = self.bundle()
        spares = tuple(dict(bundle) for _ in range(self.spare_bundle_count))
        return PoolDemand(pool=self.name_prefix, strategy=PlacementStrategy.SPREAD.value, placement_groups=((name, spares),))

    def reserved_total(self) -> dict[str, float]:
        """Everything the pool reserves: its ranks' bundles and its spare bundles."""
        total = dict(self.demand().total)
        spare = self.spare_demand()
        for key, value in (spare.total if spare else {}).items():
            total[key] = total.get(key, 0.0) + value
        return total

    def get_placement_groups(
        self,
        strategy: PlacementStrategy | str | None = None,
        name: str | None = None,
        device_name: str | None = None,
        timeout_s: float | None = RESOURCE_TIMEOUT_S,
        progress_interval_s: float = 10.0,
        autoscaling: bool = False,
        hooks: LifecycleHooks | None = None,
    ) -> list[Any]:
        """Create (or adopt) the pool's placement groups and wait until they are ready (the lenient wait).

        A demand no node could ever satisfy fails at once, before anything is created. While waiting,
        what is missing (and which other placement groups hold it) is reported every
        ``progress_interval_s`` through ``hooks`` (default: a structured log event and metrics).

        Args:
            strategy: overrides the pool's strategy for creation (verl passes it here).
            name: unused, accepted for verl compatibility (names come from ``name_prefix``).
            device_name: unused, accepted for verl compatibility.
            timeout_s: how long to wait for the resources; None waits forever.
            progress_interval_s: cadence of progress reports while waiting.
            autoscaling: the cluster may grow, so do not judge the demand infeasible.
            hooks: lifecycle hooks; the default records metrics and logs.

        Returns:
            The placement groups in rank order.

        Raises:
            ClusterUnavailableError: Ray is not initialised.
            InfeasibleResourcesError: no node could ever hold the demand (raised within seconds).
            ResourceWaitTimeout: not ready in time; the message says what is missing and who holds it.
            PlacementError: an existing placement group of the same name has another shape.

        In every failure case the placement groups created by this call are removed.
        """
        if self.pgs is not None:
            return self.pgs
        if not self._store:
            raise ConfigError("the pool has no nodes: process_on_nodes is empty")
        ray = _require_ray()
        hooks = hooks if hooks is not None else default_hooks()
        demand = self.demand(strategy)
        try:
            check_feasible(demand, autoscaling)
        except InfeasibleResourcesError:
            hooks.on_resource_wait_done(self.name_prefix, 0.0, "infeasible")
            raise
        bundle = self.bundle()
        spare_demand = self.spare_demand()
        pgs: list[Any] = []
        created: list[Any] = []
        spare_pg = None
        try:
            for pg_name, count in zip(self.placement_group_names(), self._store, strict=True):
                pgs.append(self._create_or_adopt(pg_name, [bundle] * count, demand.strategy, created))
            hooks.on_pool_bundles(self.name_prefix, 0, self.world_size + self.spare_bundle_count)
            wait_for_placement_groups(demand, pgs, timeout_s, progress_interval_s, hooks)
            if spare_demand is not None:
                # Only once the ranks' bundles are placed: a spare group the GCS scheduled first could
                # take the room they need for good (CI saw a SPREAD spare group split over the two
                # nodes each of which a PACKed rank group needed whole: a wait without end).
                spare_name, spare_bundles = spare_demand.placement_groups[0]
                spare_pg = self._create_or_adopt(spare_name, list(spare_bundles), spare_demand.strategy, created)
                wait_for_placement_groups(spare_demand, [spare_pg], timeout_s, progress_interval_s, hooks)
            hooks.on_pool_bundles(self.name_prefix, self.world_size + self.spare_bundle_count, 0)
            self.pgs = self._rank_order(ray, pgs)
            self.spare_pg = spare_pg
            self._record_original_nodes()
        except BaseException:
            self.pgs = self.spare_pg = None
            self.fence.remove_placement_groups(created)
            hooks.on_pool_bundles(self.name_prefix, 0, 0)  # nothing waits any more
            raise
        self._created = created
        return self.pgs

    def _create_or_adopt(self, pg_name: str, bundles: list[dict[str, float]], strategy: str, created: list[Any]) -> Any:
        # A placement group of that name left by an earlier incarnation (a detached pool) is adopted.
        from ray.util import get_placement_group, placement_group

        existing = self._find_existing(get_placement_group, pg_name, self.adopt_from_any_namespace)
        if existing is not None:
            if list(existing.bundle_specs) != bundles:
                raise PlacementError(
                    f"placement group {pg_name!r} exists with bundles {existing.bundle_specs}, "
                    f"expected {len(bundles)} x {bundles[0]}; remove it or use another name_prefix"
                )
            log.info("placement_group_adopted", pool=self.name_prefix, name=pg_name)
            return existing
        pg = placement_group(
            bundles=[dict(b) for b in bundles], strategy=strategy, name=pg_name, lifetime="detached" if self.detached else None
        )
        created.append(pg)
        return pg

    @staticmethod
    def _find_existing(get_placement_group: Any, pg_name: str, any_namespace: bool) -> Any | None:
        try:
            pg = get_placement_group(pg_name)
        except ValueError:
            return _named_in_another_namespace(pg_name) if any_namespace else None
        return None if _pg_state(pg) == "REMOVED" else pg

    def _rank_order(self, ray: Any, pgs: list[Any]) -> list[Any]:
        # Sort equal-sized placement groups by node IP so a rank lands on the same node across job
        # restarts (node-local checkpoints rely on it).
        if len(set(self._store)) != 1:
            return pgs
        return sort_placement_group_by_node_ip(pgs)

    def _record_original_nodes(self) -> None:
        self._original_nodes = {b.bundle: b.node_id for b in self.current_bundle_nodes()}

    def bundle_counts(self) -> tuple[int, int]:
        """``(placed, pending)`` bundles of the pool right now (pending: not yet placed, or being
        re-placed after its node was lost)."""
        from ray.util import placement_group_table

        placed = total = 0
        for pg in [*(self.pgs or []), *([self.spare_pg] if self.spare_pg is not None else [])]:
            table = placement_group_table(pg)
            total += len(pg.bundle_specs)
            placed += sum(1 for node in table.get("bundles_to_node_id", {}).values() if node)
        return placed, total - placed

    def current_bundle_nodes(self) -> list[BundlePlacement]:
        """Where every bundle is right now (Ray re-places bundles of a lost node elsewhere)."""
        from ray.util import placement_group_table

        out: list[BundlePlacement] = []
        for pg_index, pg in enumerate(self.pgs or []):
            table = placement_group_table(pg)
            for bundle_index, node_id in sorted(table.get("bundles_to_node_id", {}).items()):
                out.append(BundlePlacement(BundleRef(pg_index, int(bundle_index)), str(node_id)))
        return out

    def original_bundle_nodes(self) -> dict[BundleRef, str]:
        """Node of every bundle when the placement groups became ready."""
        return dict(self._original_nodes)

    def bundle_node(self, pg_index: int, bundle_index: int) -> str:
        """The node bundle ``bundle_index`` of placement group ``pg_index`` was on when it became ready."""
        try:
            return self._original_nodes[BundleRef(pg_index, bundle_index)]
        except KeyError:
            raise PlacementError(f"pool {self.name_prefix!r} has no ready bundle ({pg_index}, {bundle_index})") from None

    def rank_order_names(self) -> list[str]:
        """Names of the placement groups in rank order (what a state record keeps to re-adopt them)."""
        from ray.util import placement_group_table

        return [str(placement_group_table(pg)["name"]) for pg in self.pgs or []]

    def restore_rank_order(self, names: list[str], original_nodes: dict[str, list[str]]) -> None:
        """Re-apply an earlier incarnation's rank order and bundle → node record after adoption.

        Ordering by node IP would reshuffle ranks if a bundle has moved since, and the nodes seen now
        are not the ones drift is measured against.

        Args:
            names: placement-group names in the earlier rank order.
            original_nodes: ``{name: [node of bundle 0, node of bundle 1, ...]}`` recorded at creation;
                placement groups this pool created just now keep their current nodes.

        Raises:
            PlacementError: ``names`` are not this pool's placement groups.
        """
        by_name = dict(zip(self.rank_order_names(), self.pgs or [], strict=True))
        if sorted(by_name) != sorted(names):
            raise PlacementError(f"pool {self.name_prefix!r} has placement groups {sorted(by_name)}, not {sorted(names)}")
        self.pgs = [by_name[name] for name in names]
        fresh = {id(pg) for pg in self._created}
        self._record_original_nodes()
        for pg_index, (name, pg) in enumerate(zip(names, self.pgs, strict=True)):
            if id(pg) in fresh:
                continue
            for bundle_index, node in enumerate(original_nodes.get(name, [])):
                self._original_nodes[BundleRef(pg_index, bundle_index)] = node

    def release_created(self) -> None:
        """Undo the last :meth:`get_placement_groups`: remove the placement groups it created, forget the
        ones it adopted (they belong to whoever made them). For cleanup after a failed start."""
        created, self._created = self._created, []
        self.pgs = self.spare_pg = None
        self._original_nodes = {}
        self.fence.remove_placement_groups(created)

    def teardown(self) -> None:
        """Remove the placement groups this pool created or adopted.

        Idempotent, and safe when Ray is already shut down (there is then nothing left to remove).
        Views made by split/merge own nothing and do nothing here.
        """
        pgs, self.pgs = self.pgs, None
        spare, self.spare_pg = self.spare_pg, None
        self._original_nodes = {}
        if not pgs or not self._owns_pgs:
            return
        default_hooks().on_pool_bundles(self.name_prefix, 0, 0)
        import ray

        if not ray.is_initialized():
            return
        self.fence.remove_placement_groups([*pgs, *([spare] if spare is not None else [])])
        log.info("pool_torn_down", pool=self.name_prefix, placement_groups=len(pgs), spare_bundles=self.spare_bundle_count)



class SubResourcePool(ResourcePool):
    """A contiguous range of another pool's bundles (made by :func:`split_resource_pool`).

    It shares the parent's placement groups and does not own them.
    """

    def __init__(
        self,
        placement_groups: list[Any],
        start_bundle_index: int,
        subgroup_world_size: int,
        parent: ResourcePool,
        name_prefix: str,
    ) -> None:
        # Explicit base call: compat subclasses mix this class with pool types whose constructors
        # take verl's arguments, and a cooperative super() would reach those.
        ResourcePool.__init__(
            self,
            process_on_nodes=parent.store,
            use_gpu=parent.use_gpu,
            max_colocate_count=parent.max_colocate_count,
            name_prefix=name_prefix,
            detached=parent.detached,
            strategy=parent.strategy,
            accelerator_type=parent.accelerator_type,
        )
        self.pgs = placement_groups
        self.start_bundle_index = int(start_bundle_index)
        self.subgroup_world_size = int(subgroup_world_size)
        self._owns_pgs = False
        self._parent: ResourcePool = parent
        self._original_nodes = parent.original_bundle_nodes()

    @property
    def world_size(self) -> int:
        return self.subgroup_world_size

    def rank_slots(self) -> list[BundleSlot]:
        return rank_layout(self._store, start=self.start_bundle_index, world_size=self.subgroup_world_size)

    def get_placement_groups(self, *args: Any, **kwargs: Any) -> list[Any]:
        return self._parent.get_placement_groups(*args, **kwargs)


# The class split_resource_pool builds for a pool of this type (the verl adapter overrides it).
ResourcePool.sub_pool_class = SubResourcePool  # type: ignore[attr-defined]


def sort_placement_group_by_node_ip(pgs: list[Any]) -> list[Any]:
    """``pgs`` (each on one node) ordered by the IP of the node their first bundle is on, so ranks map to
    nodes the same way across job restarts. The sort is stable: ties keep their order."""
    import ray
    from ray.util import placement_group_table

    node_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}

    def key(pg: Any) -> str:
        node = placement_group_table(pg)["bundles_to_node_id"].get(0)
        return str(node_ip.get(node, ""))

    return sorted(pgs, key=key)


def extract_pg_from_exist(resource_pools: dict[str, ResourcePool], src_role_names: list[str], resource_pool: ResourcePool) -> list[Any]:
    """Placement groups of the pools of ``src_role_names`` reused for ``resource_pool``: its entries
    (``store``), largest first, each take the largest remaining group; returned in ``store`` order.

    Raises:
        AssertionError: fewer groups than entries, or a group smaller than its entry (verl's contract).
    """
    needs = list(resource_pool.store)
    candidates = [pg for role, pool in resource_pools.items() if role in src_role_names for pg in pool.get_placement_groups()]
    candidates.sort(key=lambda pg: pg.bundle_count, reverse=True)
    assert len(needs) <= len(candidates), (
        f"extract_pg_from_exist: {len(needs)} placement groups needed, "
        f"the pools of {list(src_role_names)} have {len(candidates)}"
    )
    # Greedy, biggest first: the entry needing most bundles gets the biggest group. Equal needs are
    # served from the last entry backwards, so which group an entry gets is the same as with verl.
    biggest_need_first = sorted(range(len(needs)), key=lambda entry: (needs[entry], entry), reverse=True)
    assigned: list[Any] = [None] * len(needs)
    for entry, pg in zip(biggest_need_first, candidates, strict=False):
        assert needs[entry] <= pg.bundle_count, (
            f"extract_pg_from_exist: entry {entry} needs {needs[entry]} bundles, "
            f"the largest placement group left has {pg.bundle_count}"
        )
        assigned[entry] = pg
    return assigned


def split_resource_pool(resource_pool: ResourcePool, split_size: int | list[int]) -> list[SubResourcePool]:
    """Split a pool (or a split of one) into consecutive sub-pools of ``split_size`` bundles each.

    Creates the parent's placement groups if they do not exist yet.

    Raises:
        ConfigError: the sizes do not add up to the pool's world size.
    """
    pool = resource_pool
    if isinstance(split_size, int):
        if split_size <= 0 or pool.world_size % split_size:
            raise ConfigError(f"split_size {split_size} must divide the pool's world size {pool.world_size}")
        sizes = [split_size] * (pool.world_size // split_size)
    else:
        sizes = [int(s) for s in split_size]
        if any(s <= 0 for s in sizes) or sum(sizes) != pool.world_size:
            raise ConfigError(f"split sizes {sizes} must be positive and add up to the pool's world size {pool.world_size}")
    parent = pool._parent if isinstance(pool, SubResourcePool) else pool
    base = pool.start_bundle_index if isinstance(pool, SubResourcePool) else 0
    pgs = parent.get_placement_groups()
    sub_cls = parent.sub_pool_class
    out: list[SubResourcePool] = []
    start = base
    for i, size in enumerate(sizes):
        out.append(sub_cls(pgs, start, size, parent=parent, name_prefix=f"{pool.name_prefix}_split_{i}"))
        start += size
    return out


def merge_resource_pool(rp1: ResourcePool, rp2: ResourcePool) -> ResourcePool:
    """A pool of rp1's type spanning the placement groups of two pools (rp1's first). It owns nothing.

    Raises:
        ConfigError: the pools differ in use_gpu, max_colocate_count or detached.
    """
    for attr in ("use_gpu", "max_colocate_count", "detached"):
        if getattr(rp1, attr) != getattr(rp2, attr):
            raise ConfigError(f"cannot merge pools with different {attr}: {getattr(rp1, attr)} vs {getattr(rp2, attr)}")
    if isinstance(rp1, SubResourcePool) or isinstance(rp2, SubResourcePool):
        raise ConfigError("cannot merge split pools; merge the original pools")
    # Same type as rp1 (verl code checks isinstance on the merged pool), built through the base
    # constructor because subclasses may take other arguments.
    merged = type(rp1).__new__(type(rp1))
    ResourcePool.__init__(
        merged,
        process_on_nodes=rp1.store + rp2.store,
        use_gpu=rp1.use_gpu,
        max_colocate_count=rp1.max_colocate_count,
        name_prefix=f"{rp1.name_prefix}_{rp2.name_prefix}",
        detached=rp1.detached,
        strategy=rp1.strategy,
        accelerator_type=rp1.accelerator_type,
    )
    pgs1, pgs2 = rp1.get_placement_groups(), rp2.get_placement_groups()
    merged.pgs = pgs1 + pgs2
    merged._owns_pgs = False
    offset = len(pgs1)
    merged._original_nodes = {
        **rp1.original_bundle_nodes(),
        **{BundleRef(pg + offset, b): node for (pg, b), node in rp2.original_bundle_nodes().items()},
    }
    return merged
