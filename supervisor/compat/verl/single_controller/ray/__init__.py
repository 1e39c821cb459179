"""``verl.single_controller.ray``."""

from .base import RayClassWithInitArgs as RayClassWithInitArgs
from .base import RayResourcePool as RayResourcePool
from .base import RayWorkerGroup as RayWorkerGroup
from .base import ResourcePoolManager as ResourcePoolManager
from .base import SubRayResourcePool as SubRayResourcePool
from .base import create_colocated_worker_cls as create_colocated_worker_cls
from .base import create_colocated_worker_cls_fused as create_colocated_worker_cls_fused
from .base import merge_resource_pool as merge_resource_pool
from .base import split_resource_pool as split_resource_pool

__all__ = [
    "RayClassWithInitArgs",
    "RayResourcePool",
    "SubRayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolManager",
    "create_colocated_worker_cls",
    "create_colocated_worker_cls_fused",
    "split_resource_pool",
    "merge_resource_pool",
]
