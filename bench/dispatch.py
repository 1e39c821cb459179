"""Dispatch overhead: a blocking no-op ONE_TO_ALL group call, against raw Ray on the same actors and
against verl's RayWorkerGroup on the same worker class.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.dispatch [--reps 300] [--budget-s 5]

Raw Ray is ``ray.get([a.noop.remote() for a in actors])`` on the group's own actors. verl's group runs
the same class (verl's ``Worker`` and ``register``) on a second set of actors in the same cluster; the
four (ours, raw on ours, verl, raw on verl's) are timed in alternating blocks. A no-op call is mostly
Ray's submit and wait, which vary by a few per cent from block to block; the last row of each case
takes Ray out (stand-ins whose ``.remote()`` returns at once) and times each layer's own Python.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .common import Row, Stat, ensure_verl, interleave, local_cluster, reps_for

ONE_NODE = [{"num_cpus": 72, "num_gpus": 72}]
# Four 4-GPU nodes: a [4, 4] pool must span two of them, and the second group gets the other two.
FOUR_NODES = [{"num_cpus": 8, "num_gpus": 4}] * 4
CASES = [("1 rank", [1], ONE_NODE), ("8 ranks", [8], ONE_NODE), ("32 ranks", [32], ONE_NODE), ("8 ranks on 2 nodes", [4, 4], FOUR_NODES)]


@dataclass
class _Group:
    """One group under test: its bound no-op call, its actors and its list of them (the one its
    execute path reads), and how to remove it."""

    call: Callable[[], Any]
    actors: list[Any]
    workers: list[Any]
    cleanup: Callable[[], None]


def _ours(layout: list[int]) -> _Group:
    """Our group of no-op workers."""
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

    return _Group(group.noop, list(group.workers), group.workers, cleanup)


def _verl(layout: list[int]) -> _Group:
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

    return _Group(group.noop, actors, group._workers, cleanup)


class _ReturnsAtOnce:
    """In place of an actor and its methods: ``.remote()`` submits nothing."""

    def __getattr__(self, name: str) -> Any:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextlib.contextmanager
def _without_ray(groups: list[_Group]) -> Iterator[None]:
    """Submission and wait that cost nothing, so what a timed call costs is the dispatch layer's own
    Python in the driver (dispatch, execute loop, collect, and for ours the duration histogram)."""
    import ray

    saved_workers = [list(g.workers) for g in groups]
    real_get = ray.get
    ours_get = {id(g): g.call.__dict__.get("_ray_get") for g in groups}
    try:
        for g in groups:
            g.workers[:] = [_ReturnsAtOnce() for _ in g.workers]
            if ours_get[id(g)] is not None:
                g.call._ray_get = _identity  # type: ignore[attr-defined]  # ours looks ray.get up once
        ray.get = _identity  # verl calls ray.get through the module
        yield
    finally:
        ray.get = real_get
        for g, workers in zip(groups, saved_workers, strict=True):
            g.workers[:] = workers
            if ours_get[id(g)] is not None:
                g.call._ray_get = ours_get[id(g)]  # type: ignore[attr-defined]


def _identity(value: Any, **_: Any) -> Any:
    return value


def _layer_cost(ours: _Group, verl: _Group, reps: int) -> dict[str, Stat]:
    """Per-call driver-side cost of each layer (seconds), with Ray taken out (see :func:`_without_ray`)."""
    batch = 100  # calls per timing: one call is a few microseconds, near the clock's own cost

    def batched(call: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(batch):
                call()

        return run

    with _without_ray([ours, verl]):
        times = interleave({"ours": batched(ours.call), "verl": batched(verl.call)}, reps, block=20)
    return {name: Stat(t.median / batch, t.p95 / batch, t.n * batch) for name, t in times.items()}


def run(reps: int = 300, budget_s: float = 5.0) -> list[Row]:
    """Each case times every call for about ``budget_s`` (and at least ``reps`` times)."""
    import ray

    ensure_verl()  # before any cluster starts: its worker processes import verl from the same path
    rows: list[Row] = []
    for case, layout, nodes in CASES:
        cluster = local_cluster(nodes)
        groups: list[_Group] = []
        try:
            ours = _ours(layout)
            groups.append(ours)
            verl = _verl(layout)
            groups.append(verl)
            case_reps = reps_for(ours.call, budget_s, least=reps)
            # Both groups live in the same cluster and are timed in alternating blocks: what differs
            # between them is the dispatch layer, not the machine's state at the time.
            times = interleave(
                {
                    "ours": ours.call,
                    "raw": lambda: ray.get([a.noop.remote() for a in ours.actors]),  # noqa: B023 - called in this iteration
                    "verl": verl.call,
                    "verl raw": lambda: ray.get([a.noop.remote() for a in verl.actors]),  # noqa: B023
                },
                case_reps,
            )
            layer = _layer_cost(ours, verl, reps)
        finally:
            for group in groups:
                group.cleanup()
            ray.shutdown()
            cluster.shutdown()
        case_n = f"{case} ({case_reps} calls each)"
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case_n, times["ours"], "raw Ray", times["raw"], "<= 1.10x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case_n, times["ours"], "verl", times["verl"], "<= 1.0x"))
        rows.append(Row("dispatch (no-op ONE_TO_ALL, blocking)", case_n, times["verl"], "raw Ray on verl's actors (verl's own overhead)", times["verl raw"]))
        # The same raw call on both kinds of actor: what supervision (the heartbeat thread; no
        # concurrency group) costs per call on the actor's side, apart from any dispatch layer.
        rows.append(Row("  actor side: raw Ray on our actors", case_n, times["raw"], "raw Ray on verl's plain actors", times["verl raw"]))
        # The driver side alone, without Ray's noise: what each layer's Python costs a call.
        rows.append(Row("  driver side: the layer's Python, Ray taken out", case, layer["ours"], "verl's", layer["verl"], "<= 1.0x", unit="us"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--budget-s", type=float, default=5.0, help="seconds of calls per function and case")
    args = parser.parse_args()
    for row in run(args.reps, args.budget_s):
        print(f"{row.case:22s} {row.ours.show()}  vs {row.reference}: {row.ref.show() if row.ref else '-'}  ratio {row.ratio:.2f}x")


if __name__ == "__main__":
    main()
