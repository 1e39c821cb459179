"""preempt: a node of the running job gets a preemption notice (the GCS's DrainNode, as KubeRay and
``ray drain-node`` send it) with a deadline, and is removed at the deadline. Every rank on it must be
handed over to a successor on another node before then: no failure charged, no step rolled back,
every step's items exactly once, the trained state bit-exact, and nothing left at the end. The full
profile also runs the same preemption with the notice ignored (``drain_hand_over = false``), side by
side: what the notice saves."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from functools import partial

from ..faults import rank_nodes, rank_restarts, stop_daemon
from ..harness import JobOptions, event_time, wait_until
from ..invariants import account_steps
from ..runner import Context

# Spare bundles for every pool, and a fourth GPU node, so the ranks of any one node have somewhere to go.
CAPACITY_FACTOR = 2.0


@dataclass(frozen=True)
class Params:
    preemptions: int
    deadline_s: float  # notice given before the node goes
    compare_ignoring: bool = False  # also run one preemption with the notice ignored (a plain node loss)
    short: bool = False  # the deadline is shorter than a hand-over (drain_min_notice_s): recovered as a loss
    # Remove the node once nothing of the job is left on it, not at the deadline (the quick profile: the
    # job cannot tell the difference, and CI's time is not spent waiting).
    remove_when_empty: bool = False


def run(ctx: Context, p: Params) -> None:
    ctx.cluster.add_gpu_node()  # removed again by the runner's restore()
    daemon = ctx.start(JobOptions(capacity_factor=CAPACITY_FACTOR))
    daemon.wait_running()
    daemon.wait_steps(1)
    notices: list[float] = []  # wall clock of each notice
    notice_to_off: list[float] = []
    for _ in range(p.preemptions):
        if not ctx.time_left():
            break
        notices.append(time.time())
        node, affected = _preempt(ctx, daemon, p.deadline_s)
        notice = time.monotonic()
        if not p.short:
            wait_until(partial(_off, daemon, node, affected), p.deadline_s, f"the ranks of draining node {node[:12]} to be handed over", 0.1)
            notice_to_off.append(round(time.monotonic() - notice, 2))
        if not p.remove_when_empty:
            time.sleep(max(0.0, notice + p.deadline_s - time.monotonic()))  # the deadline: the node goes
        ctx.cluster.remove_node(node)
        ctx.injected("preemption")
        if p.short:
            wait_until(partial(_off, daemon, node, affected), 180, f"the ranks of lost node {node[:12]} to be recovered", 0.2)
        ctx.report.faults_recovered += 1
        ctx.cluster.add_gpu_node()
        daemon.wait_steps(daemon.steps_done() + 1)
    events = daemon.events()
    handovers = [e["seconds"] for e in events if e.get("event") == "rank_handed_over"]
    seen = [event_time(e) for e in events if e.get("event") == "node_draining"]
    ctx.report.notes["notice -> seen by the daemon (s)"] = [round(min((t for t in seen if t >= at), default=float("nan")) - at, 2) for at in notices]
    outcomes = sorted({e["outcome"] for e in events if e.get("event") == "drain_not_handed_over"})
    restarts = sum(rank_restarts(daemon.record()).values())
    rollbacks = account_steps(events).rollbacks
    ctx.timings_from_events()
    ctx.report.notes["hand-over (call boundary -> successor serving, s)"] = [round(s, 3) for s in handovers]
    ctx.report.notes["notice -> every rank off the node (s)"] = notice_to_off
    ctx.report.notes["restarts charged"] = restarts
    ctx.report.notes["steps rolled back"] = rollbacks
    if p.short:
        if "deadline_too_short" not in outcomes:
            ctx.violation(f"a {p.deadline_s:g}s notice was not reported as too short (outcomes: {outcomes})")
    else:
        if restarts:
            ctx.violation(f"{restarts} restart(s) charged: a hand-over is not a failure")
        if rollbacks:
            ctx.violation(f"the driver replayed {rollbacks} time(s) from a snapshot: a hand-over rolls nothing back")
        if outcomes:
            ctx.violation(f"ranks not handed over: {outcomes}")
    ctx.end_job(daemon, min_steps=2)
    if p.compare_ignoring and ctx.time_left():
        _compare_ignoring(ctx, p)


def _preempt(ctx: Context, daemon, deadline_s: float) -> tuple[str, set[tuple[str, int]]]:
    """Send the notice to the node holding the most ranks (a random one of those); returns it and the ranks on it."""
    import ray
    from ray.core.generated import autoscaler_pb2

    nodes = rank_nodes(daemon.record())
    gpu_nodes = {n.node_id for n in ctx.cluster.gpu_nodes}
    held = Counter(now for now, _, _ in nodes.values() if now in gpu_nodes)
    node = ctx.rng.choice(sorted(n for n, count in held.items() if count == max(held.values())))
    affected = {k for k, (now, _, _) in nodes.items() if now == node}
    reason = autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION")
    deadline_ms = int((time.time() + deadline_s) * 1000)
    accepted, why = ray._private.worker.global_worker.gcs_client.drain_node(node, reason, "chaos preempt", deadline_ms)
    if not accepted:
        raise RuntimeError(f"the GCS refused the drain of node {node[:12]}: {why}")
    return node, affected



def _off(daemon, node: str, affected: set[tuple[str, int]]) -> bool:
    now = rank_nodes(daemon.record())
    return all(now[k][0] not in (None, node) and now[k][2] == "running" for k in affected)


def _compare_ignoring(ctx: Context, p: Params) -> None:
    """The same preemption with the notice ignored: the node's loss is a failure, charged and (for the
    trained groups) rolled back. What it cost is noted beside the hand-over's."""
    ctx.restart_spec(JobOptions(capacity_factor=CAPACITY_FACTOR, drain_hand_over=False))
    daemon = ctx.start(JobOptions(capacity_factor=CAPACITY_FACTOR, drain_hand_over=False))
    daemon.wait_running()
    daemon.wait_steps(1)
    node, affected = _preempt(ctx, daemon, p.deadline_s)
    notice = time.monotonic()
    time.sleep(p.deadline_s)
    removed = time.monotonic()
    ctx.cluster.remove_node(node)
    ctx.injected("preemption (notice ignored)")
    wait_until(partial(_off, daemon, node, affected), 180, f"the ranks of lost node {node[:12]} to be recovered", 0.2)
    ctx.cluster.add_gpu_node()
    daemon.wait_steps(daemon.steps_done() + 1)
    events = daemon.events()
    ctx.report.notes["notice ignored: node loss -> every rank serving (s)"] = round(time.monotonic() - removed, 2)
    ctx.report.notes["notice ignored: restarts charged"] = sum(rank_restarts(daemon.record()).values())
    ctx.report.notes["notice ignored: steps rolled back"] = account_steps(events).rollbacks
    ctx.report.notes["notice ignored: notice -> node gone (s)"] = round(removed - notice, 2)
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"notice ignored: `supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_torn_down()


PROFILES = {
    "quick": Params(preemptions=1, deadline_s=30.0, remove_when_empty=True),
    "full": Params(preemptions=3, deadline_s=30.0, compare_ignoring=True),
}
TIME_LIMIT_S = {"quick": 300.0, "full": 1500.0}
