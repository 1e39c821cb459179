"""The daemon at 1,024 ranks: the record, the heartbeat that writes it, `status`, `doctor` and a decision tick.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.daemon_scale [--ranks 1024] [--nodes 128] [--reps 100]

The job is simulated, not run: a record for an RLHF job of 1,024 ranks on 128 nodes of 8 GPUs (actor
512, rollout 256, reference 128, critic 128; one placement group per node and pool), 50 restarts in
the window, 20 recent failures and a full event history (1,000 events). What is timed is real: the
record's encoding, the heartbeat's write through the owner fence actor into the GCS of a local
cluster (`Job.write_record`, the daemon's own code), and `supervisor status` (text and `-o wide`) and
`supervisor doctor` reading it back from that cluster and rendering it. The decision tick is the
reconcile loop's pure `decide` over one 1,024-rank group with 10 failures (bench/decision.py's case).

The ranks' own heartbeats: every rank puts one small beat a second into the GCS key-value store, and
each supervising process reads its ranks' beats in one multi-get per period. Timed here: that read over
1,024 beats, and the GCS under 1,024 puts a second (paced, from threads of this process: the GCS sees
the same requests it would from 1,024 actors on 128 nodes), its CPU share against the same GCS idle
over as long, and a put's latency meanwhile.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass

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


def _process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_share(pid: int, seconds: float) -> float:
    """Share of one core process ``pid`` used over the next ``seconds``."""
    wall, cpu = time.perf_counter(), _process_cpu_s(pid)
    time.sleep(seconds)
    return (_process_cpu_s(pid) - cpu) / (time.perf_counter() - wall)


@dataclass(frozen=True)
class BeatLoad:
    read: Stat  # one multi-get of every rank's beat
    put: Stat  # one beat's put while the GCS takes every rank's
    gcs_busy: float  # the GCS's share of a core under the beats
    gcs_idle: float  # and without them
    rate: float  # beats a second achieved


def beat_load(gcs_pid: int, ranks: int, seconds: float, reps: int, senders: int = 8) -> BeatLoad:
    """The GCS side of ``ranks`` ranks' heartbeats (see the module's docstring)."""
    from ray.experimental import internal_kv

    from supervisor.core.worker.actor_heartbeat import (
        HEARTBEAT_NAMESPACE,
        HEARTBEAT_PERIOD_S,
        Beat,
        clear_beats,
        read_beats,
    )

    gcs, namespace = internal_kv.internal_kv_get_gcs_client(), HEARTBEAT_NAMESPACE.encode()
    ids = [f"{i:032x}" for i in range(1, ranks + 1)]  # an actor id's length
    node = f"{1:056x}"

    def put(actor_id: str, seq: int) -> None:
        gcs.internal_kv_put(actor_id.encode(), Beat(seq, node, 4242, int(actor_id, 16)).encode(), True, namespace)

    for actor_id in ids:
        put(actor_id, 1)
    read = Stat.of(measure(lambda: read_beats(ids), reps))
    idle = _cpu_share(gcs_pid, seconds)
    latencies: list[float] = []
    sent = [0] * senders
    stop = threading.Event()

    def send(index: int) -> None:
        # Each sender's share of the ranks, spread over a period, as ranks that started at random times.
        mine = ids[index::senders]
        gap = HEARTBEAT_PERIOD_S / len(mine)
        started, seq = time.perf_counter(), 1
        while not stop.is_set():
            seq += 1
            for i, actor_id in enumerate(mine):
                due = started + (seq - 2) * HEARTBEAT_PERIOD_S + i * gap
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
                if stop.is_set():
                    return
                t = time.perf_counter()
                put(actor_id, seq)
                latencies.append(time.perf_counter() - t)
                sent[index] += 1

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(senders)]
    for t in threads:
        t.start()
    time.sleep(HEARTBEAT_PERIOD_S)  # every sender in its stride
    before, wall = sum(sent), time.perf_counter()
    busy = _cpu_share(gcs_pid, seconds)
    rate = (sum(sent) - before) / (time.perf_counter() - wall)
    stop.set()
    for t in threads:
        t.join()
    clear_beats(ids)
    return BeatLoad(read, Stat.of(latencies), busy, idle, rate)


def run(ranks: int = 1024, nodes: int = 128, reps: int = 100, load_s: float = 10.0) -> list[Row]:
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
        beats = beat_load(cluster.head_node.all_processes["gcs_server"][0].process.pid, ranks, load_s, reps)
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
        Row("daemon at scale: reading every rank's beat (one GCS multi-get)", f"{ranks} beats", beats.read, "", None),
        Row(
            "daemon at scale: the GCS's CPU under every rank's beats (share of one core)",
            f"{beats.rate:.0f} beats/s over {load_s:g} s; the same GCS idle: {beats.gcs_idle * 100:.2f} %",
            Stat(beats.gcs_busy, beats.gcs_busy, 1), "", None, unit="%",
        ),  # fmt: skip
        Row("  a beat's put meanwhile", f"{beats.rate:.0f} beats/s", beats.put, "", None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--load-s", type=float, default=10.0, help="how long the GCS's CPU is measured, idle and under the beats")
    args = parser.parse_args()
    print_rows(run(args.ranks, args.nodes, args.reps, args.load_s))


if __name__ == "__main__":
    main()
