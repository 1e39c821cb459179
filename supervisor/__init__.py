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
from .hooks import LifecycleHooks as LifecycleHooks
from .hooks import ObservingHooks as ObservingHooks
from .init_policy import InitOutcome as InitOutcome
from .init_policy import InitPolicy as InitPolicy
from .lifecycle import ActorStartError as ActorStartError
from .lifecycle import InitGroupError as InitGroupError
from .lifecycle import create_group as create_group
from .lifecycle import init_group as init_group
from .modes import Dispatch as Dispatch
from .modes import Execute as Execute
from .pool import PlacementStrategy as PlacementStrategy
from .pool import ResourcePool as ResourcePool
from .pool import SubResourcePool as SubResourcePool
from .pool import merge_resource_pool as merge_resource_pool
from .pool import split_resource_pool as split_resource_pool
from .resource_wait import InfeasibleResourcesError as InfeasibleResourcesError
from .resource_wait import ResourceWaitTimeout as ResourceWaitTimeout
from .restart_policy import FailureReason as FailureReason
from .restart_policy import RestartPolicy as RestartPolicy
from .restart_policy import RestartStrategy as RestartStrategy
from .supervised_call import WorkerFailedError as WorkerFailedError
from .supervision import GroupFailedError as GroupFailedError
from .supervision import GroupState as GroupState
from .supervision import GroupSupervisor as GroupSupervisor
from .supervision import InFlightPolicy as InFlightPolicy
from .supervision import SupervisionConfig as SupervisionConfig
from .version import __version__ as __version__
from .worker import Worker as Worker

_LAZY_PROTOCOL = ("DataProto", "DataProtoFuture", "DataProtoItem", "pad_dataproto_to_divisor", "unpad_dataproto")

__all__ = [
    "WorkerFailedError",
    "SupervisionConfig",
    "RestartStrategy",
    "RestartPolicy",
    "InFlightPolicy",
    "GroupSupervisor",
    "GroupState",
    "GroupFailedError",
    "FailureReason",
    "ActorStartError",
    "ClassWithInitArgs",
    "ClusterUnavailableError",
    "ConfigError",
    "DataProto",
    "DataProtoFuture",
    "DataProtoItem",
    "Dispatch",
    "DispatchError",
    "Execute",
    "InfeasibleResourcesError",
    "InitGroupError",
    "InitOutcome",
    "InitPolicy",
    "LifecycleHooks",
    "ObservingHooks",
    "PlacementError",
    "PlacementStrategy",
    "ResourcePool",
    "ResourceWaitTimeout",
    "SubResourcePool",
    "SupervisorError",
    "UnknownMethodError",
    "Worker",
    "WorkerEnvError",
    "WorkerGroup",
    "create_colocated_worker_cls",
    "create_group",
    "make_nd_compute_dataproto_dispatch_fn",
    "merge_resource_pool",
    "init_group",
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
