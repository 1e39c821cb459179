"""verl's main_ppo topology in small: the driver only starts a TaskRunner actor, which builds the
pool and the group with verl's own classes and drives them (tests/test_run_verl.py runs it under
`supervisor run`: the run reaches the actor through the job's runtime_env, and the actor hosts the run).

Prints one JSON line: the group's class, the TaskRunner's pid, whether every step was complete."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import ray  # noqa: E402


@ray.remote(num_cpus=0)
class TaskRunner:
    def run(self, steps: int, step_sleep: float) -> dict:
        import time

        import torch
        from verl import DataProto
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

        from examples.verl.workers import SeedWorker

        pool = RayResourcePool(process_on_nodes=[1, 1], use_gpu=False, max_colocate_count=1, name_prefix="seed")
        group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(SeedWorker)), name_prefix="seed")
        group.init_model()
        complete = True
        for step in range(steps):
            idx = torch.arange(step * 100, step * 100 + 8)
            out = group.compute(DataProto.from_dict(tensors={"x": idx.float(), "idx": idx}, meta_info={"sleep_s": step_sleep}))
            complete = complete and sorted(out.batch["idx"].tolist()) == idx.tolist()
            time.sleep(step_sleep)
        return {"cls": f"{type(group).__module__}.{type(group).__qualname__}", "pid": os.getpid(), "complete": complete}


def main() -> int:
    pythonpath = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    runner = TaskRunner.remote()  # held: an actor without a handle is cancelled
    result = ray.get(runner.run.remote(int(sys.argv[1]), float(sys.argv[2])))
    print(json.dumps(result), flush=True)
    return 0 if result["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
