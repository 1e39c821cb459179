"""Data movement: a DP_COMPUTE_PROTO call that sends a 64k-row DataProto (int64 input_ids of length 512,
plus a string per row) across 8 workers and gathers it back, against raw Ray and verl; and DataProto
chunk + concat alone, against verl's DataProto.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.data [--rows 65536] [--reps 30]

Raw Ray does the same physical work by hand on the group's own actors: split the tensor and the
strings into 8 chunks, ``ray.put`` each, one remote call per actor returning its chunk, ``ray.get``,
concatenate. The worker method returns what it was given (the movement is what is measured). Ours
runs twice: a default method (each worker gets a writable copy of its shard) and one registered with
``read_only=True`` (its shard as views of the object store). Either way the driver takes the results
as views and concatenates them (the concatenation is the one copy).
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import Row, Stat, ensure_verl, interleave, local_cluster

WORKERS = 8
SEQ_LEN = 512


def _payload(rows: int) -> tuple[Any, Any]:
    import numpy as np
    import torch

    ids = torch.arange(rows * SEQ_LEN, dtype=torch.int64).reshape(rows, SEQ_LEN)
    strings = np.array([f"sample-{i}" for i in range(rows)], dtype=object)
    return ids, strings


def _raw_writable(actors: list[Any], ids: Any, strings: Any) -> None:
    """Raw Ray with what DataProto guarantees: every receiver gets writable arrays (a copy of the
    read-only shared memory Ray hands back), in the worker and in the driver."""
    import numpy as np
    import ray
    import torch

    id_chunks, str_chunks = np.array_split(ids.numpy(), len(actors)), np.array_split(strings, len(actors))
    refs = [a.raw_echo_writable.remote(ray.put(i), ray.put(s)) for a, i, s in zip(actors, id_chunks, str_chunks, strict=True)]
    out = ray.get(refs)
    torch.cat([torch.from_numpy(o[0].copy()) for o in out]), np.concatenate([o[1] for o in out])


def _raw(actors: list[Any], ids: Any, strings: Any) -> None:
    import numpy as np
    import ray
    import torch

    # As numpy views: Ray stores a numpy array's own bytes and reads it back without a copy, where
    # pickling a torch view would carry the whole tensor's storage with every chunk.
    id_chunks, str_chunks = np.array_split(ids.numpy(), len(actors)), np.array_split(strings, len(actors))
    refs = [a.raw_echo.remote(ray.put(i), ray.put(s)) for a, i, s in zip(actors, id_chunks, str_chunks, strict=True)]
    out = ray.get(refs)
    torch.cat([torch.from_numpy(o[0]) for o in out]), np.concatenate([o[1] for o in out])


def _ours(rows: int, reps: int) -> tuple[Stat, Stat, Stat, Stat, Stat, Stat]:
    from supervisor import (
        ClassWithInitArgs,
        DataProto,
        Dispatch,
        ResourcePool,
        Worker,
        create_group,
        register,
    )

    class EchoWorker(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data: Any) -> Any:
            return data

        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, read_only=True)
        def echo_read_only(self, data: Any) -> Any:
            return data

        def raw_echo(self, ids: Any, strings: Any) -> tuple[Any, Any]:
            return ids, strings

        def raw_echo_writable(self, ids: Any, strings: Any) -> tuple[Any, Any]:
            return ids.copy(), strings

    ids, strings = _payload(rows)
    data = DataProto.from_dict(tensors={"input_ids": ids}, non_tensors={"text": strings})
    pool = ResourcePool([WORKERS], use_gpu=True, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(EchoWorker))
    try:
        actors = group.workers
        for echo in (group.echo, group.echo_read_only):
            out = echo(data)
            assert out.batch["input_ids"].equal(ids) and list(out.non_tensor_batch["text"][-2:]) == list(strings[-2:])
        times = interleave(
            {
                "ours": lambda: group.echo(data),
                "ours read-only": lambda: group.echo_read_only(data),
                "raw": lambda: _raw(actors, ids, strings),
                "raw writable": lambda: _raw_writable(actors, ids, strings),
            },
            reps, warmup=1, block=2,
        )  # fmt: skip
    finally:
        group.kill()
        pool.teardown()
    chunk_concat = interleave(
        {"ours": lambda: DataProto.concat(data.chunk(WORKERS)), "floor": lambda: _cat_floor(ids, strings)}, reps * 3, warmup=2
    )
    return times["ours"], times["ours read-only"], times["raw"], times["raw writable"], chunk_concat["ours"], chunk_concat["floor"]


def _cat_floor(ids: Any, strings: Any) -> None:
    """The copies any concat must make: torch.cat of the row chunks and np.concatenate of the strings."""
    import numpy as np
    import torch

    torch.cat(torch.chunk(ids, WORKERS)), np.concatenate(np.array_split(strings, WORKERS))


def _verl(rows: int, reps: int) -> tuple[Stat, Stat]:
    ensure_verl()
    import ray
    from verl import DataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    class VerlEchoWorker(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
        def echo(self, data: Any) -> Any:
            return data

    ids, strings = _payload(rows)
    data = DataProto.from_dict(tensors={"input_ids": ids}, non_tensors={"text": strings})
    pool = RayResourcePool([WORKERS], use_gpu=True, max_colocate_count=1)
    group = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(VerlEchoWorker)))
    try:
        out = group.echo(data)
        assert out.batch["input_ids"].equal(ids)
        times = interleave({"verl": lambda: group.echo(data)}, reps, warmup=1, block=2)
    finally:
        for actor in group.workers:
            ray.kill(actor)
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)
    chunk_concat = interleave({"verl": lambda: DataProto.concat(data.chunk(WORKERS))}, reps * 3, warmup=2)
    return times["verl"], chunk_concat["verl"]


def run(rows: int = 65536, reps: int = 10) -> list[Row]:
    import ray

    ensure_verl()  # before the cluster starts: its worker processes import verl from the same path
    cluster = local_cluster([{"num_cpus": 16, "num_gpus": 8, "object_store_memory": 4 * 1024**3}])
    try:
        ours, ours_read_only, raw, raw_writable, ours_cc, floor_cc = _ours(rows, reps)
        verl, verl_cc = _verl(rows, reps)
    finally:
        ray.shutdown()
        cluster.shutdown()
    case = f"{rows} rows x {SEQ_LEN} int64 + strings, {WORKERS} workers"
    return [
        Row("data movement, read_only=True method (zero-copy shards)", case, ours_read_only, "raw Ray (read-only zero-copy results)", raw, "<= 1.20x"),
        Row("data movement, read_only=True method (zero-copy shards)", case, ours_read_only, "ours, the default writable method", ours),
        Row("data movement (DP_COMPUTE_PROTO, there and back)", case, ours, "raw Ray (read-only zero-copy results)", raw),
        Row("data movement (DP_COMPUTE_PROTO, there and back)", case, ours, "raw Ray, writable results (a copy per receive, as DataProto)", raw_writable, "<= 1.20x"),
        Row("data movement (DP_COMPUTE_PROTO, there and back)", case, ours, "verl", verl, "< 1.0x"),
        Row("DataProto chunk(8) + concat", f"{rows} rows", ours_cc, "verl DataProto", verl_cc, "< 1.0x"),
        Row("DataProto chunk(8) + concat", f"{rows} rows", ours_cc, "floor: torch.cat + np.concatenate of the chunks", floor_cc),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    for row in run(args.rows, args.reps):
        print(f"{row.benchmark}: {row.ours.show()} vs {row.reference} {row.ref.show() if row.ref else '-'}  ratio {row.ratio:.2f}x")


if __name__ == "__main__":
    main()
