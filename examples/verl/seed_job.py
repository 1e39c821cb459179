"""A small verl-style driver: the single-controller loop verl's trainer runs, on verl's own classes.

It builds ``RayResourcePool`` + ``RayClassWithInitArgs`` + ``RayWorkerGroup`` from
``verl.single_controller.ray`` (whatever that module holds when the script runs: verl's originals,
or the supervised ones once ``supervisor.integrations.verl.patch.install()`` ran, as under
``supervisor run``), calls ``init_model`` once, then runs ``--steps`` DP_COMPUTE_PROTO steps and
prints one line per step. Every step checks that each row came back exactly once, doubled.

``--colocate`` builds the group as verl's trainer does (``ray_trainer.init_workers``): two roles, ``ref``
and ``actor``, colocated by ``create_colocated_worker_cls`` in one actor per bundle, one group with
verl's random name, ``spawn`` for a group per role, ``init_model`` on ``ref`` then ``actor``. The
steps run on ``actor`` (which refuses to compute in a process where its init has not run).

Usage::

    RAY_ADDRESS=127.0.0.1:6379 python examples/verl/seed_job.py --steps 5 --nodes 2 --per-node 1

``ray.init()`` honours ``RAY_ADDRESS`` (without it, a local Ray is started: pass ``--cpu``, it has no
GPUs). Exit status 0 when every step was complete, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before `import ray`: loopback addresses only

# The worker class is imported by its package path (examples.verl.workers), so Ray's worker processes,
# which get this driver's sys.path, import the same module (a bare `workers` could be another one).
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

import ray  # noqa: E402
import torch  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup  # noqa: E402
from verl.single_controller.ray.base import create_colocated_worker_cls  # noqa: E402

from examples.verl.workers import RoleWorker, SeedWorker  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="compute steps to run")
    parser.add_argument("--nodes", type=int, default=2, help="placement groups (one per node) in the pool")
    parser.add_argument("--per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--batch", type=int, default=8, help="rows per step")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds each rank sleeps inside compute")
    parser.add_argument("--step-gap", type=float, default=0.0, help="seconds the driver waits between steps (a test kills a rank there)")
    parser.add_argument("--name", default="seed", help="the group's name_prefix (and the pool's)")
    parser.add_argument("--cpu", action="store_true", help="CPU-only bundles (no GPU in the cluster)")
    parser.add_argument("--colocate", action="store_true", help="verl's trainer layout: roles ref and actor in one colocated group")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # RAY_ADDRESS, when set, says which cluster. Ray's worker processes get the repository on their path
    # (merged into each actor's own runtime_env), so they import examples.verl.workers as this driver does.
    pythonpath = os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    pool = RayResourcePool(
        process_on_nodes=[args.per_node] * args.nodes, use_gpu=not args.cpu, max_colocate_count=1, name_prefix=args.name
    )
    if args.colocate:
        roles = {
            "ref": RayClassWithInitArgs(ray.remote(RoleWorker), role="ref", scale=3.0),
            "actor": RayClassWithInitArgs(ray.remote(RoleWorker), role="actor", scale=2.0),
        }
        colocated = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(roles))
        spawned = colocated.spawn(prefix_set=roles.keys())
        spawned["ref"].init_model()
        group = spawned["actor"]
        name = colocated.name_prefix
    else:
        group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(ray.remote(SeedWorker)), name_prefix=args.name)
        name = args.name
    print(f"group {name}: {type(group).__module__}.{type(group).__qualname__}, world_size={group.world_size}", flush=True)
    group.init_model()
    ok = True
    for step in range(1, args.steps + 1):
        started = time.monotonic()
        idx = torch.arange(step * 1000, step * 1000 + args.batch)
        batch = DataProto.from_dict(
            tensors={"x": idx.float(), "idx": idx}, meta_info={"sleep_s": args.step_sleep}
        )
        out = group.compute(batch)
        complete = sorted(out.batch["idx"].tolist()) == idx.tolist() and torch.equal(
            out.batch["x"][torch.argsort(out.batch["idx"])], idx.float() * 2
        )
        ok = ok and complete
        ranks = sorted(set(out.batch["rank"].tolist()))
        print(
            f"step {step}: rows={len(out)} complete={complete} sum={float(out.batch['x'].sum()):.1f} "
            f"ranks={ranks} seconds={time.monotonic() - started:.2f}",
            flush=True,
        )
        time.sleep(args.step_gap)
    infos = group.process_info() if args.colocate else group.model_info()
    print("pids " + " ".join(f"{i['rank']}:{i['pid']}" for i in infos), flush=True)
    print("done" if ok else "FAILED: a step lost or duplicated rows", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
