"""node-loss: remove a node that holds bundles of the running job, then add a node back. The lost
ranks must be replaced where Ray re-places their bundles, drift must be reported for exactly the ranks
that moved, every step's items must come back exactly once, and nothing may be left at the end.

Both profiles run under load: a process keeps one core busy beside the run (``cpu_hog``), and one rank
is killed alone first, so the time until a node's ranks all serve again is noted beside that
single-rank recovery, measured the same way under the same load (the goal: within 1.3x)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from ..faults import KillMethod, kill_actor, rank_nodes, rank_restarts
from ..harness import JobOptions, rank_actor, wait_until
from ..invariants import check_drift, check_restarts
from ..runner import Context


@dataclass(frozen=True)
class Params:
    losses: int
    add_back: bool = True  # a fresh node joins after each loss (capacity for the next one)
    cpu_hog: bool = False  # one core kept busy beside the run, and a single-rank kill first (the baseline)


def run(ctx: Context, p: Params) -> None:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if p.cpu_hog else None
    try:
        _run(ctx, p)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait(30)


def _run(ctx: Context, p: Params) -> None:
    daemon = ctx.start(JobOptions())
    daemon.wait_running()
    daemon.wait_steps(1)
    moved: set[tuple[str, int]] = set()
    expected: Counter[tuple[str, int]] = Counter()
    recovery: list[float] = []
    if p.cpu_hog:
        single = _single_rank_recovery(ctx, daemon, expected)
        ctx.report.notes["one rank killed -> serving again, one core busy (s)"] = round(single, 2)
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
    if p.cpu_hog and recovery:
        ctx.report.notes["node loss / single-rank recovery (goal <= 1.3)"] = [round(t / single, 2) for t in recovery]
    ctx.end_job(daemon, min_steps=2)


def _single_rank_recovery(ctx: Context, daemon, expected: Counter) -> float:
    """SIGKILL one rank; seconds until it runs again, by the same record polling as a node loss."""
    record = daemon.record()
    key = ("rollout", ctx.rng.randrange(len(record.groups["rollout"].actor_names)))
    before = rank_restarts(record)
    _, handle = rank_actor(record, *key)
    killed = time.monotonic()
    kill_actor(handle, KillMethod.SIGKILL)
    ctx.injected("single-rank kill (baseline)")
    expected[key] += 1
    wait_until(partial(_replaced, daemon, before, "", {key}), 120, f"{key[0]} rank {key[1]} to be replaced", 0.2)
    took = time.monotonic() - killed
    ctx.report.faults_recovered += 1
    daemon.wait_steps(daemon.steps_done() + 1)
    return took


def _replaced(daemon, before: dict, node: str, affected: set) -> bool:
    record = daemon.record()
    restarts, now = rank_restarts(record), rank_nodes(record)
    return all(restarts[k] > before[k] and now[k][2] == "running" and now[k][0] not in (None, node) for k in affected)


PROFILES = {"quick": Params(losses=1, cpu_hog=True), "full": Params(losses=5, cpu_hog=True)}
TIME_LIMIT_S = {"quick": 240.0, "full": 1200.0}
