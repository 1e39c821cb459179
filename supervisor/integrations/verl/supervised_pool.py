"""verl's resource pools, reserved by our :class:`~supervisor.placement.pool.ResourcePool`.

:class:`SupervisedRayResourcePool` is a drop-in for verl's ``RayResourcePool`` (same constructor, a
subclass of it, so verl's ``isinstance`` checks and attributes hold). Its placement groups are made
by one of our pools: lenient resource wait, a one-line error for impossible demands, bundle nodes
recorded for drift, removal through the owner fence. A plain verl ``RayResourcePool`` handed to a
supervised group is converted the same way (:func:`library_pool_of`), once per verl pool, so groups
that share a verl pool (colocation) share one of ours.

Under a host (``supervisor run``) the pool is named ``pool_prefix_of(host.name, host.pool_name(...))``
and detached, so the daemon finds and owns it; without one it keeps verl's name and lifetime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl.single_controller.ray import base as verl_ray_base

from ...errors import ConfigError
from ...placement.pool import PlacementStrategy, ResourcePool
from .host import current_host
from .originals import verl_original

if TYPE_CHECKING:
    from .host import GroupHost

__all__ = ["SupervisedRayResourcePool", "library_pool_of", "VerlRayResourcePool", "POOL_NAME_ATTR"]

# verl's own class, bound before patch.install() replaces the module attribute.
VerlRayResourcePool: type = verl_original("RayResourcePool")

# Where a verl pool keeps the library pool that reserves it (one per verl pool), and that pool's
# name under the host (what the host's record calls it).
_LIBRARY_POOL_ATTR = "_supervisor_library_pool"
POOL_NAME_ATTR = "_supervisor_pool_name"


def _strategy(verl_strategy: Any) -> PlacementStrategy:
    return PlacementStrategy.parse(verl_strategy or PlacementStrategy.STRICT_PACK)


def library_pool_of(pool: Any, strategy: Any = None, host: GroupHost | None = None) -> ResourcePool:
    """Our pool reserving verl pool ``pool`` (made on first call, then the same one).

    Args:
        pool: verl's ``RayResourcePool`` (or a :class:`SupervisedRayResourcePool`).
        strategy: verl's placement strategy (``"STRICT_PACK"`` for bin_pack, ``"PACK"``); used when
            the pool is made.
        host: the process's host (default: :func:`current_host`).

    Raises:
        ConfigError: a split pool, or one whose placement groups verl created itself.
    """
    existing = getattr(pool, _LIBRARY_POOL_ATTR, None)
    if existing is not None:
        return existing  # type: ignore[no-any-return]
    if isinstance(pool, verl_ray_base.SubRayResourcePool):
        raise ConfigError(f"verl pool {pool.name_prefix!r} is a split pool (SubRayResourcePool), which supervised groups do not take yet")
    if not isinstance(pool, VerlRayResourcePool):
        raise ConfigError(f"resource_pool must be verl's RayResourcePool, got {type(pool).__name__}")
    if pool.pgs is not None:
        raise ConfigError(
            f"verl pool {pool.name_prefix!r} already has placement groups verl created: build it as "
            "SupervisedRayResourcePool (or call supervisor.integrations.verl.patch.install() first)"
        )
    host = host if host is not None else current_host()
    requested = str(pool.name_prefix)
    if host is not None:
        from ...daemon.ownership import pool_prefix_of

        short = host.pool_name(requested)  # unique in the host: asked once per verl pool
        name, detached = pool_prefix_of(host.name, short), True
    else:
        short, name, detached = requested, requested, bool(pool.detached)
    library = ResourcePool(
        process_on_nodes=list(pool.store),
        use_gpu=pool.use_gpu,
        max_colocate_count=pool.max_colocate_count,
        name_prefix=name,
        detached=detached,
        strategy=_strategy(strategy),
        accelerator_type=pool.accelerator_type,
    )
    if host is not None:
        library.fence = host.fence
        library.adopt_from_any_namespace = True  # a detached run's pools, found by the next run
    setattr(pool, _LIBRARY_POOL_ATTR, library)
    setattr(pool, POOL_NAME_ATTR, short)
    return library


class SupervisedRayResourcePool(VerlRayResourcePool):  # type: ignore[misc, valid-type]
    """verl's ``RayResourcePool(process_on_nodes=None, use_gpu=True, name_prefix=None,
    max_colocate_count=10, detached=False, accelerator_type=None)``, reserved by our pool."""

    @property
    def library_pool(self) -> ResourcePool:
        """Our pool behind this one (made with STRICT_PACK unless a group asked otherwise first)."""
        return library_pool_of(self)

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda") -> list[Any]:
        """verl's call: the placement groups in rank order, waiting for resources (lenient) if needed.

        Raises:
            InfeasibleResourcesError, ResourceWaitTimeout: as :meth:`ResourcePool.get_placement_groups`.
        """
        if self.pgs is None:
            host = current_host()
            hooks = host.hooks if host is not None else None
            self.pgs = library_pool_of(self, strategy, host).get_placement_groups(hooks=hooks)
        return self.pgs  # type: ignore[no-any-return]

    def teardown(self) -> None:
        """Remove the placement groups (through the owner fence). Idempotent."""
        library = getattr(self, _LIBRARY_POOL_ATTR, None)
        if library is not None:
            library.teardown()
        self.pgs = None
