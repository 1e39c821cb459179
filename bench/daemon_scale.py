"""The daemon at 1,024 ranks: the record, the heartbeat that writes it, `status`, `doctor` and a decision tick.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.daemon_scale [--ranks 1024] [--nodes 128] [--reps 100]

The job is simulated, not run: a record for an RLHF job of 1,024 ranks on 128 nodes of 8 GPUs (actor
512, rollout 256, reference 128, critic 128; one placement group per node and pool), 50 restarts in
the window, 20 recent failures and a full event history (1,000 events). What is timed is real: the
record's encoding, the heartbeat's write through the owner fence actor into the GCS of a local
cluster (`Job.write_record`, the daemon's own code), and `supervisor status` (text and `-o wide`) and
`supervisor doctor` reading it back from that cluster and rendering it. The decision tick is the
reconcile loop's pure `decide` over one 1,024-rank group with 10 failures (bench/decision.py's case).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from .common import Row, Stat, measure, print_rows

GROUPS = (("actor", 512), ("rollout", 256), ("reference", 128), ("critic", 128))
GOALS = {"write": "goal: median <= 10 ms", "size": "goal: <= 1 MiB", "status": "goal: median <= 1 s"}


def simulated_record(name: str, ranks: int, nodes: int):  # -> SupervisorRecord
    """A running supervisor's record for ``ranks`` ranks on ``nodes`` nodes (8 per node)."""
    from supervisor.daemon.record import FailureEvent, GroupRecord, PoolRecord, SupervisorRecord
    from supervisor.supervision.states import RankStatus, WorkerState

    now = time.time()
    node_ids = [f"{i:056x}" for i in range(1, nodes + 1)]
    per_node = max(1, ranks // nodes)
    scale = ranks / sum(n for _, n in GROUPS)
    record = SupervisorRecord(name, f"supervisor.{name}", "owner", 4242, "host", now - 3600, now, 1.0, 30.0, state="running")
    placed = 0
    for group, share in GROUPS:
        size = max(per_node, int(share * scale) // per_node * per_node)
        pgs = size // per_node
        pool_nodes = [node_ids[(placed // per_node + i) % nodes] for i in range(pgs)]
        names = [f"{name}.{group}:pg{per_node}_{pgs}:{i}" for i in range(pgs)]
        record.pools[group] = PoolRecord(group, f"{name}.{group}", names, {n: [node] * per_node for n, node in zip(names, pool_nodes, strict=True)}, [per_node] * pgs)
        g = GroupRecord(group, group, f"examples.rlhf.workers:{group.title()}Worker", [f"{group}_{group.title()}Worker_{r // per_node}:{r % per_node}" for r in range(size)])
        g.state, g.initialized, g.master_addr, g.master_port = "running", True, "10.0.0.1", 29500
        g.bundles = [[r // per_node, r % per_node] for r in range(size)]
        for r in range(size):
            node = pool_nodes[r // per_node]
            moved = r % 97 == 0  # ~1% drifted after replacements
            g.ranks.append(RankStatus(r, WorkerState.RUNNING, 1 if moved else 0, node_ids[(node_ids.index(node) + 1) % nodes] if moved else node, node, 1 if moved else 0))
        g.restarts = [[r, "died", now - 60 - r] for r in range(0, size, max(1, size // 12))][:12]
        record.groups[group] = g
        placed += size
    record.failures = [FailureEvent(now - 100 + i, "actor", i * 7, "died", "ActorDiedError: The actor died unexpectedly before finishing this task.") for i in range(20)]
    return record


def event_history(generation: int):  # -> list[Event]
    from supervisor.daemon.events import MAX_EVENTS, EventKind, EventLog, EventType

    log = EventLog()
    log.generation = generation
    now = time.time()
    for i in range(MAX_EVENTS):
        log.add(EventKind.WORKER_FAILED, f"died: ActorDiedError: The actor died unexpectedly before finishing this task. ({i})", time=now - MAX_EVENTS + i, type=EventType.WARNING, group="actor", rank=i % 512)
    return log.events()


def run(ranks: int = 1024, nodes: int = 128, reps: int = 100) -> list[Row]:
    import ray

    from supervisor.cli.doctor import diagnose, gather_facts, render_findings
    from supervisor.cli.status import collect_status, render_status
    from supervisor.daemon.events import EventKind, EventLog, events_to_json
    from supervisor.daemon.fence import OwnerFence
    from supervisor.daemon.job import Job
    from supervisor.daemon.record import RecordStore

    from . import decision
    from .common import local_cluster

    name = "scale-1024"
    case = f"{ranks} ranks, {nodes} nodes, 4 groups"
    cluster = local_cluster([{"num_cpus": 2}])
    try:
        record = simulated_record(name, ranks, nodes)
        fence = OwnerFence(name)
        fence.claim("owner", record.orphan_grace_s, record.heartbeat_interval_s, record=None)
        record.generation = fence.generation or 0
        job = Job(spec=None, owner="owner")  # type: ignore[arg-type]  # write_record reads no spec field
        job.store, job.fence, job.record = RecordStore(), fence, record
        job.hooks.events = EventLog(event_history(record.generation))
        job.write_record()  # events written once; a steady beat has none new
        size = len(record.to_json())
        events_size = len(events_to_json(job.hooks.events.events()))
        encode = Stat.of(measure(record.to_json, reps))
        steady = Stat.of(measure(job.write_record, reps))

        def beat_with_an_event() -> None:
            job.hooks.event(EventKind.WORKER_RECOVERED, "serving again 2.1s after the failure", group="actor", rank=3)
            job.write_record()

        with_event = Stat.of(measure(beat_with_an_event, reps))
        status = Stat.of(measure(lambda: render_status(collect_status(time.time(), [name])), max(5, reps // 10)))
        wide = Stat.of(measure(lambda: render_status(collect_status(time.time(), [name], ranks=True), wide=True), max(5, reps // 10)))
        doctor = Stat.of(measure(lambda: render_findings(diagnose(gather_facts(None))), max(5, reps // 10)))
        fence.retire()
        RecordStore().delete_events(name)
    finally:
        ray.shutdown()
        cluster.shutdown()
    tick = decision.run(workers=ranks, reps=reps)[0]
    return [
        Row("daemon at scale: record size", case, Stat(size, size, 1), GOALS["size"], None, unit="KiB"),
        Row("daemon at scale: event history size", "1000 events (written only when one is added)", Stat(events_size, events_size, 1), "", None, unit="KiB"),
        Row("daemon at scale: heartbeat write (record through the fence into the GCS)", case, steady, GOALS["write"], None),
        Row("  the record's JSON encoding", case, encode, "", None),
        Row("  a heartbeat that also writes the event history", case + ", 1000 events", with_event, "", None),
        Row("daemon at scale: `supervisor status` (read + render)", case, status, GOALS["status"], None),
        Row("daemon at scale: `supervisor status -o wide` (every rank)", case, wide, GOALS["status"], None),
        Row("daemon at scale: `supervisor doctor` (read + diagnose + render)", case, doctor, "", None),
        Row("daemon at scale: decision tick (decide + drift gauge)", f"{ranks} workers, 10 failures", tick.ours, "goal: median <= 10 ms", None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    print_rows(run(args.ranks, args.nodes, args.reps))


if __name__ == "__main__":
    main()
