"""The chaos harness: a local multi-node Ray cluster on 127.0.0.1, the example job's daemon as a
subprocess (as users run it), and reading what the daemon did (its JSON log, its state record, the
cluster's tables). This process is a second Ray driver: it injects faults and checks the results.
"""

from __future__ import annotations

import datetime
import enum
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .reference import GroupRecipe

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray address on loopback

__all__ = [
    "REPO", "BIN", "ENV", "ChaosCluster", "JobOptions", "TrainedGroup", "TRAINED_GROUPS", "Daemon", "wait_until", "event_time", "rank_actor",
    "actor_pid", "leftovers", "stop_everything",
]  # fmt: skip

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_DEDUP_LOGS": "0"}
# As examples/rlhf/rlhf.toml: every rank forked from its node's zygote, which imported these once.
PRELOAD = ("torch", "torch.distributed.optim", "tensordict")
# 6 GPUs a node, as examples/rlhf/rlhf.toml: the job's 10 ranks fit on two nodes, and still fit on what
# is left after a node loss (before a node is added back).
GPU_NODE = {"num_cpus": 6, "num_gpus": 6}


def event_time(event: dict[str, Any]) -> float:
    """Wall-clock time of a daemon log event (its ISO ``timestamp``)."""
    return datetime.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.1) -> Any:
    """Poll ``condition`` until it returns something truthy; TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(interval_s)


class ChaosCluster:
    """A CPU-only head (the daemon, its KV store and this driver) and ``gpu_nodes`` nodes with 6 CPUs
    and 6 declared GPUs each; the example job needs 10 GPUs over its pools, so one node is spare.

    The head's GCS keeps its tables in a Redis on 127.0.0.1 (Ray's GCS fault tolerance, as KubeRay's
    ``ray.io/ft-enabled`` runs it), so a scenario can kill the GCS and start it again (:meth:`restart_gcs`)."""

    def __init__(self, gpu_nodes: int = 3) -> None:
        import ray

        from supervisor.daemon.local_cluster import LocalCluster

        self.wanted_gpu_nodes = gpu_nodes
        self.redis = RedisServer()
        self.cluster: Any = None
        try:
            # Read by the head's GCS when it starts, and again when it is started again.
            os.environ["RAY_REDIS_ADDRESS"] = self.redis.address
            os.environ["RAY_external_storage_namespace"] = f"chaos-{self.redis.port}"
            self.cluster = LocalCluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
            self.gpu_nodes: list[Any] = []
            self.restore()
            ray.init(address=self.cluster.address, include_dashboard=False, log_to_driver=False, namespace="chaos")
        except BaseException:
            if self.cluster is not None:
                self.cluster.shutdown()
            self.redis.stop()
            raise

    def restart_gcs(self, outage_s: float) -> None:
        """Kill the head's GCS process, wait ``outage_s``, start it again (it reloads from Redis)."""
        self.cluster.head_node.kill_gcs_server()
        time.sleep(outage_s)
        self.cluster.head_node.start_gcs_server()

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def remove_node(self, node_id: str) -> None:
        """A node loss: its raylet and every process on it are killed."""
        node = next(n for n in self.gpu_nodes if n.node_id == node_id)
        self.gpu_nodes.remove(node)
        self.cluster.remove_node(node)

    def add_gpu_node(self) -> str:
        node = self.cluster.add_node(**GPU_NODE)
        self.gpu_nodes.append(node)
        self.cluster.wait_for_nodes()
        return str(node.node_id)

    def restore(self) -> None:
        """Back to ``gpu_nodes`` GPU nodes (a scenario may have removed or added some); called once
        the scenario's job is torn down, so a surplus node holds nothing."""
        while len(self.gpu_nodes) < self.wanted_gpu_nodes:
            self.add_gpu_node()
        while len(self.gpu_nodes) > self.wanted_gpu_nodes:
            self.cluster.remove_node(self.gpu_nodes.pop())

    def shutdown(self) -> None:
        import ray

        try:
            ray.shutdown()
            self.cluster.shutdown()
        finally:
            self.redis.stop()


class RedisServer:
    """Debian's ``redis-server`` on 127.0.0.1 and a free port, without persistence; stopped by pid."""

    def __init__(self) -> None:
        import shutil
        import socket
        import tempfile

        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server not found: install Debian's redis-server package (`make tools`)")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._dir = tempfile.mkdtemp(prefix="chaos-redis-")
        self.proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no", "--dir", self._dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def listening() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                return self.proc.poll() is not None  # exited: the wait ends, and the check below says so

        wait_until(listening, 10, "redis-server to listen", 0.05)
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}")

    def stop(self) -> None:
        import shutil

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        shutil.rmtree(self._dir, ignore_errors=True)


