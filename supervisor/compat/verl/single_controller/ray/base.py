"""``verl.single_controller.ray.base``, with verl's constructor signatures and defaults."""

from __future__ import annotations

import random
import string
from typing import Any

import ray

from supervisor.core.group.actor_class import ClassWithInitArgs
from supervisor.core.group.binding import func_generator as func_generator
from supervisor.core.group.colocate import create_colocated_worker_cls as create_colocated_worker_cls
from supervisor.core.group.colocate import (
    create_colocated_worker_cls_fused as create_colocated_worker_cls_fused,
)
from supervisor.core.group.colocate import create_colocated_worker_raw_cls as create_colocated_worker_raw_cls
from supervisor.core.group.group import DEFAULT_NAMESPACE, WorkerGroup
from supervisor.core.group.rendezvous import master_addr_port
from supervisor.core.worker.worker_base import Worker as Worker
from supervisor.placement.pool import ResourcePool as _LibraryResourcePool
from supervisor.placement.pool import SubResourcePool
from supervisor.placement.pool import extract_pg_from_exist as extract_pg_from_exist
from supervisor.placement.pool import merge_resource_pool as merge_resource_pool
from supervisor.placement.pool import sort_placement_group_by_node_ip as sort_placement_group_by_node_ip
from supervisor.placement.pool import split_resource_pool as split_resource_pool
from supervisor.placement.pool_manager import ResourcePoolManager as _ResourcePoolManager

from ..base.worker_group import ResourcePool

__all__ = [
    "Worker",
    "RayClassWithInitArgs",
    "RayResourcePool",
    "SubRayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolManager",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "create_colocated_worker_raw_cls",
    "split_resource_pool",
    "merge_resource_pool",
    "extract_pg_from_exist",
    "func_generator",
    "get_master_addr_port",
    "get_random_string",
    "sort_placement_group_by_node_ip",
]

# verl's remote function: ``ray.get(get_master_addr_port.remote())`` is the node's (address, free port).
get_master_addr_port = ray.remote(master_addr_port)


def get_random_string(length: int) -> str:
    """``length`` random letters and digits (verl names things with it)."""
    return "".join(random.choices(string.ascii_letters + string.digits, k=length))

RayClassWithInitArgs = ClassWithInitArgs


class RayResourcePool(ResourcePool):
    """verl's ``RayResourcePool(process_on_nodes, use_gpu=True, name_prefix=None, max_colocate_count=10,
    detached=False, accelerator_type=None)``."""

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
    ) -> None:
        _LibraryResourcePool.__init__(
            self,
            process_on_nodes=process_on_nodes,
            use_gpu=use_gpu,
            max_colocate_count=max_colocate_count,
            name_prefix=name_prefix,
            detached=detached,
            accelerator_type=accelerator_type,
        )


class SubRayResourcePool(SubResourcePool, RayResourcePool):
    """verl's ``SubRayResourcePool``: a split of a :class:`RayResourcePool` (built by ``split_resource_pool``)."""


RayResourcePool.sub_pool_class = SubRayResourcePool  # type: ignore[attr-defined]


# verl options that configure profiling or the device and have no effect here.
_IGNORED_KWARGS = ("device_name", "profile_steps", "worker_nsight_options", "use_gpu", "master_port_range")


class RayWorkerGroup(WorkerGroup):
    """verl's ``RayWorkerGroup(resource_pool=None, ray_cls_with_init=None, bin_pack=True, name_prefix=None,
    detached=False, worker_names=None, worker_handles=None, ray_wait_register_center_timeout=300, **kwargs)``.

    Supported kwargs: ``worker_env``, ``master_addr``, ``master_port``, ``namespace``; verl's profiling
    and device options are accepted and ignored.
    """

    def __init__(
        self,
        resource_pool: ResourcePool | None = None,
        ray_cls_with_init: ClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_wait_register_center_timeout: int = 300,
        **kwargs: Any,
    ) -> None:
        for key in _IGNORED_KWARGS:
            kwargs.pop(key, None)
        super().__init__(
            resource_pool=resource_pool,
            cls_with_init=ray_cls_with_init,
            bin_pack=bin_pack,
            name_prefix=name_prefix,
            detached=detached,
            worker_names=worker_names,
            worker_handles=worker_handles,
            worker_env=kwargs.pop("worker_env", None),
            namespace=kwargs.pop("namespace", DEFAULT_NAMESPACE),
            master_addr=kwargs.pop("master_addr", None),
            master_port=kwargs.pop("master_port", None),
        )
        if kwargs:
            raise TypeError(f"RayWorkerGroup got unexpected keyword arguments {sorted(kwargs)}")

    @property
    def ray_cls_with_init(self) -> ClassWithInitArgs | None:
        return self.cls_with_init

    @classmethod
    def from_detached(  # type: ignore[override]
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_cls_with_init: ClassWithInitArgs | None = None,
        **kwargs: Any,
    ) -> RayWorkerGroup:
        return cls(
            resource_pool=None,
            ray_cls_with_init=ray_cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            **kwargs,
        )


class ResourcePoolManager(_ResourcePoolManager):
    """verl's ``ResourcePoolManager(resource_pool_spec, mapping, max_colocate_count=3)``: its pools are
    :class:`RayResourcePool` s."""

    def _new_pool(self, name: str, process_on_nodes: list[int]) -> RayResourcePool:
        return RayResourcePool(
            process_on_nodes=process_on_nodes,
            use_gpu=True,
            max_colocate_count=self.max_colocate_count,
            name_prefix=name,
        )
