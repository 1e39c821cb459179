"""Detection and recovery time of a supervised group, over repeated SIGKILLs of one rank.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.recovery [--kills 20] [--world 4]

For each kill: detection = Ray's recorded death time (GCS) to the supervisor noticing it; recovery =
death to the replacement serving calls again (init method re-run included). Also measures the floor:
creating a fresh actor of the same class into the same bundle and calling it. Prints median, p95, max.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from supervisor import ClassWithInitArgs, Dispatch, ResourcePool, Worker, create_group, init_group, register
from supervisor.core.worker.actor_heartbeat import wait_for_beat
from supervisor.daemon.local_cluster import LocalCluster
from supervisor.observability.hooks import ObservingHooks
from supervisor.supervision import GroupSupervisor, SupervisionConfig
from supervisor.supervision.init_policy import InitPolicy
from supervisor.supervision.restart_policy import RestartPolicy

from .common import Row, Stat


class BenchWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        return self.rank

    def ping(self) -> int:
        return self.rank


class Timings(ObservingHooks):
    def __init__(self) -> None:
        self.detection: list[float] = []
        self.recovery: list[float] = []
        self.detected_at: list[float] = []

    def on_worker_failed(self, group, rank, reason, detail, detection_s):
        super().on_worker_failed(group, rank, reason, detail, detection_s)
        self.detected_at.append(time.perf_counter())
        if detection_s is not None:
            self.detection.append(detection_s)

    def on_worker_recovered(self, group, rank, recovery_s):
        super().on_worker_recovered(group, rank, recovery_s)
        if recovery_s is not None:
            self.recovery.append(recovery_s)


def run(kills: int = 20, world: int = 4) -> list[Row]:
    """Detection and recovery over ``kills`` SIGKILLs of non-zero ranks, and the floor, in one run."""
    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 16, "num_gpus": 4, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        pool = ResourcePool([world], use_gpu=False, max_colocate_count=2)
        group = create_group(pool, ClassWithInitArgs(BenchWorker))
        init_group(group, "init_model")
        hooks = Timings()
        config = SupervisionConfig(
            restart=RestartPolicy(max_restarts=10_000),
            init_method="init_model",
            init_policy=InitPolicy(timeout_s=60),
            probe_period_s=5.0,
        )
        sup = GroupSupervisor(group, config, hooks=hooks).start()
        # Floor: a fresh actor of the same class into a free slot of the same bundle, called once.
        floor = []
        remote_cls = ray.remote(BenchWorker)
        for _ in range(kills):
            env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
            started = time.perf_counter()
            actor = remote_cls.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(pool.pgs[0], placement_group_bundle_index=1),
                runtime_env={"env_vars": env},
            ).remote()
            ray.get(actor.ping.remote())
            floor.append(time.perf_counter() - started)
            ray.kill(actor)
        killed_at: list[float] = []
        for i in range(kills):
            rank = 1 + i % (world - 1)  # rank 0 would also re-run every rank's init (rendezvous rule)
            generation = sup.generation(rank)
            pid = wait_for_beat(group.workers[rank]).pid
            killed_at.append(time.perf_counter())
            os.kill(pid, signal.SIGKILL)
            while sup.generation(rank) == generation:
                time.sleep(0.005)
            ray.get(group.workers[rank].ping.remote())
            time.sleep(0.5)
        sup.stop()
        group.kill()
        pool.teardown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    case = f"{kills} SIGKILLs, world size {world}, one node"
    detected = Stat.of([d - k for k, d in zip(killed_at, hooks.detected_at, strict=True)])
    return [
        Row("recovery (death -> replacement serving)", case, Stat.of(hooks.recovery), "floor: new actor in the bundle + call", Stat.of(floor), "<= 1.30x"),
        Row("detection (SIGKILL -> supervisor notices)", case, detected, "goal: p95 <= 1 s", None),
        Row("detection (GCS death record -> supervisor notices)", case, Stat.of(hooks.detection), "", None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--world", type=int, default=4)
    args = parser.parse_args()
    for row in run(args.kills, args.world):
        ratio = f"  {row.ratio:.2f}x {row.reference}" if row.ratio else ""
        print(f"{row.benchmark}: {row.ours.show()}{ratio}")


if __name__ == "__main__":
    main()
