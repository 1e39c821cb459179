"""Scale: create_group + init_group of 64 light workers on 4 local nodes against raw Ray creating the
same actors in the same placement groups; and what supervising 32 idle workers costs this process
(CPU, as a share of one core, and memory).

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.scale [--rounds 2] [--idle-s 30]

Raw Ray reserves one STRICT_PACK placement group per node, creates one actor per bundle with the same
environment variables, and calls ``init_model`` on all of them. The two are run in alternating rounds.
Supervision cost is this process's CPU time over ``--idle-s`` seconds with a GroupSupervisor running,
minus the same interval with the group but no supervisor (Ray's own driver threads).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from .common import Row, Stat, local_cluster

NODES, PER_NODE = 4, 16


def _worker_class() -> Any:
    from supervisor import Dispatch, Worker, register

    class LightWorker(Worker):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def init_model(self) -> int:
            return self.rank

    return LightWorker


def _ours(cls: Any) -> float:
    from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group

    started = time.perf_counter()
    pool = ResourcePool([PER_NODE] * NODES, use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(cls))
    init_group(group, "init_model")
    elapsed = time.perf_counter() - started
    group.kill()
    pool.teardown()
    return elapsed


def _raw(cls: Any) -> float:
    import ray
    from ray.util import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    started = time.perf_counter()
    pgs = [placement_group([{"CPU": 1}] * PER_NODE, strategy="STRICT_PACK") for _ in range(NODES)]
    ray.get([pg.ready() for pg in pgs])
    remote = ray.remote(cls)
    actors = []
    for n, pg in enumerate(pgs):
        for b in range(PER_NODE):
            rank = n * PER_NODE + b
            env = {"RANK": str(rank), "WORLD_SIZE": str(NODES * PER_NODE), "LOCAL_RANK": str(b), "LOCAL_WORLD_SIZE": str(PER_NODE),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b)
            actors.append(remote.options(num_cpus=1, scheduling_strategy=strategy, runtime_env={"env_vars": env}).remote())
    ray.get([a.init_model.remote() for a in actors])
    elapsed = time.perf_counter() - started
    for a in actors:
        ray.kill(a)
    for pg in pgs:
        remove_placement_group(pg)
    return elapsed


def _cpu_and_memory(cls: Any, idle_s: float, world: int = 32) -> tuple[float, float, float]:
    """(supervised CPU share, unsupervised CPU share, RSS growth in MiB) of this process."""
    from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
    from supervisor.supervision import GroupSupervisor, SupervisionConfig

    pool = ResourcePool([world // 2, world // 2], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(cls))
    init_group(group, "init_model")
    try:
        time.sleep(2)
        base = _cpu_share(idle_s)
        rss_before = _rss_mib()
        sup = GroupSupervisor(group, SupervisionConfig(init_method="init_model")).start()
        time.sleep(2)  # the first probes and sentinels
        supervised = _cpu_share(idle_s)
        rss_after = _rss_mib()
        sup.stop()
    finally:
        group.kill()
        pool.teardown()
    return supervised, base, rss_after - rss_before


def _cpu_share(seconds: float) -> float:
    wall, cpu = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def run(rounds: int = 2, idle_s: float = 30.0) -> list[Row]:
    import ray

    cluster = local_cluster([{"num_cpus": PER_NODE + 2}] + [{"num_cpus": PER_NODE}] * (NODES - 1))
    cls = _worker_class()
    ours: list[float] = []
    raw: list[float] = []
    try:
        _raw(cls)  # warm-up: worker processes' first imports
        for i in range(rounds):
            for fn, out in ((_ours, ours), (_raw, raw)) if i % 2 == 0 else ((_raw, raw), (_ours, ours)):
                out.append(fn(cls))
        supervised, base, rss = _cpu_and_memory(cls, idle_s)
    finally:
        ray.shutdown()
        cluster.shutdown()
    case = f"{NODES * PER_NODE} workers on {NODES} nodes"
    return [
        Row("create_group + init_group", case, Stat.of(ours), "raw Ray (placement groups, actors, init call)", Stat.of(raw), "", unit="s"),
        Row(
            "supervising 32 idle workers: CPU of one core", f"the supervising process over {idle_s:g}s: {supervised * 100:.2f}% in all, "
            f"{base * 100:.2f}% when the same process does not supervise; memory +{rss:.1f} MiB RSS",
            Stat(supervised - base, supervised - base, 1), "goal: < 2% of one core (the supervisor's share)", None, unit="%",
        ),  # fmt: skip
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=30.0)
    args = parser.parse_args()
    for row in run(args.rounds, args.idle_s):
        ratio = f"  {row.ratio:.2f}x {row.reference}" if row.ratio else f"  {row.reference}"
        print(f"{row.benchmark}, {row.case}: {row.ours.show('s')}{ratio}")


if __name__ == "__main__":
    main()
