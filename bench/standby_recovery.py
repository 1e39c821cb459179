"""Recovery time of a killed rank with a pre-started standby against without, in one run.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.standby_recovery [--kills 10] [--world 4] [--start-s 0]

Two supervised groups of the same worker class run side by side on one local node: one without spare
capacity, one in a pool with ``capacity_factor = 1 + 1/world`` (one spare bundle) and ``standbys = 1``.
The worker's constructor imports torch (what verl-style workers pay at start) and sleeps ``--start-s``
more (model code, CUDA context). Kills alternate between the groups; each one is a SIGKILL of a
non-zero rank's process, and recovery is the time from the kill until a call over every rank of the
group returns again (the supervisor detects, replaces, re-runs the init method, and the call is
retried). Before each kill of the standby group its standby is ready again (replenished).

Then fresh replacements (``replace_worker``, what a rank gets when no standby takes over) of two
more groups, interleaved: one whose ranks are forked from a zygote that imported torch, one whose
ranks start as plain processes.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray

from supervisor import (
    ClassWithInitArgs,
    Dispatch,
    ResourcePool,
    Worker,
    WorkerGroup,
    create_group,
    init_group,
    register,
)
from supervisor.core.worker.actor_heartbeat import wait_for_beat
from supervisor.daemon.local_cluster import LocalCluster
from supervisor.supervision import GroupSupervisor, SupervisionConfig
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.restart_policy import RestartPolicy

from .common import Row, Stat


class TorchWorker(Worker):
    """Pays torch's import (and ``start_s``) in its constructor; rank-dependent setup is ``init_model``."""

    def __init__(self, start_s: float = 0.0) -> None:
        super().__init__()
        import torch  # noqa: F401 - the start cost being measured

        time.sleep(start_s)
        self.model_rank = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        self.model_rank = self.rank
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def ping(self) -> int:
        return self.model_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def parent_pid(self) -> int:
        return os.getppid()


def supervised(world: int, start_s: float, standbys: int) -> tuple[ResourcePool, GroupSupervisor]:
    pool = ResourcePool([world], use_gpu=False, max_colocate_count=1, capacity_factor=1 + standbys / world)
    group = create_group(pool, ClassWithInitArgs(TorchWorker, start_s=start_s))
    init_group(group, "init_model")
    config = SupervisionConfig(
        restart=RestartPolicy(max_restarts=10_000),
        init_method="init_model",
        init_policy=InitPolicy(timeout_s=60),
        probe_period_s=5.0,
        standbys=standbys,
        standby_check_s=0.2,
    )
    return pool, GroupSupervisor(group, config).start()


def kill_and_time(sup: GroupSupervisor, rank: int) -> float:
    group = sup.group
    pid = wait_for_beat(group.workers[rank]).pid
    killed = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    assert group.ping() == list(range(group.world_size))
    return time.perf_counter() - killed


def wait_standby_ready(sup: GroupSupervisor, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while sup.standby_counts() != (1, 0):
        if time.monotonic() > deadline:
            raise TimeoutError("the standby was not replenished")
        time.sleep(0.05)


def replace_and_time(group: WorkerGroup, rank: int) -> float:
    """A fresh replacement of ``rank`` (kill, new actor in its bundle, init) until the group serves."""
    started = time.perf_counter()
    group.replace_worker(rank)
    group.init_model()
    assert group.ping() == list(range(group.world_size))
    return time.perf_counter() - started


def fresh_replacements(kills: int, world: int, start_s: float) -> Row:
    """Fresh replacements (no standby taking over) of two unsupervised groups, interleaved: ranks
    forked from a zygote that imported torch (started, as in a job, by a standby with that preload)
    against ranks started as plain processes."""
    pools: list[ResourcePool] = []
    groups: list[WorkerGroup] = []
    try:
        for capacity_factor in (1.0, 1 + 1 / world):
            pools.append(ResourcePool([world], use_gpu=False, max_colocate_count=1, capacity_factor=capacity_factor))
            groups.append(create_group(pools[-1], ClassWithInitArgs(TorchWorker, start_s=start_s)))
            init_group(groups[-1], "init_model")
        plain, forked = groups
        spare = next(b for b in forked.all_bundles() if b not in forked.rank_bundles)
        placed = forked.placed_bundles()
        (standby,) = forked.start_standbys([spare], preload=("torch",), nodes=placed)
        wait_for_beat(standby.handle, timeout_s=120)  # its start (plain: the zygote was not ready) is not timed
        node = placed[forked.rank_bundles[0]]
        deadline = time.monotonic() + 120
        while (zygote := forked.zygotes.launcher(node)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("the zygote did not start")
            time.sleep(0.05)
        times: dict[str, list[float]] = {"plain": [], "forked": []}
        for i in range(kills):
            rank = 1 + i % (world - 1)
            for how in ("plain", "forked") if i % 2 else ("forked", "plain"):
                times[how].append(replace_and_time(plain if how == "plain" else forked, rank))
                time.sleep(0.5)
            if forked.parent_pid()[rank] != zygote.pid:
                raise RuntimeError(f"rank {rank}'s replacement was not forked from the zygote")
    finally:
        for group in groups:
            group.kill()
        for pool in pools:
            pool.teardown()
    case = f"{kills} replacements each, world size {world}, constructor imports torch" + (f" + {start_s:g}s" if start_s else "")
    return Row("fresh replacement (replace_worker -> group serving)", case + ", forked from a zygote", Stat.of(times["forked"]), "started as a plain process", Stat.of(times["plain"]), "< 1.0x")


def run(kills: int = 10, world: int = 4, start_s: float = 0.0) -> list[Row]:
    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 2 * world + 4, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        plain_pool, plain = supervised(world, start_s, standbys=0)
        spare_pool, spare = supervised(world, start_s, standbys=1)
        without: list[float] = []
        with_standby: list[float] = []
        for i in range(kills):
            rank = 1 + i % (world - 1)  # rank 0 would also re-run every rank's init (rendezvous rule)
            without.append(kill_and_time(plain, rank))
            wait_standby_ready(spare)
            time.sleep(0.5)  # let the replenished standby's process settle, as it would in a long run
            with_standby.append(kill_and_time(spare, rank))
        wait_standby_ready(spare)
        for pool, sup in ((plain_pool, plain), (spare_pool, spare)):
            sup.stop()
            sup.group.kill()
            pool.teardown()
        fresh = fresh_replacements(kills, world, start_s)
    finally:
        ray.shutdown()
        cluster.shutdown()
    case = f"{kills} SIGKILLs, world size {world}, constructor imports torch" + (f" + {start_s:g}s" if start_s else "")
    return [Row("recovery with a standby (kill -> group serving)", case, Stat.of(with_standby), "without a standby", Stat.of(without), "< 1.0x"), fresh]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10, help="kills per group")
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--start-s", type=float, default=0.0, help="constructor time on top of importing torch")
    args = parser.parse_args()
    standby, fresh = run(args.kills, args.world, args.start_s)
    print(f"{standby.case}: with a standby {standby.ours.show()}, without {standby.ref.show()}; with / without (medians) {standby.ratio:.2f}x")
    print(f"{fresh.case}: {fresh.ours.show()}, plain {fresh.ref.show()}; forked / plain (medians) {fresh.ratio:.2f}x")


if __name__ == "__main__":
    main()