class StateKind(enum.Enum):
    """A trained group's ``state`` in the spec."""

    REPLICATED = "replicated"
    SHARDED = "sharded"


@dataclass(frozen=True)
class TrainedGroup:
    """A trained group of the chaos job: its pool has one rank on each of two nodes, as in
    examples/rlhf/rlhf.toml (its kwargs too: the state-intact invariant trains the same class with them)."""

    name: str
    cls: str
    kwargs: dict[str, Any]
    state: StateKind
    world_size: int = 2

    def recipe(self) -> GroupRecipe:
        return GroupRecipe.of(self.name, self.cls, self.kwargs, self.world_size)


TRAINED_GROUPS = (
    TrainedGroup(
        "actor",
        "examples.rlhf.training:ActorUpdateWorker",
        {"in_dim": 16, "hidden": 32, "seed": 0, "lr": 0.01, "batch_size": 16},
        StateKind.SHARDED,
    ),
    TrainedGroup(
        "critic",
        "examples.rlhf.training:CriticWorker",
        {"in_dim": 16, "hidden": 32, "seed": 1, "lr": 0.01, "batch_size": 16},
        StateKind.REPLICATED,
    ),
)


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # ints, floats and strings are spelled alike in TOML and JSON


@dataclass(frozen=True)
class JobOptions:
    """The example RLHF job as a chaos run configures it (pools and groups as in examples/rlhf/rlhf.toml).

    The driver is :mod:`chaos.driver`: the example's, plus its trained state logged when a stop ends
    it (the example logs it only at its end), so every scenario can check the state is intact.
    """

    steps: int = 100_000  # the run ends when the scenario stops it
    step_interval_s: float = 0.0
    batch_size: int = 64
    max_new_tokens: int = 24  # long enough generate calls that kills land inside them
    max_restarts: int = 100_000
    init_attempts: int = 3
    call_timeout_s: float = 30.0
    probe_period_s: float = 2.0
    probe_timeout_s: float = 10.0
    progress_interval_s: float = 2.0
    resource_timeout_s: float = 300.0
    target_token: int = 7
    heartbeat_interval_s: float = 0.5
    orphan_grace_s: float = 30.0
    shutdown_timeout_s: float = 30.0  # room for a slow shutdown method (slow-stop)
    trained: bool = True  # the actor and critic groups (state sharded and replicated), snapshot every step
    snapshot_memory_mb: float = 64.0
    disk_dir: str | None = None  # the disk fallback of the trained groups' snapshots (absolute)
    disk_snapshot_every: int = 0
    capacity_factor: float = 1.0  # spare bundles in every pool (successors of ranks on a draining node go there)
    drain_hand_over: bool = True  # act on drain notices (false: a preemption costs a node loss)

    def spec(self, name: str, fault_dir: Path) -> str:
        group = textwrap.dedent(
            f"""
            env = {{ RLHF_FAULT_DIR = "{fault_dir}" }}
            preload = {json.dumps(list(PRELOAD))}
            init_method = "init_model"
            init_timeout_s = 120.0
            init_attempts = {self.init_attempts}
            max_restarts = {self.max_restarts}
            restart_window_s = 600.0
            probe_period_s = {self.probe_period_s}
            probe_timeout_s = {self.probe_timeout_s}
            call_timeout_s = {self.call_timeout_s}
            shutdown_method = "shutdown"
            shutdown_timeout_s = {self.shutdown_timeout_s}
            drain_hand_over = {str(self.drain_hand_over).lower()}
            """
        )
        lm = (
            f"kwargs = {{ vocab_size = 64, hidden = 32, seed = 0, max_new_tokens = {self.max_new_tokens} }}\n"
        )
        layouts = [("rollout", "[2, 2]"), ("reference", "[1, 1]")]
        layouts += [(g.name, str([1] * g.world_size)) for g in TRAINED_GROUPS if self.trained]
        pools = "".join(
            f"[pools.{pool}]\nprocess_on_nodes = {layout}\nresource_timeout_s = {self.resource_timeout_s}\nprogress_interval_s = {self.progress_interval_s}\n"
            f"capacity_factor = {self.capacity_factor}\n"
            for pool, layout in layouts
        )
        trained = "".join(self._trained_group(g, group) for g in TRAINED_GROUPS if self.trained)
        return (
            f'[supervisor]\nname = "{name}"\nheartbeat_interval_s = {self.heartbeat_interval_s}\norphan_grace_s = {self.orphan_grace_s}\n'
            f'[ray]\npython_path = ["{REPO}"]\n'
            + pools
            + f'[groups.rollout]\npool = "rollout"\nclass = "examples.rlhf.workers:RolloutWorker"\n{lm}{group}'
            + f'[groups.reference]\npool = "reference"\nclass = "examples.rlhf.workers:ReferenceWorker"\n{lm}{group}'
            + trained
            + "[metrics]\nport = 0\nlinger_s = 0\n"
            + '[driver]\nfunction = "chaos.driver:main"\n'
            + f"[driver.args]\nsteps = {self.steps}\nbatch_size = {self.batch_size}\nstep_interval_s = {self.step_interval_s}\n"
            + f"target_token = {self.target_token}\n"
        )

    def _trained_group(self, g: TrainedGroup, common: str) -> str:
        kwargs = ", ".join(f"{k} = {_toml_value(v)}" for k, v in g.kwargs.items())
        state = (
            f'state = "{g.state.value}"\nsnapshot_every = 1\nsnapshot_memory_mb = {self.snapshot_memory_mb}\n'
        )
        if self.disk_dir:
            state += (
                f"disk_dir = {_toml_value(self.disk_dir)}\ndisk_snapshot_every = {self.disk_snapshot_every}\n"
            )
        return f'[groups.{g.name}]\npool = "{g.name}"\nclass = "{g.cls}"\nkwargs = {{ {kwargs} }}\n{common}{state}'


