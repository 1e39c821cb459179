"""The lenient wait for placement groups: long, patient, and explicit about what it waits for.

Before anything is created, a demand that no node could ever satisfy fails at once
(:func:`~supervisor.placement.resources.find_infeasibility`). While waiting, a diagnosis is reported at a steady
cadence through the hooks. On timeout the caller gets a :class:`ResourceWaitTimeout` whose message
carries the last diagnosis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import PlacementError
from ..observability.hooks import LifecycleHooks
from .cluster_state import read_snapshot
from .resources import PoolDemand, ResourceDiagnosis, diagnose, find_infeasibility

__all__ = ["RESOURCE_TIMEOUT_S", "ResourceWaitTimeout", "InfeasibleResourcesError", "check_feasible", "wait_for_placement_groups"]

# How long a pool waits for its placement groups by default (a busy cluster frees GPUs within minutes).
RESOURCE_TIMEOUT_S = 600.0


class InfeasibleResourcesError(PlacementError):
    """No node of the cluster could ever satisfy the demand (and no autoscaler is expected)."""


class ResourceWaitTimeout(PlacementError):
    """The resources did not become available within the wait timeout; the message says what was missing."""


def check_feasible(demand: PoolDemand, autoscaling: bool = False) -> None:
    """Raise :class:`InfeasibleResourcesError` at once when the current nodes can never hold ``demand``.

    With ``autoscaling`` the cluster may grow, so nothing is judged infeasible.
    """
    if autoscaling:
        return
    reason = find_infeasibility(demand, read_snapshot())
    if reason is not None:
        raise InfeasibleResourcesError(f"infeasible: {reason}; no autoscaler is expected, so waiting cannot help")


def wait_for_placement_groups(
    demand: PoolDemand,
    placement_groups: list[Any],
    timeout_s: float | None,
    progress_interval_s: float,
    hooks: LifecycleHooks,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Wait until every placement group is ready; return the seconds waited.

    Args:
        demand: what the pool asks for (for the diagnosis).
        placement_groups: the pool's placement groups (created or adopted).
        timeout_s: give up after this long; None waits forever.
        progress_interval_s: cadence of progress reports while waiting.
        hooks: receive progress and the final outcome.

    Raises:
        ResourceWaitTimeout: not ready in time; the message carries the diagnosis.
    """
    import ray

    own_ids = {pg.id.hex() for pg in placement_groups}
    pending = [pg.ready() for pg in placement_groups]
    started = clock()
    last: ResourceDiagnosis | None = None
    while True:
        waited = clock() - started
        if timeout_s is not None and waited >= timeout_s:
            last = diagnose(demand, read_snapshot(), own_ids)
            hooks.on_resource_wait_done(demand.pool, waited, "timeout")
            raise ResourceWaitTimeout(f"resources not available after {waited:.0f}s: {last.summary()}")
        step = progress_interval_s if timeout_s is None else min(progress_interval_s, timeout_s - waited)
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=max(step, 0.0))
        if not pending:
            waited = clock() - started
            hooks.on_resource_wait_done(demand.pool, waited, "ready")
            return waited
        last = diagnose(demand, read_snapshot(), own_ids)
        hooks.on_resource_wait_progress(demand.pool, clock() - started, last)
