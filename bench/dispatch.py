"""Dispatch overhead: a blocking no-op ONE_TO_ALL group call, against raw Ray on the same actors and
against verl's RayWorkerGroup on the same worker class.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.dispatch [--reps 300]

Raw Ray is ``ray.get([a.noop.remote() for a in actors])`` on the group's own actors. verl's group runs
the same class (verl's ``Worker`` and ``register``) on a second set of actors in the same cluster; the
four (ours, raw on ours, verl, raw on verl's) are timed in alternating blocks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .common import Row, ensure_verl, interleave, local_cluster

ONE_NODE = [{"num_cpus": 72, "num_gpus": 72}]
# Four 4-GPU nodes: a [4, 4] pool must span two of them, and the second group gets the other two.
FOUR_NODES = [{"num_cpus": 8, "num_gpus": 4}] * 4
CASES = [("1 rank", [1], ONE_NODE), ("8 ranks", [8], ONE_NODE), ("32 ranks", [32], ONE_NODE), ("8 ranks on 2 nodes", [4, 4], FOUR_NODES)]


def _ours(layout: list[int]) -> tuple[Callable[[], Any], list[Any], Callable[[], None]]:
    """Our group of no-op workers: (the group call, its actors, cleanup)."""
    from supervisor import ClassWithInitArgs, Dispatch, ResourcePool, Worker, create_group, register

    class NoopWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def noop(self) -> None:
            return None

    pool = ResourcePool(layout, use_gpu=True, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(NoopWorker))

    def cleanup() -> None:
        group.kill()
        pool.teardown()

    return group.noop, list(group.workers), cleanup


def _verl(layout: list[int]) -> tuple[Callable[[], Any], list[Any], Callable[[], None]]:
    """verl's RayWorkerGroup of the same no-op class (verl's Worker and register)."""
    import ray
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    class VerlNoopWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def noop(self) -> None:
            return None

    pool = RayResourcePool(layout, use_gpu=True, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(VerlNoopWorker)))
    actors: list[Any] = list(group.workers)
    ray.get([a.noop.remote() for a in actors])  # constructed

    def cleanup() -> None:
        for actor in actors:
            ray.kill(actor)
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)

    return group.noop, actors, cleanup


def run(reps: int = 300) -> list[Row]:
    import ray

    ensure_verl()  # before any cluster starts: its worker processes import verl from the same path
    rows: list[Row] = []
    for case, layout, nodes in CASES:
        cluster = local_cluster(nodes)
        cleanups: list[Callable[[], None]] = []
        try:
            ours, our_actors, cleanup = _ours(layout)
            cleanups.append(cleanup)
            verl, verl_actors, cleanup = _verl(layout)
            cleanups.append(cleanup)
            # Both groups live in the same cluster and are timed in alternating blocks: what differs
            # between them is the dispatch layer, not the machine's state at the time.
            times = interleave(
                {
                    "ours": ours,
                    "raw": lambda: ray.get([a.noop.remote() for a in our_actors]),  # noqa: B023 - called in this iteration
                    "verl": verl,
                    "verl raw": lambda: ray.get([a.noop.remote() for a in verl_actors]),  # noqa: B023
                },
                reps,
            )
        finally:
            for cleanup in cleanups:
                cleanup()
            ray.shutdown()
            cluster.shutdown()
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, times["ours"], "raw Ray", times["raw"], "<= 1.10x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, times["ours"], "verl", times["verl"], "<= 1.0x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, times["verl"], "raw Ray on verl's actors (verl's own overhead)", times["verl raw"]))
        # The same raw call on both kinds of actor: what supervision (the heartbeat thread; no
        # concurrency group) costs per call on the actor's side, apart from any dispatch layer.
        rows.append(Row("  actor side: raw Ray on our actors", case, times["raw"], "raw Ray on verl's plain actors", times["verl raw"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    for row in run(args.reps):
        print(f"{row.case:22s} {row.ours.show()}  vs {row.reference}: {row.ref.show() if row.ref else '-'}  ratio {row.ratio:.2f}x")


if __name__ == "__main__":
    main()
