"""Goodput of a stateful training loop under faults: state recovery, checkpoint-restart, Ray Train v2.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv-bench/bin/python -m bench.state_goodput [--quick] [--window-s 60] [--cycles 1] [--ways a,b]

One training job, the example's policy update (``examples/rlhf/training.py``: ``ActorUpdateWorker``,
ZeroRedundancyOptimizer over gloo, 4 ranks, 2 per node on a two-node local cluster on 127.0.0.1),
steps as fast as it can in each way, on the same model, data and kill schedule:

* **supervised**: a ``state="sharded"`` group under a ``GroupSupervisor`` with a snapshot before
  every step (``snapshot_every = 1``); a rank's death rolls the group back to the newest complete
  snapshot and the driver replays from the step ``RolledBack`` names;
* **supervised, one_for_all, forked**: the same, with every rank replaced on a death (the survivors
  are not waited for in a collective the dead rank left) and one standby, whose per-node zygote
  (``standby_preload``: torch and the worker's module) the fresh ranks are forked from instead of each
  importing torch (``--ways supervised_forked`` runs it alone);
* **supervised, one_for_all, a warm standby per rank**: the same with as many standbys as ranks (one
  spare bundle each, forked from the zygotes, ``warm_up`` run), so that a death's restart of every
  rank is take-overs only: nothing is started or imported while the job waits;
* **checkpoint-restart**: the same worker unsupervised; after every step each rank writes its state
  with ``torch.distributed.checkpoint`` to disk (in the same call as the step). A death ends the
  group: the driver kills every rank, starts a new group (new actors in the placement groups it
  kept, the init again) and loads the last checkpoint. Generous to it: a checkpoint every step, and
  the placement groups are not made again;
* **Ray Train v2**: ``ray.train.torch.TorchTrainer`` with ``FailureConfig(max_failures=-1)``, the
  same worker's model, steps and state (built in Ray Train's process group), and every step
  ``ray.train.report(checkpoint=...)`` of each rank's state written the same way. Needs
  ``ray[train]`` (the ``bench`` extra), which is not a dependency of the project: without it this
  way is skipped, saying so, and the rest runs.

Kills are SIGKILLs of a training rank's process, the rank drawn from a seeded generator (the same
sequence for each way); a process is killed only if it is still the one that was found (its start
time is checked), so a stale pid never hits another process. A kill that is due waits for a process
to kill: a supervised rank can be killed as soon as its actor is up (in its init too), the
checkpoint-restart way's ranks once its new group is initialised, Ray Train's once their training
function started; so a recovery of the supervised ways can be hit again sooner than the others'.

Each way is one run whose windows alternate (``--window-s``, 60 s by default): fault-free, a kill every
30 s, fault-free, a kill every 10 s, fault-free (``--cycles`` times the middle four). A faulty
window's kills come at its start and every interval after, and it lasts until the job steps again
past where it was (at least ``window_s``): a way whose recovery outlasts the interval is charged for
it in the window of its kills, and every fault-free window starts with the job stepping. Effective time at a rate is the pace
(net steps a minute: a step replayed after a rollback counts once) over the way's faulty windows of
that rate, over its pace over its fault-free windows; the ways are compared by effective time, each
against its own fault-free pace (their fault-free paces differ: each pays for its checkpoints).
Each run is measured from ``settle_s`` after its first step.

Bit-exactness: each way's final state (every rank's digest, at the step it stopped at) is compared
with a fault-free run of the same worker to the same step, made afterwards on a fresh group.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from examples.rlhf.training import ActorUpdateWorker
from supervisor import Dispatch, register

from .common import Row, print_rows
from .goodput import Timeline, Window, effective_time, pace

REPO = Path(__file__).resolve().parent.parent
WORLD = 4
RANKS_PER_NODE = [2, 2]
SAMPLE_S = 0.25
KILL_RATES_S = (30.0, 10.0)
CYCLE: tuple[float | None, ...] = (None, KILL_RATES_S[0], None, KILL_RATES_S[1])
EFFECTIVE_GOAL = ">= 0.95x"  # supervised, at one kill per 30 s
AGAINST_RAY_TRAIN_GOAL = ">= 2.0x"  # supervised's effective time over Ray Train's, at one kill per 30 s
STOP_MARGIN = 20  # steps between asking Ray Train's ranks to stop and the step they all stop at
NODE = {"num_cpus": 8, "num_gpus": 4, "object_store_memory": 2 * 2**30}
RAY_TRAIN_MISSING = (
    'the Ray Train way needs ray[train], not installed in this environment: install the bench extra, pip install -e ".[bench]" '
    "(into a separate venv: it is not a dependency of the project; see bench/RESULTS.md); skipped"
)


class Way(enum.Enum):
    SUPERVISED = "supervised (sharded state, snapshot every step)"
    SUPERVISED_ALL = "supervised, one_for_all (sharded state, snapshot every step)"
    SUPERVISED_FORKED = "supervised, one_for_all, ranks forked from zygotes (a standby, standby_preload)"
    SUPERVISED_STANDBYS = "supervised, one_for_all, a warm standby per rank (forked from zygotes)"
    CHECKPOINT_RESTART = "checkpoint-restart (DCP every step)"
    RAY_TRAIN = "Ray Train v2 (report(checkpoint) every step)"


SUPERVISED_WAYS = (Way.SUPERVISED, Way.SUPERVISED_ALL, Way.SUPERVISED_FORKED, Way.SUPERVISED_STANDBYS)
# What a zygote imports once, so a fork of it starts without: torch and the worker's module (not Ray).
PRELOAD = ("torch", "torch.distributed.optim", "tensordict", "examples.rlhf.training")


@dataclass(frozen=True)
class Model:
    """The worker's arguments, the same in every way (the example's policy update)."""

    in_dim: int = 16
    hidden: int = 32
    out_dim: int = 1
    seed: int = 0
    lr: float = 0.01
    batch_size: int = 16
    data_seed: int = 0
    pad_mb: float = 0.0


# -- processes: kill only the one that was found ------------------------------------------------


@dataclass(frozen=True)
class Proc:
    """A process, named by its pid and its start time (clock ticks since boot): a pid alone may be
    reused by an unrelated process once the first one is gone."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> Proc | None:
        start = start_ticks(pid)
        return None if start is None else cls(pid, start)

    def kill(self) -> bool:
        """SIGKILL it if it is still the same process; whether it was."""
        if start_ticks(self.pid) != self.start:
            return False
        try:
            os.kill(self.pid, signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False


def parse_start_ticks(stat: str) -> int:
    """Field 22 (starttime) of a /proc/PID/stat line; the command (field 2) may hold spaces and parentheses."""
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def start_ticks(pid: int) -> int | None:
    try:
        return parse_start_ticks(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


# -- a rank's state on disk (torch.distributed.checkpoint, one directory per rank) ----------------


def save_dcp(state: dict[str, Any], path: str) -> None:
    import torch.distributed.checkpoint as dcp

    os.makedirs(path, exist_ok=True)
    dcp.save(state, checkpoint_id=path, no_dist=True)  # each rank its own directory: no collective


def optimizer_template(keys: dict[str, tuple[tuple[int, ...], Any]]) -> dict[int, dict[str, Any]]:
    """Empty tensors for the optimizer's per-parameter state named by a checkpoint's flattened keys
    (``optim.state.<index>.<name>`` -> (shape, dtype)). DCP loads in place, into a template: a fresh
    Adam has no per-parameter state yet (it is made by the first step), so the template gets it here."""
    import torch

    out: dict[int, dict[str, Any]] = {}
    for key, (shape, dtype) in keys.items():
        parts = key.split(".")
        if len(parts) == 4 and parts[:2] == ["optim", "state"]:
            out.setdefault(int(parts[2]), {})[parts[3]] = torch.empty(shape, dtype=dtype)
    return out


def load_dcp(state: dict[str, Any], path: str) -> dict[str, Any]:
    """``state`` (a fresh rank's, for its layout) filled from the checkpoint at ``path``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from supervisor.core.state_tree import host_copy

    metadata = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    tensors = {k: (tuple(m.size), m.properties.dtype) for k, m in metadata.items() if isinstance(m, TensorStorageMetadata)}
    template = host_copy(state)
    template["optim"]["state"] = optimizer_template(tensors)
    dcp.load(template, checkpoint_id=path, no_dist=True)
    return template


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:09d}")


class GoodputWorker(ActorUpdateWorker):
    """The example's ZeRO worker, with what the checkpoint-restart way and the checks need."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def step_and_checkpoint(self, step: int, root: str) -> int:
        """One step, then this rank's state to ``root/step-<step+1>/rank-<rank>`` (one call: no extra round trip)."""
        self.train_step(step)
        save_dcp(self.state_dict(), os.path.join(step_dir(root, self.step), f"rank-{self.rank}"))
        return self.step

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, root: str, step: int) -> int:
        self.load_state_dict(load_dcp(self.state_dict(), os.path.join(step_dir(root, step), f"rank-{self.rank}")))
        return self.step

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def train_steps(self, first: int, count: int) -> int:
        """``count`` steps from ``first`` in one call (the fault-free reference run)."""
        for step in range(first, first + count):
            self.train_step(step)
        return self.step

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def process(self) -> int:
        return os.getpid()


# -- the three ways, as jobs the window loop drives ---------------------------------------------


class Job(Protocol):
    def progress(self) -> int:
        """Net steps done (a step undone by a rollback no longer counts)."""
        ...

    def victim(self, rank: int) -> Proc | None:
        """The process of ``rank`` now (None: none can be found now; the kill waits)."""
        ...

    def finish(self) -> tuple[int, list[str]]:
        """Stop at a step boundary; the step and every rank's state digest there."""
        ...


def _pool_and_group(model: Model, prefix: str, pool: Any = None, spares: int = 0) -> tuple[Any, Any]:
    """``spares``: spare bundles for standbys (spread over the nodes)."""
    from supervisor import ClassWithInitArgs, ResourcePool, create_group, init_group
    from supervisor.supervision.init_policy import InitPolicy

    capacity = 1.0 + spares / WORLD
    pool = pool or ResourcePool(RANKS_PER_NODE, use_gpu=True, max_colocate_count=1, name_prefix=prefix, capacity_factor=capacity)
    group = create_group(pool, ClassWithInitArgs(GoodputWorker, **asdict(model)), name_prefix=prefix)
    init_group(group, "init_model", policy=InitPolicy(timeout_s=120, attempts=3, backoff_initial_s=0.05, backoff_max_s=0.5, backoff_jitter_s=0.0))
    return pool, group


def _digests(group: Any) -> list[str]:
    return [info["digest"] for info in group.state_info()]


class _Loop:
    """A training loop on a thread of its own, stopped between steps."""

    def __init__(self) -> None:
        self.done = 0
        self.restarts = 0
        self.failure: str | None = None  # the job gave up (its group FAILED): it makes no more progress
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _guarded(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # surfaced by finish(): a way that broke must not look slow
            self._error = exc

    def loop(self) -> None:
        raise NotImplementedError

    def progress(self) -> int:
        if self._error is not None:
            raise RuntimeError(f"the training loop failed: {self._error!r}") from self._error
        return self.done

    def join(self) -> None:
        self._stop.set()
        self._thread.join(600)
        self.progress()


class SupervisedJob(_Loop):
    """One of :data:`SUPERVISED_WAYS`. one_for_all (and forked): a death replaces every rank at once
    (the survivors too) instead of waiting for them to leave the collective the dead rank was in.
    Forked: one standby, and a zygote per node (``standby_preload``) that fresh ranks are forked from
    instead of each importing torch."""

    PREFIXES = {Way.SUPERVISED: "sg-supervised-", Way.SUPERVISED_ALL: "sg-all-", Way.SUPERVISED_FORKED: "sg-forked-", Way.SUPERVISED_STANDBYS: "sg-standbys-"}
    # Standbys a way keeps (one spare bundle each): one per node, or one per rank, so that a
    # one_for_all restart is all take-overs and forks none.
    STANDBYS = {Way.SUPERVISED_FORKED: len(RANKS_PER_NODE), Way.SUPERVISED_STANDBYS: WORLD}

    def __init__(self, model: Model, way: Way = Way.SUPERVISED) -> None:
        from supervisor import SupervisionConfig
        from supervisor.state import StateConfig, StateKind
        from supervisor.supervision import GroupSupervisor
        from supervisor.supervision.init_policy import InitPolicy
        from supervisor.supervision.restart_policy import RestartPolicy, RestartStrategy

        super().__init__()
        spares = self.STANDBYS.get(way, 0)
        self.pool, self.group = _pool_and_group(model, self.PREFIXES[way], spares=spares)
        strategy = RestartStrategy.ONE_FOR_ONE if way is Way.SUPERVISED else RestartStrategy.ONE_FOR_ALL
        standbys: dict[str, Any] = {}
        if way is Way.SUPERVISED_FORKED:  # one standby: the spare bundle of the dead rank's node is for it
            standbys = dict(standbys=1, standby_check_s=0.5, standby_preload=PRELOAD)
        elif spares:
            standbys = dict(standbys=spares, standby_check_s=0.5, standby_preload=PRELOAD, standby_warmup_method="warm_up")
        config = SupervisionConfig(
            init_method="init_model", probe_period_s=1.0,
            init_policy=InitPolicy(timeout_s=120, attempts=3, backoff_initial_s=0.05, backoff_max_s=0.5, backoff_jitter_s=0.0),
            restart=RestartPolicy(strategy=strategy, max_restarts=10_000, backoff_initial_s=0.0),
            state=StateConfig(kind=StateKind.SHARDED, snapshot_every=1, snapshot_memory_mb=8 * (model.pad_mb + 1) * WORLD),
            **standbys,
        )  # fmt: skip
        self.sup = GroupSupervisor(self.group, config).start()
        self.rollbacks = 0
        self.snapshot_errors: list[str] = []

    def loop(self) -> None:
        from supervisor.errors import GroupFailedError

        domain, step = self.sup.state_domain, 0
        while not self._stop.is_set():
            try:
                step = self._step(domain, step)
            except GroupFailedError as exc:  # out of init attempts, say: the job is over, the bench goes on
                self.failure = str(exc).splitlines()[0]
                print(f"state_goodput: the supervised group FAILED: {self.failure}", flush=True)
                return
            self.done = step

    def _step(self, domain: Any, step: int) -> int:
        """One step from ``step`` (its snapshot first); the next step to run."""
        from ray.exceptions import RayError

        from supervisor.errors import RolledBack

        try:
            try:
                domain.step_boundary(step)  # the snapshot before the step (snapshot_every = 1)
            except RayError as exc:
                # A rank killed during the snapshot call: the call is not a supervised one, so
                # Ray's error comes through. The rollback is announced by the next call.
                self.snapshot_errors.append(type(exc).__name__)
                return step
            self.group.train_step(step)
            return step + 1
        except RolledBack as rolled_back:  # every rank is at that step again: replay from it
            self.rollbacks += 1
            return rolled_back.step

    def victim(self, rank: int) -> Proc | None:
        from supervisor.core.worker.actor_heartbeat import wait_for_beat

        try:
            return Proc.of(wait_for_beat(self.group.workers[rank], timeout_s=0.5).pid)
        except Exception:  # being replaced: no process to kill yet
            return None

    def finish(self) -> tuple[int, list[str]]:
        self.join()
        try:
            return self.done, [] if self.failure else _digests(self.group)
        finally:
            self.sup.stop()
            self.group.kill()
            self.pool.teardown()


def _all_or_failure(refs: list[Any], timeout_s: float = 300.0) -> list[Any]:
    """Every result, or the first failure as soon as it is known (a dead rank's peers may sit in
    gloo until its timeout: ray.get of the list would wait for them)."""
    import ray

    pending, deadline = list(refs), time.monotonic() + timeout_s
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError(f"{len(pending)} ranks did not answer within {timeout_s}s")
        ray.get(ready)  # raises the rank's failure
    return ray.get(refs)


class CheckpointRestartJob(_Loop):
    def __init__(self, model: Model, root: Path) -> None:
        super().__init__()
        self.model, self.root = model, str(root)
        self.pool, self.group = _pool_and_group(model, "sg-ckpt-0-")
        self.procs = self._procs()

    def _procs(self) -> list[Proc | None]:
        import ray

        return [Proc.of(pid) for pid in ray.get([w.process.remote() for w in self.group.workers])]

    def loop(self) -> None:
        while not self._stop.is_set():
            step = self.done
            try:
                _all_or_failure([w.step_and_checkpoint.remote(step, self.root) for w in self.group.workers])
            except Exception:
                self._restart()
                continue
            self.done = step + 1
            _prune(self.root, keep=self.done)

    def _restart(self) -> None:
        """The whole group again, from the last complete checkpoint."""
        import ray

        self.restarts += 1
        self.procs = [None] * WORLD
        self.group.kill()
        _, self.group = _pool_and_group(self.model, f"sg-ckpt-{self.restarts}-", self.pool)
        if self.done:
            ray.get([w.load_checkpoint.remote(self.root, self.done) for w in self.group.workers])
        self.procs = self._procs()

    def victim(self, rank: int) -> Proc | None:
        return self.procs[rank]

    def finish(self) -> tuple[int, list[str]]:
        self.join()
        try:
            return self.done, _digests(self.group)
        finally:
            self.group.kill()
            self.pool.teardown()


def _prune(root: str, keep: int) -> None:
    """Drop checkpoints older than the one before ``keep`` (one complete checkpoint is always left)."""
    import shutil

    for name in os.listdir(root):
        if name.startswith("step-") and int(name[5:]) < keep - 1:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# -- Ray Train v2 -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainFiles:
    """What Ray Train's ranks and the bench share, under one directory: each rank's process, the
    progress rank 0 reports after every step, the step to stop at, and the final digests."""

    root: str

    def proc(self, rank: int) -> str:
        return os.path.join(self.root, f"proc-{rank}.json")

    @property
    def progress(self) -> str:
        return os.path.join(self.root, "progress.json")

    @property
    def stop(self) -> str:
        return os.path.join(self.root, "stop.json")

    def digest(self, rank: int) -> str:
        return os.path.join(self.root, f"digest-{rank}.json")


def write_json(path: str, value: Any) -> None:
    """Atomically: a reader never sees half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stop_step(files: TrainFiles) -> int | None:
    value = read_json(files.stop)
    return None if value is None else int(value["at"])


def ray_train_loop(config: dict[str, Any]) -> None:
    """Each Ray Train rank: the example worker's model and steps in Ray Train's process group, a
    checkpoint reported every step, restored from Ray Train's latest one after a restart."""
    import ray.train
    from ray.train import Checkpoint

    from supervisor.core.state_tree import state_digest

    files = TrainFiles(config["files"])
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    # The worker reads its identity from the environment; Ray Train formed the process group already.
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(context.get_local_world_size())})
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "0")
    proc = Proc.of(os.getpid())
    write_json(files.proc(rank), asdict(proc) if proc else None)
    worker = ActorUpdateWorker(**config["model"])
    worker.build_in_process_group()
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            worker.load_state_dict(load_dcp(worker.state_dict(), os.path.join(directory, f"rank-{rank}")))
    while True:
        at = stop_step(files)
        if at is not None and worker.step >= at:
            break
        worker.train_step(worker.step)
        with tempfile.TemporaryDirectory() as tmp:
            save_dcp(worker.state_dict(), os.path.join(tmp, f"rank-{rank}"))
            ray.train.report({"step": worker.step}, checkpoint=Checkpoint.from_directory(tmp), checkpoint_dir_name=f"step-{worker.step:09d}")
        if rank == 0:
            write_json(files.progress, {"step": worker.step})
    write_json(files.digest(rank), {"step": worker.step, "digest": state_digest(worker.state_dict())})


