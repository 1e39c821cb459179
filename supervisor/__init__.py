"""ray-supervisor: fault-tolerant GPU worker groups on Ray with a verl-compatible single controller.

The public surface is listed in ``__all__``. ``DataProto`` and friends import torch, so they are
loaded on first access: worker processes that never touch them stay light.
"""

from __future__ import annotations

from typing import Any

from .core.group.actor_class import ClassWithInitArgs as ClassWithInitArgs
from .core.group.colocate import create_colocated_worker_cls as create_colocated_worker_cls
from .core.group.dispatch import (
    make_nd_compute_dataproto_dispatch_fn as make_nd_compute_dataproto_dispatch_fn,
)
from .core.group.dispatch import register_dispatch_mode as register_dispatch_mode
from .core.group.dispatch import update_dispatch_mode as update_dispatch_mode
from .core.group.group import WorkerGroup as WorkerGroup
from .core.worker.dispatch_modes import Dispatch as Dispatch
from .core.worker.dispatch_modes import Execute as Execute
from .core.worker.registration import register as register
from .core.worker.worker_base import Worker as Worker
from .errors import ClusterUnavailableError as ClusterUnavailableError
from .errors import ConfigError as ConfigError
from .errors import DispatchError as DispatchError
from .errors import PlacementError as PlacementError
from .errors import SupervisorError as SupervisorError
from .errors import UnknownMethodError as UnknownMethodError
from .errors import WorkerEnvError as WorkerEnvError
from .failure import FailureReason as FailureReason
from .observability.hooks import LifecycleHooks as LifecycleHooks
from .observability.hooks import ObservingHooks as ObservingHooks
from .placement.pool import PlacementStrategy as PlacementStrategy
from .placement.pool import ResourcePool as ResourcePool
from .placement.pool import SubResourcePool as SubResourcePool
from .placement.pool import merge_resource_pool as merge_resource_pool
from .placement.pool import split_resource_pool as split_resource_pool
from .placement.resource_wait import InfeasibleResourcesError as InfeasibleResourcesError
from .placement.resource_wait import ResourceWaitTimeout as ResourceWaitTimeout
from .placement.standby import StandbyReach as StandbyReach
from .supervision import GroupFailedError as GroupFailedError
from .supervision import GroupState as GroupState
from .supervision import GroupSupervisor as GroupSupervisor
from .supervision import InFlightPolicy as InFlightPolicy
from .supervision import SupervisionConfig as SupervisionConfig
from .supervision.init_policy import InitOutcome as InitOutcome
from .supervision.init_policy import InitPolicy as InitPolicy
from .supervision.lifecycle import ActorStartError as ActorStartError
from .supervision.lifecycle import InitGroupError as InitGroupError
from .supervision.lifecycle import create_group as create_group
from .supervision.lifecycle import init_group as init_group
from .supervision.restart_policy import RestartPolicy as RestartPolicy
from .supervision.restart_policy import RestartStrategy as RestartStrategy
from .supervision.supervised_call import WorkerFailedError as WorkerFailedError
from .version import __version__ as __version__

# Loaded on first use (DataProto imports torch and tensordict; the daemon's modules import more than a
# worker needs): name -> (module, attribute).
_LAZY = {
    **{name: ("core.protocol", name) for name in ("DataProto", "DataProtoFuture", "DataProtoItem", "pad_dataproto_to_divisor", "unpad_dataproto")},
    "ConsoleProgressHooks": ("observability.hooks", "ConsoleProgressHooks"),
    "DriverContext": ("daemon.driver", "DriverContext"),
    "KVStore": ("daemon.kv", "KVStore"),
    "load_spec": ("daemon.spec", "load_spec"),
    "serve_metrics": ("observability.metrics", "serve"),
}

__all__ = [
    "WorkerFailedError",
    "SupervisionConfig",
    "RestartStrategy",
    "RestartPolicy",
    "InFlightPolicy",
    "StandbyReach",
    "GroupSupervisor",
    "GroupState",
    "GroupFailedError",
    "FailureReason",
    "ActorStartError",
    "ClassWithInitArgs",
    "ClusterUnavailableError",
    "ConsoleProgressHooks",
    "DriverContext",
    "KVStore",
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
    "load_spec",
    "serve_metrics",
    "pad_dataproto_to_divisor",
    "register",
    "register_dispatch_mode",
    "split_resource_pool",
    "unpad_dataproto",
    "update_dispatch_mode",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attribute)
    raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
