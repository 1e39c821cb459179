"""What detection costs a call, and what a design without concurrency groups would cost instead.

    .venv/bin/python -m bench.detection_cost [--reps 300] [--kills 10]

Our ranks carry two concurrency groups (the sentinel's and the probe's), so Ray runs every call of theirs
on a thread, not on the actor's main thread as verl's plain actors do. Measured here, on one local
cluster, interleaved:

* a one-rank call on a plain actor, on the same class with our two groups, and on a plain actor whose
  background thread long-polls another actor every second (the heartbeat of a design without groups);
* the time from SIGKILL to the failure of our sentinel (a call held in its group), against the failure
  of a call queued by a third actor and never sent, its argument an object that actor never produces
  (how such a design would see a death without running anything on the rank).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
import time

from .common import Row, Stat, interleave, local_cluster, print_rows


def _classes() -> tuple[type, type, type]:
    """The actors' classes, defined here so Ray ships them by value (workers need not import bench)."""

    class _Rank:
        def ping(self, *_: object) -> int:
            return 1

        def busy(self, seconds: float) -> None:
            time.sleep(seconds)

        def pid(self) -> int:
            return os.getpid()

    class _BeatingRank(_Rank):
        def __init__(self, hub: object) -> None:
            def beat() -> None:
                import ray

                while True:
                    ray.get(hub.poll.remote(1.0))  # type: ignore[attr-defined]

            threading.Thread(target=beat, daemon=True).start()

    class _Hub:
        """Answers each poll after ``wait_s`` (a heartbeat's long poll), and queues never-sent calls."""

        def __init__(self) -> None:
            self._never = asyncio.Event()

        async def poll(self, wait_s: float) -> None:
            await asyncio.sleep(wait_s)

        async def hold(self) -> None:
            await self._never.wait()

        async def watch(self, handle: object, me: object) -> float:
            try:
                await handle.ping.remote(me.hold.remote())  # type: ignore[attr-defined]
            except Exception:
                return time.time()
            return float("nan")

    return _Rank, _BeatingRank, _Hub


def run(reps: int = 300, kills: int = 10) -> list[Row]:
    import ray

    from supervisor.core.worker import SUPERVISION_CONCURRENCY_GROUPS, SupervisedEndpoints, arm_sentinel

    _Rank, _BeatingRank, _Hub = _classes()

    class SentinelRank(_Rank, SupervisedEndpoints):  # type: ignore[valid-type,misc]  # our sentinel, as our ranks have it
        pass

    cluster = local_cluster([{"num_cpus": 2}])
    try:
        hub = ray.remote(num_cpus=0, max_concurrency=1000)(_Hub).remote()
        plain = ray.remote(num_cpus=0)(_Rank).remote()
        grouped = ray.remote(num_cpus=0, concurrency_groups=SUPERVISION_CONCURRENCY_GROUPS)(_Rank).remote()
        beating = ray.remote(num_cpus=0)(_BeatingRank).remote(hub)
        ray.get([a.ping.remote() for a in (plain, grouped, beating)])
        calls = interleave({name: (lambda a=a: ray.get(a.ping.remote())) for name, a in
                            {"plain": plain, "groups": grouped, "beating": beating}.items()}, reps)  # fmt: skip

        sentinel_s: list[float] = []
        queued_s: list[float] = []
        sentinel_cls = ray.remote(num_cpus=0, concurrency_groups=SUPERVISION_CONCURRENCY_GROUPS)(SentinelRank)
        for i in range(kills):
            busy = i % 2 == 1  # half the kills land while the rank runs a call
            watched = sentinel_cls.remote()
            pid = ray.get(watched.pid.remote())
            sentinel = arm_sentinel(watched, 600.0)
            queued = hub.watch.remote(watched, hub)
            if busy:
                watched.busy.remote(60.0)
            time.sleep(0.5)  # both armed, the busy call running
            killed = time.time()
            os.kill(pid, signal.SIGKILL)
            try:
                ray.get(sentinel, timeout=30)
            except ray.exceptions.RayActorError:
                sentinel_s.append(time.time() - killed)
            queued_s.append(ray.get(queued, timeout=30) - killed)
        return [
            Row("detection cost", "one-rank call: our two concurrency groups", calls["groups"], "the same class, plain", calls["plain"]),
            Row("detection cost", "one-rank call: plain + a heartbeat thread (1 s)", calls["beating"], "the same class, plain", calls["plain"]),
            Row("detection cost", f"SIGKILL to failure, a call queued never sent ({kills} kills, half busy)", Stat.of(queued_s),
                "our sentinel", Stat.of(sentinel_s)),
        ]  # fmt: skip
    finally:
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
