"""What the daemon answers on ``/healthz`` and ``/readyz`` (pure), for Kubernetes probes and scripts
that read a supervisor without joining its Ray cluster.

*Healthy* means the daemon does its job: its last record write (the heartbeat, which needs the
daemon's own loop and its connection to the GCS) succeeded recently. *Ready* means the job it
supervises serves: the daemon is RUNNING and so is every group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..supervision.states import GroupState
from .record import DaemonState

__all__ = ["ProbeResult", "health", "readiness", "HEALTHY_WITHIN_HEARTBEATS", "HEALTHY_WITHIN_MIN_S"]

# The heartbeat may miss this many beats (a GCS hiccup, a slow write) before the daemon is unhealthy...
HEALTHY_WITHIN_HEARTBEATS = 3
# ...but never less than this (a 0.5 s heartbeat must not make a liveness probe flap).
HEALTHY_WITHIN_MIN_S = 10.0


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    detail: str  # one line: why (or what is fine)


def health(phase: DaemonState, last_write_age_s: float | None, heartbeat_interval_s: float) -> ProbeResult:
    """Healthy unless the record has not been written for longer than a few heartbeats (before the
    first write, while connecting and starting, it is healthy: start-up has its own timeouts; while
    stopping too: the heartbeat ends on purpose)."""
    limit = max(HEALTHY_WITHIN_MIN_S, HEALTHY_WITHIN_HEARTBEATS * heartbeat_interval_s)
    if phase in (DaemonState.STOPPING, DaemonState.DETACHED):
        # The heartbeat ends on purpose; what serves now (a failure's series, kept up for linger_s)
        # must stay reachable.
        return ProbeResult(True, f"{phase.value}: the heartbeat has ended")
    if last_write_age_s is None:
        return ProbeResult(True, f"{phase.value}: no record written yet")
    if last_write_age_s > limit:
        return ProbeResult(False, f"{phase.value}: no record write for {last_write_age_s:.0f}s (limit {limit:g}s)")
    return ProbeResult(True, f"{phase.value}: record written {last_write_age_s:.1f}s ago")


def readiness(phase: DaemonState, groups: Mapping[str, GroupState]) -> ProbeResult:
    """Ready when the daemon is RUNNING and every group is RUNNING (a recovering or failed group, or
    a daemon still starting or stopping, is not)."""
    if phase is not DaemonState.RUNNING:
        return ProbeResult(False, f"daemon {phase.value}")
    waiting = sorted(f"{name} {state.value}" for name, state in groups.items() if state is not GroupState.RUNNING)
    if waiting:
        return ProbeResult(False, "groups not running: " + ", ".join(waiting))
    return ProbeResult(True, f"running, {len(groups)} group(s) running")
