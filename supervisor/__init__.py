"""ray-supervisor: fault-tolerant GPU worker groups on Ray with a verl-compatible single controller.

The public surface is listed in ``__all__``. ``DataProto`` and friends import torch, so they are
loaded on first access: worker processes that never touch them stay light.
"""

from __future__ import annotations

from typing import Any

from .actor_class import ClassWithInitArgs as ClassWithInitArgs
from .colocate import create_colocated_worker_cls as create_colocated_worker_cls
from .decorator import register as register
from .dispatch import make_nd_compute_dataproto_dispatch_fn as make_nd_compute_dataproto_dispatch_fn
from .dispatch import register_dispatch_mode as register_dispatch_mode
from .dispatch import update_dispatch_mode as update_dispatch_mode
from .errors import ClusterUnavailableError as ClusterUnavailableError
from .errors import ConfigError as ConfigError
from .errors import DispatchError as DispatchError
from .errors import PlacementError as PlacementError
from .errors import SupervisorError as SupervisorError
from .errors import UnknownMethodError as UnknownMethodError
from .errors import WorkerEnvError as WorkerEnvError
from .group import WorkerGroup as WorkerGroup
from .modes import Dispatch as Dispatch
from .modes import Execute as Execute
from .pool import PlacementStrategy as PlacementStrategy
from .pool import ResourcePool as ResourcePool
from .pool import SubResourcePool as SubResourcePool
from .pool import merge_resource_pool as merge_resource_pool
from .pool import split_resource_pool as split_resource_pool
from .worker import Worker as Worker

__version__ = "0.1.0"

_LAZY_PROTOCOL = ("DataProto", "DataProtoFuture", "DataProtoItem", "pad_dataproto_to_divisor", "unpad_dataproto")

__all__ = [
    "ClassWithInitArgs",
    "ClusterUnavailableError",
    "ConfigError",
    "DataProto",
    "DataProtoFuture",
    "DataProtoItem",
    "Dispatch",
    "DispatchError",
    "Execute",
    "PlacementError",
    "PlacementStrategy",
    "ResourcePool",
    "SubResourcePool",
    "SupervisorError",
    "UnknownMethodError",
    "Worker",
    "WorkerEnvError",
    "WorkerGroup",
    "create_colocated_worker_cls",
    "make_nd_compute_dataproto_dispatch_fn",
    "merge_resource_pool",
    "pad_dataproto_to_divisor",
    "register",
    "register_dispatch_mode",
    "split_resource_pool",
    "unpad_dataproto",
    "update_dispatch_mode",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY_PROTOCOL:
        from . import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
