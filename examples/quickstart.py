"""Quickstart: pools and groups on an embedded local Ray, driven the single-controller way.

Starts a local two-node Ray cluster on 127.0.0.1 with declared (fake) GPUs, then:

1. create_group (lenient resource wait) + init_group (strict per-rank init) of four workers, one of
   which fails its first init and is replaced into its own bundle;
2. DP_COMPUTE_PROTO over a DataProto with auto-padding on a two-node pool;
3. two roles colocated in one actor per rank;
and tears everything down. Run with ``make run`` (or ``python examples/quickstart.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before `import ray`: keeps every Ray address on 127.0.0.1

import numpy as np
import ray
import torch
from ray.cluster_utils import Cluster

from supervisor import (
    ClassWithInitArgs,
    ConsoleProgressHooks,
    DataProto,
    Dispatch,
    InitPolicy,
    ResourcePool,
    Worker,
    WorkerGroup,
    create_colocated_worker_cls,
    create_group,
    init_group,
    register,
)


class Counter(Worker):
    def __init__(self, marker_dir: str, flaky_rank: int = -1) -> None:
        super().__init__()
        self.value = self.rank
        self.marker = os.path.join(marker_dir, f"rank{self.rank}")
        self.flaky_rank = flaky_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        # A real worker loads weights and joins torch.distributed here. The flaky rank fails the first
        # time (its marker file survives the actor), to show a single-rank replacement.
        if self.rank == self.flaky_rank and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError("CUDA error: out of memory (simulated)")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, n: int) -> int:
        self.value += n
        return self.value


class Scorer(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def score(self, batch: DataProto) -> DataProto:
        ids = batch.batch["input_ids"]
        return DataProto.from_dict(
            tensors={"score": ids.float().mean(dim=-1)},
            non_tensors={"scored_by": np.full(len(batch), self.rank, dtype=object)},
        )


class Rollout(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def generate(self, prompt: str) -> str:
        return f"{prompt} -> rank {self.rank} (pid {os.getpid()})"


def main() -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 4, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=8, num_gpus=4)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)

        hooks = ConsoleProgressHooks()
        pool = ResourcePool([4], use_gpu=True, max_colocate_count=1, name_prefix="quickstart")
        marker_dir = tempfile.mkdtemp(prefix="quickstart-")
        counters = create_group(
            pool, ClassWithInitArgs(Counter, marker_dir=marker_dir, flaky_rank=2), name_prefix="counter-", hooks=hooks
        )
        before = [w._actor_id.hex()[:8] for w in counters.workers]
        history = init_group(counters, "init_model", policy=InitPolicy(timeout_s=60, backoff_initial_s=0.2), hooks=hooks)
        after = [w._actor_id.hex()[:8] for w in counters.workers]
        print(f"init_group: {len(history)} init calls; actors before {before}, after {after}")
        print("ONE_TO_ALL add(1):", counters.add(1))
        nodes = pool.original_bundle_nodes()
        print("bundle -> node:", {k: v[:8] for k, v in nodes.items()})
        counters.kill()
        pool.teardown()
        shutil.rmtree(marker_dir, ignore_errors=True)

        pool = ResourcePool([2, 2], use_gpu=True, max_colocate_count=2, name_prefix="rlhf")
        scorers = WorkerGroup(pool, ClassWithInitArgs(Scorer), name_prefix="scorer-")
        batch = DataProto.from_dict(tensors={"input_ids": torch.arange(30).reshape(10, 3)}, auto_padding=True)
        scored = scorers.score(batch)
        print("DP_COMPUTE_PROTO scores:", scored.batch["score"].tolist())
        print("  scored by ranks:", list(scored.non_tensor_batch["scored_by"]))
        scorers.kill()

        colocated = WorkerGroup(
            pool, create_colocated_worker_cls({"rollout": ClassWithInitArgs(Rollout), "scorer": ClassWithInitArgs(Scorer)}),
            name_prefix="colo-",
        )
        roles = colocated.spawn({"rollout", "scorer"})
        for line in roles["rollout"].generate("hello"):
            print("colocated rollout:", line)
        colocated.kill()
        pool.teardown()
        print("done: all groups killed and pools removed")
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
