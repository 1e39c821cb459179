"""node-loss: remove a node that holds bundles of the running job, then add a node back. The lost
ranks must be replaced where Ray re-places their bundles, drift must be reported for exactly the ranks
that moved, every step's items must come back exactly once, and nothing may be left at the end."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from ..faults import rank_nodes, rank_restarts, stop_daemon
from ..harness import JobOptions, wait_until
from ..invariants import check_drift, check_restarts
from ..runner import Context


@dataclass(frozen=True)
class Params:
    losses: int
    add_back: bool = True  # a fresh node joins after each loss (capacity for the next one)


def run(ctx: Context, p: Params) -> None:
    daemon = ctx.start(JobOptions())
    daemon.wait_running()
    daemon.wait_steps(1)
    moved: set[tuple[str, int]] = set()
    expected: Counter[tuple[str, int]] = Counter()
    recovery: list[float] = []
    for _ in range(p.losses):
        if not ctx.time_left():
            break
        nodes = rank_nodes(daemon.record())
        gpu_nodes = {n.node_id for n in ctx.cluster.gpu_nodes}
        node = ctx.rng.choice(sorted({now for now, _, _ in nodes.values() if now in gpu_nodes}))
        affected = {k for k, (now, _, _) in nodes.items() if now == node}
        before = rank_restarts(daemon.record())
        removed = time.monotonic()
        ctx.cluster.remove_node(node)
        ctx.injected("node loss")
        expected.update(affected)

        wait_until(partial(_replaced, daemon, before, node, affected), 180, f"the ranks of lost node {node[:12]} to be replaced", 0.2)
        recovery.append(time.monotonic() - removed)
        ctx.report.faults_recovered += 1
        moved |= affected
        if p.add_back:
            ctx.cluster.add_gpu_node()
        daemon.wait_steps(daemon.steps_done() + 1)
        drifted = {k for k, (now, original, _) in rank_nodes(daemon.record()).items() if now and original and now != original}
        ctx.report.violations += check_drift(moved, drifted)
    ctx.report.violations += check_restarts(expected, rank_restarts(daemon.record()))
    ctx.timings_from_events()
    ctx.report.notes["node loss -> all its ranks serving (s)"] = [round(t, 2) for t in recovery]
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=2)
    ctx.check_state_intact()
    ctx.check_torn_down()


def _replaced(daemon, before: dict, node: str, affected: set) -> bool:
    record = daemon.record()
    restarts, now = rank_restarts(record), rank_nodes(record)
    return all(restarts[k] > before[k] and now[k][2] == "running" and now[k][0] not in (None, node) for k in affected)


PROFILES = {"quick": Params(losses=1), "full": Params(losses=5)}
TIME_LIMIT_S = {"quick": 240.0, "full": 1200.0}
