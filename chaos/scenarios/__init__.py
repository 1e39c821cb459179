"""The chaos scenarios, by name (``python -m chaos NAME``)."""

from __future__ import annotations

from ..runner import Scenario
from . import actor_kill, crash_loop, hang, node_loss, starvation, supervisor_kill, teardown

__all__ = ["SCENARIOS"]

SCENARIOS: dict[str, Scenario] = {
    module.__name__.rsplit(".", 1)[1].replace("_", "-"): Scenario(
        module.__name__.rsplit(".", 1)[1].replace("_", "-"),
        (module.__doc__ or "").strip().split("\n")[0],
        module.run,
        module.PROFILES,
        module.TIME_LIMIT_S,
    )
    for module in (actor_kill, node_loss, supervisor_kill, hang, crash_loop, starvation, teardown)
}