class Daemon:
    """``supervisor start SPEC --address ... --log-json`` as a subprocess; its log is kept in a file."""

    def __init__(self, name: str, spec: Path, address: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed by stop()/wait_exit()
        self.proc = subprocess.Popen(
            [str(BIN / "supervisor"), "start", str(spec), "--address", address, "--log-json"],
            stdout=self._log, stderr=subprocess.STDOUT, env=ENV, cwd=str(REPO),
        )  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def log_ending(self) -> str:
        """Why the daemon ended, on one line: the last error it logged and the last line of a traceback.
        A report keeps only the first line of an abort, and the tail of a JSON log starts mid-event."""
        errors = [e for e in self.events() if e.get("level") in ("error", "critical")]
        plain = [line for line in self.log_path.read_text().splitlines() if line.strip() and not line.startswith("{")]
        parts = []
        if errors:
            last = errors[-1]
            parts.append(" ".join(f"{k}={last[k]}" for k in ("event", "error", "reason", "group", "rank") if k in last))
        if plain:
            parts.append(plain[-1].strip())
        return " | ".join(parts) or "its log has no error and no traceback"

    def record(self) -> Any:
        from supervisor.daemon.record import RecordStore

        return RecordStore().get(self.name)

    def wait_running(self, timeout_s: float = 180.0) -> Any:
        """The record once this daemon has it RUNNING; RuntimeError (with the log's tail) if it exits."""

        def running() -> Any:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited with {self.proc.returncode}: {self.log_ending()}")
            record = self.record()
            return record if record is not None and record.state == "running" and record.pid == self.proc.pid else None

        return wait_until(running, timeout_s, f"daemon {self.name} to be running", 0.2)

    def steps_done(self) -> int:
        return sum(1 for e in self.events() if e.get("event") == "rlhf_step")

    def wait_steps(self, n: int, timeout_s: float = 120.0) -> None:
        def done() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon {self.name} exited with {self.proc.returncode} before {n} steps: {self.log_ending()}")
            return self.steps_done() >= n

        wait_until(done, timeout_s, f"{n} steps of {self.name}", 0.2)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float = 120.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.flush()

    def stop(self) -> None:
        """Make sure the process is gone (SIGKILL if it still runs)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self._log.close()


def rank_actor(record: Any, group: str, rank: int) -> tuple[str, Any]:
    """The name and handle of ``rank``'s current actor (raises ValueError when it has none)."""
    import ray

    name = record.groups[group].actor_names[rank]
    return name, ray.get_actor(name, namespace=record.namespace)


def actor_pid(handle: Any, timeout_s: float = 10.0) -> int:
    """The process id of a supervised actor, from its heartbeat (there even while it runs a call)."""
    from supervisor.core.worker.actor_heartbeat import wait_for_beat

    return wait_for_beat(handle, timeout_s).pid


def leftovers(name: str) -> tuple[list[str], list[str], bool]:
    """What a supervisor left in the cluster: placement-group names, actor names, whether its record exists."""
    from supervisor.daemon.ownership import find_owned
    from supervisor.daemon.record import RecordStore

    owned = find_owned(name)
    return sorted(owned.placement_groups), list(owned.actors), RecordStore().get(name) is not None


def wait_nothing_left(name: str, timeout_s: float = 20.0) -> tuple[list[str], list[str], bool]:
    """``leftovers`` once they are gone, or what is still there after ``timeout_s`` (removal is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers(name)
        if not any(left) or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def stop_everything(name: str) -> None:
    """Remove whatever a failed run left (so the next scenario starts clean)."""
    from supervisor.daemon.ownership import find_owned, remove_owned
    from supervisor.daemon.record import RecordStore

    remove_owned(name, find_owned(name))
    RecordStore().delete(name)
