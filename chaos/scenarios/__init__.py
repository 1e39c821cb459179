"""The chaos scenarios, by name (``python -m chaos NAME``)."""

from __future__ import annotations

from ..runner import Scenario
from . import (
    actor_kill,
    copies_loss,
    crash_loop,
    detach_gc,
    gcs_restart,
    hang,
    kill_during_recovery,
    node_loss,
    pause,
    preempt,
    preempt_short,
    slow_stop,
    snapshot_kill,
    starvation,
    supervisor_kill,
    teardown,
)

__all__ = ["SCENARIOS"]

SCENARIOS: dict[str, Scenario] = {
    module.__name__.rsplit(".", 1)[1].replace("_", "-"): Scenario(
        module.__name__.rsplit(".", 1)[1].replace("_", "-"),
        (module.__doc__ or "").strip().split("\n")[0],
        module.run,
        module.PROFILES,
        module.TIME_LIMIT_S,
    )
    for module in (actor_kill, node_loss, supervisor_kill, hang, crash_loop, starvation, teardown, pause, kill_during_recovery, detach_gc, slow_stop, snapshot_kill, copies_loss, preempt, preempt_short, gcs_restart)
}
