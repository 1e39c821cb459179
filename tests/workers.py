"""Light worker classes used by the tests (no torch import at module level)."""

from __future__ import annotations

import asyncio
import os
import sys

from supervisor import Dispatch, Execute, Worker, make_nd_compute_dataproto_dispatch_fn, register


class CounterWorker(Worker):
    """``value = rank + offset``; the README example."""

    def __init__(self, offset: int = 0) -> None:
        super().__init__()
        self.value = self.rank + offset
        # One line on each stream, for `supervisor logs` to find (stdout, and --err).
        print(f"counter worker of rank {self.rank} up, pid {os.getpid()}", flush=True)
        print(f"counter worker of rank {self.rank}: stderr", file=sys.stderr, flush=True)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, n: int) -> int:
        self.value += n
        return self.value

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail(self, message: str) -> None:
        raise ValueError(message)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def add_nonblocking(self, n: int) -> int:
        self.value += n
        return self.value

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def scale(self, factor: int) -> int:
        return self.value * factor

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def whoami(self, tag: str) -> tuple[str, int]:
        return tag, self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def rank_zero_value(self) -> int:
        return self.value

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def times_rank(self, x: int) -> int:
        return x * (self.rank + 1)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def async_add(self, n: int) -> int:
        await asyncio.sleep(0)
        return self.value + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def async_add_nonblocking(self, n: int) -> int:
        return self.value + n

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self, keys: list[str]) -> dict[str, str | None]:
        return {k: os.environ.get(k) for k in keys}

    def unregistered(self) -> str:
        return "direct"


class ProtoWorker(Worker):
    """DataProto workers: double ``x`` and tag the rows with the rank that saw them."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data):
        import numpy as np

        from supervisor.core.protocol import DataProto

        out = DataProto.from_dict(
            tensors={"x": data.batch["x"] * 2},
            non_tensors={"seen_by": np.array([self.rank] * len(data), dtype=object)},
            meta_info={"metrics": {"rows": len(data)}},
        )
        return out

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_nonblocking(self, data):
        return self.double.__wrapped__(self, data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def count(self, data) -> dict[str, int]:
        return {"rank": self.rank, "rows": len(data)}



class AsyncProtoWorker(ProtoWorker):
    """An async actor (it has an async method): DataProtoFuture arguments are awaited, not blocked on."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    async def async_double(self, data):
        return self.double.__wrapped__(self, data)


class MeshWorker(Worker):
    """Ranks pair up into dp groups of 2: dp_rank = rank // 2; the first of each pair is collected."""

    def __init__(self) -> None:
        super().__init__()
        self._register_dispatch_collect_info("train", dp_rank=self.rank // 2, is_collect=self.rank % 2 == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn("train"))
    def tag(self, data):
        import numpy as np

        from supervisor.core.protocol import DataProto

        return DataProto.from_dict(
            tensors={"x": data.batch["x"]},
            non_tensors={"dp_rank": np.array([self.rank // 2] * len(data), dtype=object)},
        )


class ActorRole(Worker):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.lr = lr

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self) -> tuple[str, int, float, int]:
        return "actor", self.rank, self.lr, os.getpid()


class CriticRole(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self) -> tuple[str, int, int]:
        return "critic", self.rank, os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def value(self, x: int) -> int:
        return x + self.rank


def _bump(counter_dir: str, rank: int) -> int:
    """Count calls per rank in a file, so the count survives the actor being replaced."""
    path = os.path.join(counter_dir, f"rank{rank}")
    count = int(open(path).read()) + 1 if os.path.exists(path) else 1
    with open(path, "w") as f:
        f.write(str(count))
    return count


class InitWorker(Worker):
    """``init_model`` misbehaves on ``bad_rank`` for its first ``bad_times`` calls, in the way ``mode`` says.

    mode: ``raise`` (ValueError), ``hang`` (sleeps far past any test timeout), ``die`` (``os._exit(1)``).
    ``bad_times=-1`` misbehaves forever.
    """

    def __init__(self, counter_dir: str, bad_rank: int = -1, bad_times: int = 0, mode: str = "raise") -> None:
        super().__init__()
        self.counter_dir, self.bad_rank, self.bad_times, self.mode = counter_dir, bad_rank, bad_times, mode
        self.ready = False

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> str:
        count = _bump(self.counter_dir, self.rank)
        if self.rank == self.bad_rank and (self.bad_times < 0 or count <= self.bad_times):
            if self.mode == "hang":
                import time

                time.sleep(3600)
            if self.mode == "die":
                os._exit(1)
            raise ValueError(f"bad weights on rank {self.rank} (call {count})")
        self.ready = True
        return os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def status(self) -> tuple[bool, str]:
        return self.ready, os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]


class ReinitFaultWorker(Worker):
    """``init_model`` raises on a rank while the file ``<fault_dir>/init-fails-<rank>`` holds a count
    above zero (each failing call takes one off; ``-1``: for ever), so a test arms the faults of a
    replacement's init once the group runs. ``info`` says which process and rendezvous serve."""

    def __init__(self, fault_dir: str) -> None:
        super().__init__()
        self.fault_dir = fault_dir

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        path = os.path.join(self.fault_dir, f"init-fails-{self.rank}")
        left = int(open(path).read()) if os.path.exists(path) else 0
        if left != 0:
            if left > 0:
                with open(path, "w") as f:
                    f.write(str(left - 1))
            raise ValueError(f"bad weights on rank {self.rank}")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def info(self) -> tuple[int, str]:
        return os.getpid(), os.environ["MASTER_PORT"]


class RendezvousWorker(Worker):
    """``init_model`` joins a real gloo process group (rank 0 serves the store on MASTER_ADDR, the
    example's way); ``dead_rank`` dies in its first call before joining, so the others' first call
    waits in the rendezvous for a peer that never comes (its store timeout: 30 s)."""

    def __init__(self, counter_dir: str, dead_rank: int) -> None:
        super().__init__()
        self.counter_dir, self.dead_rank = counter_dir, dead_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> str:
        import torch.distributed as dist

        from examples.rlhf.training import COLLECTIVE_TIMEOUT, rendezvous_store

        if _bump(self.counter_dir, self.rank) == 1 and self.rank == self.dead_rank:
            os._exit(1)
        if dist.is_initialized():
            dist.destroy_process_group()
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        store = rendezvous_store(addr, port, self.rank, self.world_size)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size, timeout=COLLECTIVE_TIMEOUT)
        return f"{addr}:{port}"


class BrokenConstructor(Worker):
    def __init__(self) -> None:
        super().__init__()
        raise RuntimeError("cannot load tokenizer")


class ShutdownAwareWorker(CounterWorker):
    """A CounterWorker whose ``shutdown`` (the daemon's graceful stop) leaves a marker file per rank
    in ``$SHUTDOWN_MARKER_DIR``."""

    def shutdown(self) -> None:
        with open(os.path.join(os.environ["SHUTDOWN_MARKER_DIR"], f"rank{self.rank}"), "w") as f:
            f.write(str(os.getpid()))
