"""Detection and recovery time of a supervised group, over repeated SIGKILLs of one rank.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python bench/recovery.py [--kills 20] [--world 4]

For each kill: detection = Ray's recorded death time (GCS) to the supervisor noticing it; recovery =
death to the replacement serving calls again (init method re-run included). Also measures the floor:
creating a fresh actor of the same class into the same bundle and calling it. Prints median, p95, max.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from supervisor import ClassWithInitArgs, Dispatch, ResourcePool, Worker, create_group, init_group, register
from supervisor.hooks import ObservingHooks
from supervisor.init_policy import InitPolicy
from supervisor.restart_policy import RestartPolicy
from supervisor.supervision import GroupSupervisor, SupervisionConfig
from supervisor.worker import send_probe


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


def stats(values: list[float]) -> str:
    v = sorted(values)
    p95 = v[min(len(v) - 1, int(round(0.95 * (len(v) - 1))))]
    return f"median {statistics.median(v) * 1e3:7.1f} ms   p95 {p95 * 1e3:7.1f} ms   max {v[-1] * 1e3:7.1f} ms   (n={len(v)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--world", type=int, default=4)
    args = parser.parse_args()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 16, "num_gpus": 4, "include_dashboard": False})
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        pool = ResourcePool([args.world], use_gpu=False, max_colocate_count=2)
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
        # Floor: a fresh actor of the same class into a free bundle slot, called once.
        floor = []
        remote_cls = ray.remote(BenchWorker)
        for _ in range(args.kills):
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
        for i in range(args.kills):
            rank = 1 + i % (args.world - 1)  # rank 0 would also re-run every rank's init (rendezvous rule)
            generation = sup.generation(rank)
            pid = ray.get(send_probe(group.workers[rank]))["pid"]
            killed_at.append(time.perf_counter())
            os.kill(pid, signal.SIGKILL)
            while sup.generation(rank) == generation:
                time.sleep(0.005)
            ray.get(group.workers[rank].ping.remote())
            time.sleep(0.5)
        sup.stop()
        print(f"kills: {args.kills}, world size {args.world}, one node, CPU-only actors")
        print(f"detection (SIGKILL -> detected):       {stats([d - k for k, d in zip(killed_at, hooks.detected_at, strict=True)])}")
        print(f"detection (GCS death time -> detected): {stats(hooks.detection)}")
        print(f"recovery  (death -> replacement ok):    {stats(hooks.recovery)}")
        print(f"floor     (new actor in bundle + call): {stats(floor)}")
        print(f"recovery / floor (medians): {statistics.median(hooks.recovery) / statistics.median(floor):.2f}x")
        group.kill()
        pool.teardown()
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
