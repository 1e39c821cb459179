"""Worker classes for the fault-tolerance tests (light: no torch at import)."""

from __future__ import annotations

import os
import threading
import time

from supervisor import Dispatch, Worker, register


def _marker(directory: str, name: str) -> str:
    return os.path.join(directory, name)


class RolloutWorker(Worker):
    """``generate`` returns the ids it was given (a rollout shard), slowly enough to be killed mid-call."""

    def __init__(self, control_dir: str, step_s: float = 0.05) -> None:
        super().__init__()
        self.control_dir = control_dir
        self.step_s = step_s
        self.master = None
        # Crash loop: once the marker for this rank exists, every incarnation dies shortly after start.
        if os.path.exists(_marker(control_dir, f"crashloop{self.rank}")):
            threading.Timer(0.3, os._exit, args=(1,)).start()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> str:
        self.master = os.environ["MASTER_ADDR"] + ":" + os.environ["MASTER_PORT"]
        return self.master

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rendezvous(self) -> str | None:
        return self.master

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, idempotent=True)
    def generate(self, batch):
        from supervisor.core.protocol import DataProto

        self._step()
        return DataProto.from_dict(tensors={"ids": batch.batch["ids"].clone()})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def score(self, batch):
        from supervisor.core.protocol import DataProto

        self._step()
        return DataProto.from_dict(tensors={"ids": batch.batch["ids"].clone()})

    def _step(self) -> None:
        time.sleep(self.step_s)
        # A one-shot hang: the first call on this rank after the marker appears never returns.
        hang = _marker(self.control_dir, f"hang{self.rank}")
        if os.path.exists(hang):
            os.remove(hang)
            time.sleep(3600)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whereami(self) -> dict:
        return self.node_info()


class SlowStartWorker(Worker):
    """A worker whose constructor takes ``start_s`` (imports, CUDA context...) and does nothing rank-specific,
    so it can be pre-started as a standby; its rank-dependent setup is ``init_model``."""

    def __init__(self, start_s: float = 1.0) -> None:
        super().__init__()
        time.sleep(start_s)
        self.initialized_as = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> int:
        self.initialized_as = self.rank
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def identity(self) -> dict:
        env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        return {"rank": self.rank, "initialized_as": self.initialized_as, "env": env, **self.node_info()}

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, idempotent=True)
    def generate(self, batch):
        from supervisor.core.protocol import DataProto

        return DataProto.from_dict(tensors={"ids": batch.batch["ids"].clone()})


class WarmUpWorker(SlowStartWorker):
    """A standby-able worker with a warm-up (the rank-independent part of its init) that counts its
    runs, or raises when ``fail_warm_up``, after ``warm_up_s``."""

    def __init__(self, start_s: float = 0.0, fail_warm_up: bool = False, warm_up_s: float = 0.0) -> None:
        super().__init__(start_s=start_s)
        self.fail_warm_up = fail_warm_up
        self.warm_up_s = warm_up_s
        self.warm_ups = 0

    def warm_up(self) -> None:
        if self.fail_warm_up:
            raise RuntimeError("no weights to load")
        time.sleep(self.warm_up_s)
        self.warm_ups += 1
        self.warm_up_nices, self.warm_up_policies = thread_nices(), thread_policies()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def identity(self) -> dict:
        return {
            **super().identity(), "warm_ups": self.warm_ups, "nices": thread_nices(), "policies": thread_policies(),
            "warm_up_nices": getattr(self, "warm_up_nices", None), "warm_up_policies": getattr(self, "warm_up_policies", None),
        }  # fmt: skip


def _thread_stat_fields(index: int) -> list[int]:
    """One field of every thread's /proc stat (``index`` counts from the field after the name)."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = open(f"/proc/self/task/{tid}/stat").read()  # noqa: SIM115 - read at once
        except OSError:  # the thread ended
            continue
        out.append(int(stat.rsplit(")", 1)[1].split()[index]))
    return sorted(out)


def thread_nices() -> list[int]:
    """The nice value of every thread of this process (Linux: field 19 of each task's stat)."""
    return _thread_stat_fields(16)


def thread_policies() -> list[int]:
    """The scheduling policy of every thread of this process (field 41: os.SCHED_OTHER, os.SCHED_IDLE...)."""
    return _thread_stat_fields(38)


class RankDependentWorker(SlowStartWorker):
    """Reads its rank in the constructor: it cannot be a standby."""

    def __init__(self) -> None:
        super().__init__(start_s=0.0)
        self.shard = self.rank


class SlowInitWorker(Worker):
    """An init that takes ``init_s`` (a model load) and an idempotent call that takes ``call_s``."""

    def __init__(self, init_s: float, call_s: float) -> None:
        super().__init__()
        self.init_s, self.call_s = init_s, call_s

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        time.sleep(self.init_s)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def work(self) -> int:
        time.sleep(self.call_s)
        return self.rank


class ForkProbeWorker(SlowStartWorker):
    """Reports how its process came to be: its parent, its process group, and the process that
    imported ``preload_marker`` (a zygote's pid when it was forked from one that preloaded it)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def process_info(self) -> dict:
        import preload_marker

        return {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "marker_imported_in": preload_marker.IMPORTED_IN}
