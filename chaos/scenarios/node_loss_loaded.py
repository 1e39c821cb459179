"""node-loss-loaded: node-loss with one core kept busy beside the run (another job's process, a data
loader gone wild): a single rank killed first gives the recovery time of one rank under that load, then a
node holding several ranks is removed. Nothing lost or duplicated; noted: the node's last rank serving
again as a multiple of the one rank's recovery (the goal: within 1.3x, since the ranks of one failure
start side by side and fork from their node's zygote instead of each importing torch)."""

from __future__ import annotations

from .node_loss import Params, run

__all__ = ["run", "PROFILES", "TIME_LIMIT_S"]

PROFILES = {"quick": Params(losses=1, cpu_hog=True), "full": Params(losses=3, cpu_hog=True)}
TIME_LIMIT_S = {"quick": 300.0, "full": 1200.0}
