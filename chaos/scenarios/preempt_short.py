"""preempt-short: a preemption notice whose deadline is shorter than a hand-over (less than
``drain_min_notice_s``). The supervisor must say so (a ``deadline_too_short`` outcome per rank) and
recover the node's loss as before: nothing lost or duplicated, the trained state bit-exact."""

from __future__ import annotations

from .preempt import Params, run

__all__ = ["run", "PROFILES", "TIME_LIMIT_S"]

PROFILES = {"quick": Params(preemptions=1, deadline_s=2.0, short=True), "full": Params(preemptions=3, deadline_s=2.0, short=True)}
TIME_LIMIT_S = {"quick": 300.0, "full": 900.0}
