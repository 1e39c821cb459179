"""Dispatch overhead: a blocking no-op ONE_TO_ALL group call, against raw Ray on the same actors and
against verl's RayWorkerGroup on the same worker class.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.dispatch [--reps 300]

Raw Ray is ``ray.get([a.noop.remote() for a in actors])`` on the group's own actors, timed in
alternating blocks with the group call. verl's group runs the same class (verl's ``Worker`` and
``register``) on a second set of actors, after ours are gone; its own raw-Ray time is measured too, as
a check that both sets of actors cost the same.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import Row, Stat, ensure_verl, interleave, local_cluster

ONE_NODE = [{"num_cpus": 40, "num_gpus": 40}]
TWO_NODES = [{"num_cpus": 8, "num_gpus": 4}, {"num_cpus": 8, "num_gpus": 4}]  # a [4, 4] pool must use both
CASES = [("1 rank", [1], ONE_NODE), ("8 ranks", [8], ONE_NODE), ("32 ranks", [32], ONE_NODE), ("8 ranks on 2 nodes", [4, 4], TWO_NODES)]


def _ours(layout: list[int], reps: int) -> tuple[Stat, Stat]:
    import ray

    from supervisor import ClassWithInitArgs, Dispatch, ResourcePool, Worker, create_group, register

    class NoopWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def noop(self) -> None:
            return None

    pool = ResourcePool(layout, use_gpu=True, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(NoopWorker))
    try:
        actors = group.workers
        times = interleave({"ours": group.noop, "raw": lambda: ray.get([a.noop.remote() for a in actors])}, reps)
    finally:
        group.kill()
        pool.teardown()
    return times["ours"], times["raw"]


def _verl(layout: list[int], reps: int) -> tuple[Stat, Stat]:
    ensure_verl()
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
    actors: list[Any] = group.workers
    try:
        ray.get([a.noop.remote() for a in actors])  # constructed
        times = interleave({"verl": group.noop, "raw": lambda: ray.get([a.noop.remote() for a in actors])}, reps)
    finally:
        for actor in actors:
            ray.kill(actor)
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)
    return times["verl"], times["raw"]


def run(reps: int = 300) -> list[Row]:
    import ray

    ensure_verl()  # before any cluster starts: its worker processes import verl from the same path
    rows: list[Row] = []
    for case, layout, nodes in CASES:
        cluster = local_cluster(nodes)
        try:
            ours, raw = _ours(layout, reps)
            verl, verl_raw = _verl(layout, reps)
        finally:
            ray.shutdown()
            cluster.shutdown()
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, ours, "raw Ray", raw, "<= 1.10x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, ours, "verl", verl, "< 1.0x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case, verl, "raw Ray on verl's actors (check)", verl_raw))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=300)
    args = parser.parse_args()
    for row in run(args.reps):
        print(f"{row.case:22s} {row.ours.show()}  vs {row.reference}: {row.ref.show() if row.ref else '-'}  ratio {row.ratio:.2f}x")


if __name__ == "__main__":
    main()
