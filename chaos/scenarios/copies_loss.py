"""copies-loss: lose a node holding a rank of the sharded "actor" group together with the node that
holds the second in-memory copy of that rank's shards, so both memory copies of its snapshots are
gone. The rollback must fall back to the disk snapshot (``disk_dir``, ``disk_snapshot_every``) and say
so (medium ``disk``); every stateful group goes back to that step, the driver replays from it, nothing
is lost or applied twice, and the trained state ends bit for bit as a fault-free run's."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import partial

from ..faults import rank_nodes, rank_restarts, stop_daemon
from ..harness import JobOptions, wait_until
from ..report import Stats
from ..runner import Context

GROUP = "actor"
DISK_EVERY = 4  # a disk snapshot every 4 step boundaries; memory ones every step


@dataclass(frozen=True)
class Params:
    losses: int


def run(ctx: Context, p: Params) -> None:
    import ray

    from supervisor.state.planning import copy_nodes

    # A fourth GPU node: two of them can go at once and the job's 10 ranks still fit on the rest.
    ctx.cluster.add_gpu_node()
    options = replace(JobOptions(), disk_dir=str(ctx.workdir / "snapshots"), disk_snapshot_every=DISK_EVERY)
    daemon = ctx.start(options)
    daemon.wait_running()
    daemon.wait_steps(DISK_EVERY + 2)  # a disk snapshot exists, and memory ones after it
    recovery: list[float] = []
    for i in range(p.losses):
        if not ctx.time_left():
            break
        record = daemon.record()
        nodes = rank_nodes(record)
        alive = sorted(
            n["NodeID"] for n in ray.nodes() if n.get("Alive")
        )  # a keeper on each (the snapshots ensure it)
        removable = {n.node_id for n in ctx.cluster.gpu_nodes}
        # A rank whose shards' second copy is on another GPU node (the head cannot be removed).
        choices = []
        for rank in range(len(record.groups[GROUP].actor_names)):
            node = nodes[(GROUP, rank)][0]
            copies = copy_nodes(node, alive)
            if node in removable and len(copies) == 2 and copies[1] in removable:
                choices.append((rank, node, copies[1]))
        if not choices:
            ctx.violation(
                f"loss {i}: no {GROUP} rank has both copies of its shards on GPU nodes (nodes {alive})"
            )
            break
        rank, node, second = ctx.rng.choice(choices)
        affected = {k for k, (now, _, _) in nodes.items() if now in (node, second)}
        before = rank_restarts(record)
        seen = len(daemon.events())
        lost = time.monotonic()
        # The second copies' node first: the rank's own node going first could start a rollback that
        # still finds them (the planner runs once the replaced ranks re-formed, seconds later).
        ctx.cluster.remove_node(second)
        ctx.cluster.remove_node(node)
        ctx.injected("node lost with the node of its shards' second copies")
        event = wait_until(
            partial(_rollback_after, daemon, seen),
            240,
            f"the rollback after losing {GROUP} rank {rank}'s node",
            0.2,
        )
        wait_until(
            partial(_replaced, daemon, before, (node, second), affected),
            240,
            "the lost nodes' ranks to be replaced",
            0.2,
        )
        recovery.append(time.monotonic() - lost)
        if event.get("medium") != "disk" or event["to_step"] % DISK_EVERY:
            ctx.violation(
                f"loss {i}: both memory copies of {GROUP} rank {rank}'s shards were lost, but the job rolled back to step {event['to_step']} from {event.get('medium')}, expected a disk snapshot (every {DISK_EVERY} steps)"
            )
        ctx.report.notes.setdefault("rolled back (from step -> to step, medium)", []).append(
            f"{event['from_step']} -> {event['to_step']}, {event.get('medium')}"
        )
        for _ in range(2):  # capacity for the next loss
            ctx.cluster.add_gpu_node()
        daemon.wait_steps(daemon.steps_done() + DISK_EVERY + 2)  # a new disk snapshot past the replay
        ctx.report.faults_recovered += 1
    ctx.timings_from_events()
    ctx.report.recovery = Stats.of(recovery)
    ctx.report.notes["recovery measures"] = (
        "both nodes lost -> every rank on them replaced and the rollback announced"
    )
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=DISK_EVERY + 3)
    ctx.check_state_intact()
    ctx.check_torn_down()


def _rollback_after(daemon, seen: int) -> dict | None:
    """The driver's first rollback after the first ``seen`` events; RuntimeError (with the group's
    failure) if the daemon ended instead."""
    events = daemon.events()[seen:]
    found = next((e for e in events if e.get("event") == "rlhf_rolled_back"), None)
    if found is None and daemon.proc.poll() is not None:
        failed = [str(e.get("message", "")) for e in events if e.get("event") == "group_failed"]
        raise RuntimeError(
            f"the daemon exited {daemon.proc.returncode} instead of rolling back: {failed[0] if failed else 'no group failure logged'}"
        )
    return found


def _replaced(daemon, before: dict, lost: tuple[str, str], affected: set) -> bool:
    record = daemon.record()
    restarts, now = rank_restarts(record), rank_nodes(record)
    return all(
        restarts[k] > before[k] and now[k][2] == "running" and now[k][0] not in (None, *lost)
        for k in affected
    )


PROFILES = {"quick": Params(losses=1), "full": Params(losses=3)}
TIME_LIMIT_S = {"quick": 300.0, "full": 900.0}