def ray_train_available() -> str | None:
    """None when ``ray.train.torch`` imports here; else why not (naming the extra)."""
    try:
        importlib.import_module("ray.train.torch")
        return None
    except ImportError as exc:
        return f"{RAY_TRAIN_MISSING} ({exc.__class__.__name__}: {str(exc).splitlines()[0]})"


def _fit_ray_train(address: str, files_root: str, storage: str, model: dict[str, Any]) -> None:
    """The Ray Train job, until its ranks stop; run in a process of its own by :class:`RayTrainJob`
    (``fit`` blocks, and Ray Train's driver side stays out of the bench's process)."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    trainer = TorchTrainer(
        ray_train_loop,
        train_loop_config={"files": files_root, "model": model},
        torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=WORLD, use_gpu=False, placement_strategy="SPREAD"),
        run_config=RunConfig(
            name="state-goodput", storage_path=storage,
            failure_config=FailureConfig(max_failures=-1),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
        ),
    )  # fmt: skip
    trainer.fit()


class RayTrainJob:
    """The Ray Train way: the trainer in a child process connected to the cluster; progress, processes
    and digests through :class:`TrainFiles`."""

    def __init__(self, model: Model, address: str, workdir: Path, log: Path) -> None:
        self.files = TrainFiles(str(workdir / "files"))
        os.makedirs(self.files.root, exist_ok=True)
        code = f"from bench.state_goodput import _fit_ray_train; _fit_ray_train({address!r}, {self.files.root!r}, {str(workdir / 'storage')!r}, {asdict(model)!r})"
        self.log = log.open("a")
        env = {**os.environ, "RAY_TRAIN_V2_ENABLED": "1", "PYTHONPATH": os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH", "")] if p)}
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def progress(self) -> int:
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Ray Train job exited with {self.proc.returncode} (see {self.log.name})")
        value = read_json(self.files.progress)
        return 0 if value is None else int(value["step"])

    def victim(self, rank: int) -> Proc | None:
        value = read_json(self.files.proc(rank))
        return None if value is None else Proc(**value)

    def finish(self) -> tuple[int, list[str]]:
        at = self.progress() + STOP_MARGIN  # the ranks are within a step of each other: all see it before `at`
        write_json(self.files.stop, {"at": at})
        try:
            self.proc.wait(600)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.log.close()
        digests = [read_json(self.files.digest(r)) for r in range(WORLD)]
        if self.proc.returncode != 0 or any(d is None or d["step"] != at for d in digests):
            raise RuntimeError(f"the Ray Train job did not stop at step {at} (exit {self.proc.returncode}, digests {digests}; see {self.log.name})")
        return at, [d["digest"] for d in digests]


# -- the windows --------------------------------------------------------------------------------


def kill_times(start_s: float, window_s: float, kill_every_s: float | None) -> list[float]:
    """When a window's kills are due: at its start and every ``kill_every_s`` after, inside it."""
    if not kill_every_s:
        return []
    return [start_s + i * kill_every_s for i in range(int(window_s // kill_every_s) + 1) if i * kill_every_s < window_s]


def wait_first_step(job: Job, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while job.progress() == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no first step after {timeout_s}s")
        time.sleep(0.05)


def _until_stepping(job: Job, timeline: Timeline, t0: float, max_extra_s: float) -> float:
    """Sample until the job's progress passes the highest it had (a step done after the window's
    kills); the time it did, or ``max_extra_s`` from now at most."""
    high = max(s for _, s in timeline.samples)
    deadline = time.monotonic() + max_extra_s
    while (progress := job.progress()) <= high and time.monotonic() < deadline:
        timeline.samples.append((time.monotonic() - t0, progress))
        time.sleep(SAMPLE_S / 5)
    return time.monotonic() - t0


def run_windows(
    job: Job, way: Way, rates: tuple[float | None, ...], window_s: float, settle_s: float, seed: int, max_extra_s: float = 300.0
) -> Timeline:  # fmt: skip
    """Drive ``job`` through a window of each of ``rates`` (None: fault-free), sampling its progress."""
    rng = random.Random(seed)
    wait_first_step(job)
    time.sleep(settle_s)
    timeline = Timeline(way)  # type: ignore[arg-type]  # goodput's bookkeeping, our ways
    t0 = time.monotonic()
    timeline.samples.append((0.0, job.progress()))
    for kill_every_s in rates:
        start = time.monotonic() - t0
        first = job.progress()
        window = Window(kill_every_s, start, start + window_s, 0)
        due = kill_times(start, window_s, kill_every_s)
        rank = rng.randrange(WORLD) if due else None
        while (now := time.monotonic() - t0) < window.end_s:
            if due and now >= due[0] and rank is not None:
                victim = job.victim(rank)
                if victim is not None and victim.kill():
                    window.kills.append(now)
                    due.pop(0)
                    rank = rng.randrange(WORLD)
            timeline.samples.append((now, job.progress()))
            time.sleep(SAMPLE_S)
        if kill_every_s:
            # The kills' aftermath counts in their window: it lasts until the job steps again past
            # where it was (a way that takes longer to recover than the interval pays for it here,
            # not in the fault-free window after it).
            window.end_s = _until_stepping(job, timeline, t0, max_extra_s)
        last = job.progress()
        timeline.samples.append((window.end_s, last))
        window.steps = last - first
        timeline.windows.append(window)
        rate = f"kill every {kill_every_s:g} s" if kill_every_s else "fault-free"
        print(
            f"state_goodput {way.value}, {rate}: {window.steps_per_min:.0f} steps/min over {window.end_s - window.start_s:.1f} s, "
            f"{len(window.kills)} kills; stalls {timeline.stalls(window)}",
            flush=True,
        )  # fmt: skip
    return timeline


@dataclass
class Outcome:
    """A way's measured run: its windows, where it stopped, and whether its state was bit-exact there."""

    timeline: Timeline
    final_step: int
    digests: list[str]
    exact: bool | None = None
    failure: str | None = None  # the way gave up (its group FAILED) before the end


def settings(quick: bool) -> dict[str, Any]:
    """``run``'s arguments for ``python -m bench`` (``--quick``: a smoke run, figures not published)."""
    return {"window_s": 15.0, "cycles": 1, "settle_s": 3.0} if quick else {"window_s": 60.0, "cycles": 1, "settle_s": 20.0}


def fault_free_digests(model: Model, steps: list[int]) -> dict[int, list[str]]:
    """Every rank's digest after each of ``steps`` (ascending) of one fault-free run of the worker."""
    pool, group = _pool_and_group(model, "sg-reference-")
    out: dict[int, list[str]] = {}
    try:
        done = 0
        for step in sorted(set(steps)):
            while done < step:  # in chunks: one call per chunk, not per step
                count = min(2000, step - done)
                group.train_steps(done, count)
                done += count
            out[step] = _digests(group)
    finally:
        group.kill()
        pool.teardown()
    return out


@contextlib.contextmanager
def _cluster() -> Iterator[str]:
    import ray

    from .common import local_cluster

    cluster = local_cluster([NODE, NODE])
    try:
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()


def run(
    window_s: float = 60.0, cycles: int = 1, settle_s: float = 20.0, seed: int = 0, model: Model | None = None, ways: tuple[Way, ...] = tuple(Way)
) -> list[Row]:  # fmt: skip
    """The ways (see the module's docstring), then the fault-free reference run for the digests."""
    model = model or Model()
    rates = (*CYCLE * cycles, None)
    missing = ray_train_available()
    if missing:
        print(f"bench.state_goodput: {missing}", flush=True)
    outcomes: dict[Way, Outcome] = {}
    with _cluster() as address, tempfile.TemporaryDirectory(prefix="state-goodput-") as tmp:
        for way in ways:
            if way is Way.RAY_TRAIN and missing:
                continue
            job = _start(way, model, address, Path(tmp) / way.name.lower())
            try:
                timeline = run_windows(job, way, rates, window_s, settle_s, seed)
            finally:
                final_step, digests = job.finish()
            outcomes[way] = Outcome(timeline, final_step, digests, failure=getattr(job, "failure", None))
            print(f"state_goodput {way.value}: stopped at step {final_step}; {_recoveries(job)}", flush=True)
        reference = fault_free_digests(model, [o.final_step for o in outcomes.values() if not o.failure])
    for outcome in outcomes.values():
        outcome.exact = None if outcome.failure else outcome.digests == reference[outcome.final_step]
    if missing:
        print(f"bench.state_goodput: {missing}", flush=True)
    return rows(outcomes, window_s)


def _recoveries(job: Job) -> str:
    if isinstance(job, SupervisedJob):
        return f"{job.rollbacks} rollbacks; snapshot calls failed by a kill: {job.snapshot_errors or 'none'}"
    if isinstance(job, CheckpointRestartJob):
        return f"{job.restarts} restarts from the disk checkpoint"
    return "Ray Train restarted its worker group itself"


def _start(way: Way, model: Model, address: str, workdir: Path) -> Job:
    workdir.mkdir(parents=True, exist_ok=True)
    if way in SUPERVISED_WAYS:
        job: Any = SupervisedJob(model, way)
    elif way is Way.CHECKPOINT_RESTART:
        job = CheckpointRestartJob(model, workdir / "checkpoints")
    else:
        return RayTrainJob(model, address, workdir, workdir / "ray_train.log")
    job.start()
    return job


def rows(outcomes: dict[Way, Outcome], window_s: float) -> list[Row]:
    """The RESULTS.md rows: each way's effective time per rate, then the supervised way against each other."""
    out = []
    for kill_every_s in KILL_RATES_S:
        for way, outcome in outcomes.items():
            faulty, windows, kills = pace([outcome.timeline], kill_every_s)
            free, free_windows, _ = pace([outcome.timeline], None)
            exact = {True: "final state bit-exact with a fault-free run", False: "**final state differs from a fault-free run's**", None: "not checked"}[outcome.exact]
            if outcome.failure:
                exact = f"**the group FAILED and the job stopped: {outcome.failure}**"
            case = f"{way.value}, 1 SIGKILL / {kill_every_s:g} s ({kills} in {windows} windows of {window_s:g} s; {exact} at step {outcome.final_step})"
            goal = EFFECTIVE_GOAL if way in SUPERVISED_WAYS and kill_every_s == KILL_RATES_S[0] else ""
            out.append(Row("state goodput: steps/min with faults / fault-free", case, faulty, f"its fault-free windows ({free_windows})", free, goal, unit="steps/min"))
        for way in (w for w in SUPERVISED_WAYS if w in outcomes):
            ours = effective_time([outcomes[way].timeline], kill_every_s)
            for other in (o for o in (Way.CHECKPOINT_RESTART, Way.RAY_TRAIN) if o in outcomes):
                goal = AGAINST_RAY_TRAIN_GOAL if other is Way.RAY_TRAIN and kill_every_s == KILL_RATES_S[0] else ""
                out.append(
                    Row(
                        f"state goodput: effective time, {way.value.split(' (')[0]} against {other.name.lower().replace('_', '-')}'s",
                        f"1 SIGKILL / {kill_every_s:g} s", ours, other.value, effective_time([outcomes[other].timeline], kill_every_s), goal,
                        unit="of fault-free",
                    )  # fmt: skip
                )
    return out


WAY_NAMES = ",".join(w.name.lower() for w in Way)


def parse_ways(text: str) -> tuple[Way, ...]:
    """``--ways``: comma-separated names of :class:`Way` members, any case."""
    chosen = [name.strip().upper() for name in text.split(",") if name.strip()]
    unknown = [name.lower() for name in chosen if name not in Way.__members__]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown way(s) {', '.join(unknown) or '(none given)'}: the ways are {WAY_NAMES}")
    return tuple(Way[name] for name in chosen)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a smoke run: 15 s windows, 3 s settling")
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--cycles", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pad-mb", type=float, default=0.0, help="MiB of extra state per rank (the example's model has a few KiB)")
    parser.add_argument("--ways", type=parse_ways, default=tuple(Way), help=f"the ways to run, comma-separated (default: all: {WAY_NAMES})")
    args = parser.parse_args()
    chosen = settings(args.quick)
    if args.window_s is not None:
        chosen["window_s"] = args.window_s
    if args.cycles is not None:
        chosen["cycles"] = args.cycles
    print_rows(run(seed=args.seed, model=Model(pad_mb=args.pad_mb), ways=args.ways, **chosen))


if __name__ == "__main__":
    main()
