"""What detection costs a call, against the design it replaced, and how fast each sees a death.

    .venv/bin/python -m bench.detection_cost [--reps 300] [--kills 10]

Our ranks are plain actors with a heartbeat thread (supervisor.core.worker.actor_heartbeat), and their deaths are
seen by a call a watcher queues and never sends (supervisor.supervision.death_watch). The design
before it held a sentinel call in a concurrency group of its own and probed in another, and any
concurrency group makes Ray run every call of the actor on a thread pool. Measured here, on one local
cluster, interleaved:

* a one-rank call on a plain actor (verl's), on the same class as our ranks run it (the heartbeat
  thread started), and on the same class with the earlier design's two concurrency groups;
* the time from SIGKILL to the failure of our death watch, against a call held in a concurrency
  group (the earlier sentinel), half of the kills landing while the rank runs a call.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from .common import Row, Stat, interleave, local_cluster, print_rows

# The earlier design's groups: one held the sentinel, one answered the probe.
EARLIER_GROUPS = {"sentinel": 1, "probe": 1}


def _rank_class() -> type:
    """The actors' class, defined here so Ray ships it by value (workers need not import bench)."""
    from supervisor.core.worker.worker_base import SupervisedEndpoints

    class Rank(SupervisedEndpoints):
        _rank = 0

        def ping(self, *_: object) -> int:
            return 1

        def busy(self, seconds: float) -> None:
            time.sleep(seconds)

        def pid(self) -> int:
            return os.getpid()

        def hold(self, seconds: float) -> None:  # the earlier sentinel
            time.sleep(seconds)

    return Rank


def run(reps: int = 300, kills: int = 10) -> list[Row]:
    import ray

    from supervisor.supervision import death_watch

    Rank = _rank_class()
    cluster = local_cluster([{"num_cpus": 2}])
    death_watch.acquire()
    try:
        plain = ray.remote(num_cpus=0)(Rank).remote()
        ours = ray.remote(num_cpus=0)(Rank).remote()
        ray.get(ours._supervisor_start_heartbeat.remote())
        grouped = ray.remote(num_cpus=0, concurrency_groups=EARLIER_GROUPS)(Rank).remote()
        ray.get([a.ping.remote() for a in (plain, ours, grouped)])
        calls = interleave({name: (lambda a=a: ray.get(a.ping.remote())) for name, a in
                            {"plain": plain, "ours": ours, "groups": grouped}.items()}, reps)  # fmt: skip

        watch_s: list[float] = []
        held_s: list[float] = []
        cls = ray.remote(num_cpus=0, concurrency_groups=EARLIER_GROUPS)(Rank)
        for i in range(kills):
            busy = i % 2 == 1  # half the kills land while the rank runs a call
            watched = cls.remote()
            pid = ray.get(watched.pid.remote())
            held = watched.hold.options(concurrency_group="sentinel").remote(600.0)
            watch = death_watch.watch(watched)
            if busy:
                watched.busy.remote(60.0)
            time.sleep(0.5)  # both armed, the busy call running
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            ray.wait([watch], timeout=30)
            watch_s.append(time.time() - killed)
            try:
                ray.get(held, timeout=30)
            except ray.exceptions.RayActorError:
                held_s.append(time.time() - killed)
        return [
            Row("detection cost", "one-rank call: our rank (heartbeat thread, no concurrency group)", calls["ours"],
                "the same class, plain (as verl runs it)", calls["plain"], goal="<= 1.02x"),
            Row("detection cost", "one-rank call: the earlier design (two concurrency groups)", calls["groups"],
                "the same class, plain", calls["plain"]),
            Row("detection cost", f"SIGKILL to failure: our death watch ({kills} kills, half busy)", Stat.of(watch_s),
                "a call held in a concurrency group (the earlier sentinel)", Stat.of(held_s)),
        ]  # fmt: skip
    finally:
        death_watch.release()
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    print_rows(run(args.reps, args.kills))


if __name__ == "__main__":
    main()
