"""``verl.single_controller.base.decorator``."""

from collections.abc import Callable
from typing import Any

from supervisor.core.group.dispatch import DISPATCH_MODE_FN_REGISTRY as DISPATCH_MODE_FN_REGISTRY
from supervisor.core.group.dispatch import collect_all_to_all as collect_all_to_all
from supervisor.core.group.dispatch import collect_dp_compute as collect_dp_compute
from supervisor.core.group.dispatch import collect_dp_compute_data_proto as collect_dp_compute_data_proto
from supervisor.core.group.dispatch import collect_lazy_compute_data_proto as collect_lazy_compute_data_proto
from supervisor.core.group.dispatch import collect_nd_compute as collect_nd_compute
from supervisor.core.group.dispatch import collect_nd_compute_dataproto as collect_nd_compute_dataproto
from supervisor.core.group.dispatch import direct_rollout_call as dummy_direct_rollout_call
from supervisor.core.group.dispatch import dispatch_all_to_all as dispatch_all_to_all
from supervisor.core.group.dispatch import dispatch_dp_compute as dispatch_dp_compute
from supervisor.core.group.dispatch import dispatch_dp_compute_data_proto as dispatch_dp_compute_data_proto
from supervisor.core.group.dispatch import (
    dispatch_dp_compute_data_proto_with_func as dispatch_dp_compute_data_proto_with_func,
)
from supervisor.core.group.dispatch import (
    dispatch_lazy_compute_data_proto as dispatch_lazy_compute_data_proto,
)
from supervisor.core.group.dispatch import dispatch_nd_compute as dispatch_nd_compute
from supervisor.core.group.dispatch import dispatch_nd_compute_dataproto as dispatch_nd_compute_dataproto
from supervisor.core.group.dispatch import dispatch_one_to_all as dispatch_one_to_all
from supervisor.core.group.dispatch import get_predefined_dispatch_fn as get_predefined_dispatch_fn
from supervisor.core.group.dispatch import get_predefined_execute_fn as get_predefined_execute_fn
from supervisor.core.group.dispatch import (
    make_nd_compute_dataproto_dispatch_fn as make_nd_compute_dataproto_dispatch_fn,
)
from supervisor.core.group.dispatch import register_dispatch_mode as register_dispatch_mode
from supervisor.core.group.dispatch import update_dispatch_mode as update_dispatch_mode
from supervisor.core.worker.dispatch_modes import Dispatch as Dispatch
from supervisor.core.worker.dispatch_modes import Execute as Execute
from supervisor.core.worker.dispatch_modes import (
    init_predefined_dispatch_mode as init_predefined_dispatch_mode,
)
from supervisor.core.worker.dispatch_modes import init_predefined_execute_mode as init_predefined_execute_mode
from supervisor.core.worker.registration import MAGIC_ATTR as MAGIC_ATTR
from supervisor.core.worker.registration import check_dispatch_mode as _check_dispatch_mode  # noqa: F401 (verl's modules import it)
from supervisor.core.worker.registration import check_execute_mode as _check_execute_mode  # noqa: F401
from supervisor.core.worker.registration import register as _register


def register(
    dispatch_mode: Any = Dispatch.ALL_TO_ALL,
    execute_mode: Any = Execute.ALL,
    blocking: bool = True,
    materialize_futures: bool = True,
) -> Callable[[Any], Any]:
    """verl's ``register`` (same signature); ``supervisor.register`` adds ``idempotent`` and ``on_rank_failure``."""
    return _register(dispatch_mode=dispatch_mode, execute_mode=execute_mode, blocking=blocking, materialize_futures=materialize_futures)

__all__ = [
    "MAGIC_ATTR",
    "DISPATCH_MODE_FN_REGISTRY",
    "Dispatch",
    "Execute",
    "register",
    "register_dispatch_mode",
    "update_dispatch_mode",
    "get_predefined_dispatch_fn",
    "get_predefined_execute_fn",
    "make_nd_compute_dataproto_dispatch_fn",
    "dispatch_one_to_all",
    "dispatch_all_to_all",
    "collect_all_to_all",
    "dispatch_dp_compute",
    "collect_dp_compute",
    "dispatch_dp_compute_data_proto",
    "dispatch_dp_compute_data_proto_with_func",
    "collect_dp_compute_data_proto",
    "dispatch_nd_compute",
    "collect_nd_compute",
    "dispatch_nd_compute_dataproto",
    "collect_nd_compute_dataproto",
    "dispatch_lazy_compute_data_proto",
    "collect_lazy_compute_data_proto",
    "dummy_direct_rollout_call",
    "init_predefined_dispatch_mode",
    "init_predefined_execute_mode",
]
