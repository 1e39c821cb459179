"""Time from an infeasible create_group request to its error, on a local two-node cluster (4 GPUs each).

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python bench/infeasible_latency.py [--runs 20]

Prints median, p95 and max over the runs, for two infeasible shapes: a STRICT_PACK placement group
larger than any node ([5] GPUs) and a pool larger than the cluster ([4, 4, 4] GPUs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray

from supervisor import ClassWithInitArgs, InfeasibleResourcesError, ResourcePool, Worker, create_group
from supervisor.daemon.local_cluster import LocalCluster
from supervisor.observability.hooks import LifecycleHooks


class Idle(Worker):
    pass


def measure(shape: list[int], runs: int) -> list[float]:
    times = []
    for i in range(runs):
        pool = ResourcePool(shape, use_gpu=True, max_colocate_count=1, name_prefix=f"infeasible{i}")
        started = time.perf_counter()
        try:
            create_group(pool, ClassWithInitArgs(Idle), hooks=LifecycleHooks())
        except InfeasibleResourcesError:
            times.append(time.perf_counter() - started)
        else:
            raise SystemExit(f"{shape} was not judged infeasible")
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 16, "num_gpus": 4, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=16, num_gpus=4)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        for shape in ([5], [4, 4, 4]):
            t = sorted(measure(shape, args.runs))
            p95 = t[min(len(t) - 1, int(round(0.95 * (len(t) - 1))))]
            print(f"infeasible {shape}: median {statistics.median(t) * 1e3:.1f} ms, p95 {p95 * 1e3:.1f} ms, max {t[-1] * 1e3:.1f} ms over {len(t)} runs")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
