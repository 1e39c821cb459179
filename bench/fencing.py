"""What fencing costs: a record write, and an actor kill, through the owner fence against the same
action done directly (Ray's GCS key-value put; ``ray.kill``), on one local cluster, interleaved.

    .venv/bin/python -m bench.fencing [--reps 300]

The record is the size a 64-rank job writes (two groups, every rank's status, a full failure list).
A fenced write is one call to the fence actor, which checks the generation and makes the same put;
a fenced kill is one call to it, which checks and calls ``ray.kill``. The kill is what a replacement
pays once per rank, the write what every heartbeat and every rank state change pays.
"""

from __future__ import annotations

import argparse
import time
import uuid

from .common import Row, Stat, interleave, local_cluster


def _record(name: str, generation: int, ranks: int) -> bytes:
    from supervisor.daemon.record import FailureEvent, GroupRecord, SupervisorRecord
    from supervisor.supervision.states import RankStatus

    groups = {
        g: GroupRecord(g, "p", "m:C", [f"{g}_C_{r}" for r in range(ranks // 2)], state="running", initialized=True,
                       ranks=[RankStatus(r, node_id="a" * 56, original_node="a" * 56) for r in range(ranks // 2)])
        for g in ("rollout", "reference")
    }  # fmt: skip
    failures = [FailureEvent(0.0, "rollout", i, "died", "ActorDiedError: the actor died unexpectedly") for i in range(20)]
    return SupervisorRecord(
        name, f"supervisor.{name}", "owner", 1, "h", 0.0, 0.0, 1.0, 30.0, generation=generation, groups=groups, failures=failures
    ).to_json()


def run(reps: int = 300, ranks: int = 64) -> list[Row]:
    import ray

    from supervisor.daemon.fence import OwnerFence
    from supervisor.daemon.ownership import find_owned, remove_owned
    from supervisor.daemon.record import RecordStore

    cluster = local_cluster([{"num_cpus": 2}])
    name = f"bench-fence-{uuid.uuid4().hex[:6]}"
    try:
        fence = OwnerFence(name)
        fence.claim("owner", 30.0, 1.0)
        data = _record(name, fence.generation or 0, ranks)
        store = RecordStore()
        seq = iter(range(1, 10**9))
        writes = interleave(
            {"fenced": lambda: fence.write_record(data, next(seq)), "direct": lambda: store.put_raw(name, data)}, reps
        )

        @ray.remote(num_cpus=0)
        class Target:
            def ping(self) -> None:
                pass

        def kill(how: str) -> None:
            actor = Target.remote()
            ray.get(actor.ping.remote())  # started: the kill is what is timed below
            started = time.perf_counter()
            fence.kill_actors([actor]) if how == "fenced" else ray.kill(actor, no_restart=True)
            kill_times[how].append(time.perf_counter() - started)

        kill_times: dict[str, list[float]] = {"fenced": [], "direct": []}
        for i in range(max(20, reps // 5)):
            kill("fenced" if i % 2 else "direct")
            kill("direct" if i % 2 else "fenced")
        kills = {how: Stat.of(values) for how, values in kill_times.items()}
        return [
            Row(
                "fencing: record write", f"{len(data) // 1024} KiB record ({ranks} ranks)", writes["fenced"],
                "GCS KV put", writes["direct"], unit="ms",
            ),  # fmt: skip
            Row("fencing: actor kill", "one actor (a rank's replacement)", kills["fenced"], "ray.kill", kills["direct"], unit="ms"),
        ]
    finally:
        remove_owned(name, find_owned(name))
        RecordStore().delete(name)
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    for row in run(args.reps):
        print(f"{row.benchmark} [{row.case}]: {row.ours.show()} vs {row.reference} {row.ref.show() if row.ref else ''} ({row.ratio:.2f}x)")


if __name__ == "__main__":
    main()
