"""The supervisor daemon: one long-lived process that owns a spec's detached pools and groups.

Life of a daemon (:meth:`Daemon.run`)::

    connect ──> claim the record ──> STARTING: pools, groups (create or re-adopt), init ──> RUNNING
                                                                                             │
      SIGTERM / SIGINT / `supervisor stop` / driver returned or raised / a group FAILED ─────┘
                                                                                             v
                    exit code <── remove everything owned, delete the record <── STOPPING

* Claim: a record with a live heartbeat means another daemon of that name runs: refuse. A record
  whose daemon is gone is taken over, and its pools and workers are re-adopted (same placement groups,
  healthy actors untouched); anything it owned that the spec no longer describes is removed.
* While it runs, a heartbeat thread rewrites the state record every ``heartbeat_interval_s`` (what
  ``supervisor status`` reads) and watches for ``supervisor stop``; the GroupSupervisors detect,
  replace and report; the driver (if any) runs in its own thread.
* Every way out except SIGKILL goes through teardown, which ends with a sweep of everything the
  supervisor owns by name, so nothing is left behind even after a half-finished start.
"""

from __future__ import annotations

import _thread
import enum
import os
import signal
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..core.actor_class import ClassWithInitArgs
from ..core.group import GroupPlacement, WorkerGroup
from ..errors import ConfigError, SupervisorError, first_line
from ..observability import metrics
from ..observability.hooks import ObservingHooks
from ..observability.log import get_logger
from ..placement.budget import cluster_misfits, cpu_oversubscription
from ..placement.cluster_state import read_snapshot
from ..placement.layout import BundleRef
from ..placement.pool import ResourcePool
from ..supervision import GroupState, GroupSupervisor
from ..supervision.init_policy import RankAttempt
from ..supervision.lifecycle import adopt_group, create_group, init_group
from ..supervision.restart_policy import FailureReason, RestartRecord
from .cluster import connect
from .driver import DriverContext, DriverRun
from .kv import KV_ACTOR_NAME, KVStore
from .ownership import Owned, find_owned, remove_owned
from .record import (
    DaemonState,
    FailureEvent,
    GroupRecord,
    Liveness,
    PoolRecord,
    RecordStore,
    StandbyRecord,
    SupervisorRecord,
    liveness,
)
from .spec import GroupSpec, SigtermAction, SupervisorSpec, import_object

__all__ = ["Daemon", "ExitCode", "StopReason", "TeardownScope", "teardown_scope", "AlreadyRunningError"]

log = get_logger("daemon")

RECENT_FAILURES = 20  # failure events kept in the record for `supervisor status`
OVERSUBSCRIPTION_RECHECK_S = 30.0  # ranks move between nodes when they are replaced


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # a group FAILED, the driver raised, or start-up failed
    SPEC_INVALID = 2


class StopReason(enum.Enum):
    """Why the daemon tears down; decides the exit code."""

    SIGTERM = "SIGTERM"
    SIGINT = "SIGINT"
    STOP_COMMAND = "supervisor stop"
    DETACH_COMMAND = "supervisor stop --detach"  # e.g. to upgrade the daemon: the next start re-adopts
    SIGTERM_DETACH = "SIGTERM (on_sigterm = detach)"
    DRIVER_RETURNED = "driver returned"
    DRIVER_RAISED = "driver raised"
    GROUP_FAILED = "group failed"
    START_FAILED = "start failed"
    SUPERSEDED = "superseded"  # another daemon took the record over: leave everything to it

    @property
    def exit_code(self) -> ExitCode:
        failed = (StopReason.DRIVER_RAISED, StopReason.GROUP_FAILED, StopReason.START_FAILED, StopReason.SUPERSEDED)
        return ExitCode.FAILED if self in failed else ExitCode.OK


class TeardownScope(enum.Enum):
    EVERYTHING = "everything"  # shutdown methods, actors, placement groups, the record
    NOTHING = "nothing"  # leave the cluster as it is (someone else owns it, or it is a job to keep)


def teardown_scope(reason: StopReason, adopting: bool) -> TeardownScope:
    """What a teardown removes (pure).

    A daemon superseded by another leaves everything to it; one asked to detach leaves everything to
    the next start (an upgrade of the daemon). A daemon that failed to start while
    re-adopting a job that survived a crash leaves that job in place (a busy metrics port or a flaky
    init must not destroy a multi-day run): the next start re-adopts it, or `gc` collects it.
    """
    if reason in (StopReason.SUPERSEDED, StopReason.DETACH_COMMAND, StopReason.SIGTERM_DETACH) or (
        reason is StopReason.START_FAILED and adopting
    ):
        return TeardownScope.NOTHING
    return TeardownScope.EVERYTHING


class BudgetError(ConfigError):
    """The spec's pools and groups cannot fit the cluster (or a bundle); nothing was created."""


class AlreadyRunningError(SupervisorError):
    """Another daemon with this name is alive (its heartbeat is fresh)."""


class _StopDuringStart(KeyboardInterrupt):
    """Unwinds start-up when a stop arrives. A KeyboardInterrupt, because that is what Ray lets through
    its blocking calls (and transactional starts release what they acquired on any BaseException)."""


class DaemonHooks(ObservingHooks):
    """Metrics and logs, plus the recent failures the state record shows."""

    def __init__(self) -> None:
        self.failures: deque[FailureEvent] = deque(maxlen=RECENT_FAILURES)

    def on_worker_failed(self, group: str, rank: int, reason: str, detail: str, detection_s: float | None) -> None:
        super().on_worker_failed(group, rank, reason, detail, detection_s)
        self.failures.append(FailureEvent(time.time(), group, rank, reason, detail))

    def on_init_attempt(self, group: str, attempt: RankAttempt) -> None:
        super().on_init_attempt(group, attempt)
        if not attempt.outcome.ok:
            self.failures.append(FailureEvent(time.time(), group, attempt.rank, f"init_{attempt.outcome.value}", attempt.error or ""))


@dataclass
class _ManagedGroup:
    name: str
    spec: GroupSpec
    group: WorkerGroup
    supervisor: GroupSupervisor


class Daemon:
    """Runs one spec until it is stopped. ``run()`` returns the process exit code.

    Args:
        spec: the validated spec.
        address: Ray address overriding the spec (``--address`` or ``RAY_ADDRESS``); none and no
            ``ray.address`` in the spec: an embedded local Ray.
        install_signal_handlers: handle SIGTERM/SIGINT (only possible in the main thread).
        driver_stop_grace_s: how long a driver may take to return after a stop before teardown goes on.
    """

    def __init__(
        self, spec: SupervisorSpec, address: str | None = None, install_signal_handlers: bool = True, driver_stop_grace_s: float = 10.0
    ) -> None:
        self.spec = spec
        self.address = address or spec.ray.address
        self.install_signal_handlers = install_signal_handlers
        self.driver_stop_grace_s = driver_stop_grace_s
        self.hooks = DaemonHooks()
        self.owner = uuid.uuid4().hex
        self._phase = DaemonState.CONNECTING
        # Re-entrant: a signal handler runs on the main thread, possibly while it holds the lock.
        self._lock = threading.RLock()
        self._interruptible = False  # a stop signal unwinds start-up only while this is set
        self._linger_cut = threading.Event()
        self._stop_event = threading.Event()
        self._stop_reason: StopReason | None = None
        self._error: str | None = None
        self._embedded: Any = None
        self._store: RecordStore | None = None
        self._record: SupervisorRecord | None = None
        self._previous: SupervisorRecord | None = None
        self._pools: dict[str, ResourcePool] = {}
        self._groups: list[_ManagedGroup] = []
        self._driver: DriverRun | None = None
        self._kv: KVStore | None = None
        self._metrics_server: Any = None
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()

    # -- the whole life -------------------------------------------------------------------------
    def run(self) -> ExitCode:
        """Connect, claim, start, supervise until stopped, tear down. Returns the exit code."""
        try:
            self._connect()
            if self.install_signal_handlers:
                # After connecting: Ray's core worker installs its own SIGTERM handler, which ends the
                # process at once; ours must replace it so a SIGTERM means "tear down".
                signal.signal(signal.SIGTERM, self._on_signal)
                signal.signal(signal.SIGINT, self._on_signal)
            self._start_metrics()
            self._claim()
        except Exception as exc:  # nothing of this supervisor was touched yet
            log.error("daemon_not_started", supervisor=self.spec.name, error=first_line(exc, limit=None))
            self._stop_metrics()
            self._disconnect()
            return ExitCode.FAILED
        self._start_heartbeat()
        try:
            self._phase = DaemonState.STARTING
            if not self._stop_event.is_set():
                self._interruptible = True
                try:
                    self._start()
                finally:
                    self._interruptible = False
            self._phase = DaemonState.RUNNING
            self._write_record()
            log.info("supervisor_running", supervisor=self.spec.name, groups=[m.name for m in self._groups], metrics=self._metrics_address())
            reason = self._wait_for_stop()
        except KeyboardInterrupt:  # _StopDuringStart, or a KeyboardInterrupt Ray raised for a signal
            reason = self._stop_reason or StopReason.SIGINT
        except Exception as exc:
            self._error = first_line(exc, limit=None)
            log.error("start_failed", supervisor=self.spec.name, error=self._error)
            reason = StopReason.START_FAILED
        return self._teardown(reason)

    def request_stop(self, reason: StopReason) -> None:
        """Ask the daemon to tear down (thread-safe; the first reason is the one reported)."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
        self._stop_event.set()
        if self._interruptible and threading.current_thread() is not threading.main_thread():
            # Start-up blocks the main thread (resource waits can take minutes): interrupt it there.
            _thread.interrupt_main(signal.SIGTERM)

    def _on_signal(self, signum: int, frame: Any) -> None:
        reason = StopReason.SIGINT if signum == signal.SIGINT else StopReason.SIGTERM
        if reason is StopReason.SIGTERM and self.spec.supervisor.on_sigterm is SigtermAction.DETACH:
            reason = StopReason.SIGTERM_DETACH
        log.info("stop_signal", signal=signal.Signals(signum).name, phase=self._phase.value)
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
        self._stop_event.set()
        if self._phase is DaemonState.STOPPING:
            self._linger_cut.set()
        if self._interruptible:
            self._interruptible = False  # once: a second signal must not interrupt the unwinding
            raise _StopDuringStart()

    # -- connect and claim ----------------------------------------------------------------------
    def _connect(self) -> None:
        paths = self.spec.python_path()
        init_kwargs: dict[str, Any] = {"namespace": self.spec.namespace, "log_to_driver": False, "logging_level": "WARNING"}
        if self.address:
            pythonpath = os.pathsep.join([*paths, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
            # Actors (detached ones too) inherit the job's env_vars: they import user modules from here.
            connect(
                self.address, self.spec.path(self.spec.ray.auth_token_path), runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **init_kwargs
            )
        else:
            from .embedded_ray import EmbeddedRay

            if self.spec.ray.auth_token_path:
                log.warning("auth_token_path_unused", reason="no cluster address: the embedded Ray makes a token of its own")
            self._embedded = EmbeddedRay(self.spec.name, self.spec.ray, paths)
            self.address = self._embedded.start(**init_kwargs)
        self._store = RecordStore()

    def _claim(self) -> None:
        assert self._store is not None
        previous = self._store.get(self.spec.name)
        now = time.time()
        detached = previous is not None and previous.state == DaemonState.DETACHED.value
        if previous is not None and not detached and liveness(previous, now) is not Liveness.ORPHANED and _may_be_alive(previous):
            raise AlreadyRunningError(
                f"supervisor {self.spec.name} is already running (pid {previous.pid} on {previous.host}, heartbeat "
                f"{previous.heartbeat_age(now):.1f}s ago): stop it with `supervisor stop {self.spec.name}`"
            )
        if not self._store.claim(self.spec.name, previous.owner if previous else None, self.owner):
            raise AlreadyRunningError(f"supervisor {self.spec.name} is being started by another daemon at the same time")
        self._previous = previous
        # What the earlier incarnation owned stays in the record until this one has adopted it, so a
        # crash in the middle of re-adoption loses nothing.
        self._record = SupervisorRecord(
            name=self.spec.name,
            namespace=self.spec.namespace,
            owner=self.owner,
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=now,
            heartbeat_at=now,
            heartbeat_interval_s=self.spec.supervisor.heartbeat_interval_s,
            orphan_grace_s=self.spec.supervisor.orphan_grace_s,
            ray_address=self.address,
            ray_version=_ray_version(),
            metrics_address=self._metrics_address(),
            pools=dict(previous.pools) if previous else {},
            groups=dict(previous.groups) if previous else {},
            driver_progress=dict(previous.driver_progress) if previous else {},
            failures=list(previous.failures) if previous else [],
        )
        self.hooks.failures.extend(self._record.failures)
        self._write_record()
        if previous is not None:
            log.info("supervisor_record_taken_over", supervisor=self.spec.name, previous_pid=previous.pid, previous_host=previous.host)

    # -- start ----------------------------------------------------------------------------------
    def _start(self) -> None:
        self._check_cluster_budget()
        self._remove_unexpected()
        # Created once, re-attached (with its data) by a restarted daemon; removed with the rest at teardown.
        self._kv = KVStore.create_or_attach(self.spec.name, self.spec.namespace)
        for name in self.spec.groups_in_start_order():
            self._start_group(name, self.spec.groups[name])
        self._warn_cpu_oversubscription()
        if self.spec.driver is not None:
            self._start_driver()

    def _check_cluster_budget(self) -> None:
        # Pre-flight, before any placement group exists: pools that together cannot fit the cluster
        # would wait forever (the per-bundle budget was checked with the spec).
        if self._previous is not None:
            return  # re-adopting a running job: nodes it lost may rejoin; never refuse to supervise it
        used = {g.pool for g in self.spec.groups.values()}
        totals = {
            name: self.spec.resource_pool(name).reserved_total()
            for name in self.spec.pools
            if name in used and not self.spec.pools[name].autoscaling
        }
        misfits = cluster_misfits(totals, read_snapshot().total)
        if misfits:
            raise BudgetError("budget: " + "; ".join(misfits))

    def _warn_cpu_oversubscription(self) -> None:
        # Data processes are invisible to Ray's scheduler: say so when a node's workers need more CPUs
        # than it has (the job runs, slower). Shown by `supervisor status` too; re-checked every
        # OVERSUBSCRIPTION_RECHECK_S while running.
        try:
            snapshot = read_snapshot()
        except Exception as exc:  # only a warning: never a reason to fail the start
            log.warning("cpu_oversubscription_unchecked", error=first_line(exc))
            return
        node_cpus = {n.node_id: n.total.get("CPU", 0.0) for n in snapshot.alive_nodes}
        placements = [
            (rank.node_id, m.spec.worker_budget(m.name, self.spec.pools[m.spec.pool]))
            for m in list(self._groups)
            for rank in m.supervisor.ranks()
            if rank.node_id
        ]
        warnings = [f"CPU oversubscribed: {load.describe()}" for load in cpu_oversubscription(placements, node_cpus)]
        with self._lock:
            if self._record is None or warnings == self._record.warnings:
                return
            self._record.warnings = warnings
        for warning in warnings:  # logged when they change: replacements move ranks between nodes
            log.warning("cpu_oversubscribed", detail=warning)

    def _expected(self) -> tuple[set[str], set[str]]:
        """Placement-group names and actor names the spec describes (with the standbys, and the ranks
        they took over, that the earlier incarnation recorded for a group the spec still describes)."""
        pg_names = set()
        for name in self.spec.pools:
            pool = self.spec.resource_pool(name)
            pg_names.update([*pool.placement_group_names(), *filter(None, [pool.spare_placement_group_name()])])
        actors = {KV_ACTOR_NAME}
        for name, group in self.spec.groups.items():
            actors.update(self.spec.actor_names(name, ClassWithInitArgs(self._import(group.worker_class)).user_cls.__name__))
            earlier = self._earlier_group(name)
            if earlier is not None:
                actors.update([*earlier.actor_names, *(s.name for s in earlier.standbys)])
        return pg_names, actors

    def _earlier_group(self, name: str) -> GroupRecord | None:
        """The earlier incarnation's record of group ``name``, if it describes the same group as the spec
        (class, pool and world size): only then are its actor names, rendezvous and init state trusted."""
        earlier = self._previous.groups.get(name) if self._previous else None
        spec = self.spec.groups[name]
        if earlier is None or earlier.worker_class != spec.worker_class or earlier.pool != spec.pool:
            return None
        if len(earlier.actor_names) != sum(self.spec.pools[spec.pool].process_on_nodes):
            return None
        return earlier

    def _remove_unexpected(self) -> None:
        # Reconcile with what an earlier incarnation left: keep what the spec still describes.
        pg_names, actors = self._expected()
        owned = find_owned(self.spec.name)
        stale = Owned(
            {n: i for n, i in owned.placement_groups.items() if n not in pg_names}, [a for a in owned.actors if a not in actors]
        )
        if stale:
            log.info("removing_stale_resources", supervisor=self.spec.name, placement_groups=sorted(stale.placement_groups), actors=stale.actors)
            remove_owned(self.spec.name, stale)

    def _pool(self, name: str) -> ResourcePool:
        """The spec pool ``name``, its placement groups created or adopted (once per daemon)."""
        if name in self._pools:
            return self._pools[name]
        p = self.spec.pools[name]
        pool = self.spec.resource_pool(name)
        self._pools[name] = pool  # owned from here on: teardown removes it whatever happens next
        with self._lock:
            assert self._record is not None
            # Shown by status while the pool waits; an earlier incarnation's entry is kept until adopted.
            self._record.pools.setdefault(
                name,
                PoolRecord(name, pool.name_prefix, pool.placement_group_names(), {}, list(p.process_on_nodes), pool.spare_placement_group_name()),
            )
        pool.get_placement_groups(
            timeout_s=p.resource_timeout_s, progress_interval_s=p.progress_interval_s, autoscaling=p.autoscaling, hooks=self.hooks
        )
        earlier = self._previous.pools.get(name) if self._previous else None
        if earlier is not None and sorted(earlier.placement_groups) == sorted(pool.rank_order_names()):
            pool.restore_rank_order(earlier.placement_groups, earlier.bundle_nodes)
        names = pool.rank_order_names()
        nodes = pool.original_bundle_nodes()
        with self._lock:
            self._record.pools[name] = PoolRecord(
                name,
                pool.name_prefix,
                names,
                {n: [nodes[(i, b)] for b in range(count)] for i, (n, count) in enumerate(zip(names, _pg_sizes(pool), strict=True))},
                list(p.process_on_nodes),
                pool.spare_placement_group_name(),
            )
        return pool

    def _start_group(self, name: str, spec: GroupSpec) -> None:
        pool = self._pool(spec.pool)
        cls_with_init = ClassWithInitArgs(self._import(spec.worker_class), *spec.args, **spec.kwargs)
        budget = spec.worker_budget(name, self.spec.pools[spec.pool])
        cls_with_init.update_options({"num_cpus": budget.cpus, "num_gpus": budget.gpus})
        prefix = self.spec.group_prefix(name)
        earlier = self._previous.groups.get(name) if self._previous else None
        same = self._earlier_group(name)
        names = self.spec.actor_names(name, cls_with_init.user_cls.__name__)
        record = GroupRecord(
            name, spec.pool, spec.worker_class, names, restart_window_s=spec.restart_window_s, max_restarts=spec.max_restarts
        )
        if earlier is None:
            self._set_group_record(record)  # status shows it creating; an earlier entry stays until adopted
        placement = _placement(same) if same is not None else None
        live = set(find_owned(self.spec.name).actors) & set(placement.actor_names if placement else names)
        # Live actors with these names are adopted even without a record of them (a daemon that died
        # before recording them); then their rendezvous and init state are unknown: init runs on all.
        adopting = bool(live) or same is not None
        if adopting:
            group, new_ranks = adopt_group(
                pool, cls_with_init, prefix, self.spec.namespace, same.master_addr if same else None,
                same.master_port if same else None, spec.env, spec.actor_start_timeout_s, self.hooks, placement,
            )  # fmt: skip
            initialized = bool(same and same.initialized)
            to_init = list(range(group.world_size)) if (0 in new_ranks or not initialized) else new_ranks
        else:
            group = create_group(
                pool, cls_with_init, name_prefix=prefix, detached=True, worker_env=spec.env, namespace=self.spec.namespace,
                actor_start_timeout_s=spec.actor_start_timeout_s, hooks=self.hooks,
            )  # fmt: skip
            to_init = list(range(group.world_size))
        record.master_addr, record.master_port = group.master_address, int(group.master_port or 0) or None
        record.state = "initializing"
        if earlier is None:
            self._set_group_record(record)
        if spec.init_method and to_init:
            # An adopted group is a job that survived a crash: a failed init leaves it for the next start.
            init_group(
                group, spec.init_method, (), spec.init_kwargs, spec.init_policy(), self.hooks, ranks=to_init, kill_on_failure=not adopting
            )
        record.initialized = True
        history, counts = _restored_restarts(same) if same else ([], {})
        supervisor = GroupSupervisor(group, spec.supervision_config(), self.hooks, restart_history=history, rank_restarts=counts)
        with self._lock:  # from here on the record of this group is built from its supervisor
            self._record.groups[name] = record  # type: ignore[union-attr]
            self._groups.append(_ManagedGroup(name, spec, group, supervisor))
        supervisor.start()
        log.info("group_ready", group=name, world_size=group.world_size, adopted=adopting, initialized=sorted(to_init) if spec.init_method else [])

    def _import(self, path: str) -> Any:
        return import_object(path, self.spec.python_path())

    def _set_group_record(self, record: GroupRecord) -> None:
        with self._lock:
            assert self._record is not None
            self._record.groups[record.name] = record

    def _start_driver(self) -> None:
        assert self.spec.driver is not None and self._record is not None
        function = self._import(self.spec.driver.function)
        context = DriverContext(
            name=self.spec.name,
            groups={m.name: m.group for m in self._groups},
            pools=dict(self._pools),
            args=dict(self.spec.driver.args),
            progress=dict(self._record.driver_progress),
            resumed=self._previous is not None,
            stop_requested=self._stop_event,
            kv=self._kv,
            _save=self._save_progress,
        )
        self._driver = DriverRun(function, context).start()
        log.info("driver_started", function=self.spec.driver.function, resumed=context.resumed, progress=context.progress)

    def _save_progress(self, progress: dict[str, Any]) -> None:
        with self._lock:
            if self._record is None:  # torn down already
                return
            self._record.driver_progress = dict(progress)
        self._write_record()

    def _start_metrics(self) -> None:
        spec = self.spec.metrics
        if not spec.enabled:
            return
        cert, key = self.spec.path(spec.tls_cert), self.spec.path(spec.tls_key)
        self._metrics_server = metrics.serve(spec.port, spec.host, str(cert) if cert else None, str(key) if key else None)
        log.info("metrics_serving", address=self._metrics_address(), tls=cert is not None)
        exposed = metrics.exposure_warning(spec.host, tls=cert is not None)
        if exposed:
            log.warning("metrics_exposed_without_tls", host=spec.host, hint=exposed)

    def _stop_metrics(self) -> None:
        server, self._metrics_server = self._metrics_server, None
        if server is not None:
            server.shutdown()

    def _metrics_address(self) -> str | None:
        if self._metrics_server is None:
            return None
        return f"{self.spec.metrics.host}:{self._metrics_server.server_port}"

    # -- running --------------------------------------------------------------------------------
    def _wait_for_stop(self) -> StopReason:
        while True:
            if self._stop_event.wait(0.2):
                return self._stop_reason or StopReason.SIGTERM
            if self._driver is not None and self._driver.done.is_set():
                if self._driver.error is not None:
                    self._error = first_line(self._driver.error, limit=None)
                    log.error("driver_raised", error=self._error, exc_info=self._driver.error)
                    return StopReason.DRIVER_RAISED
                log.info("driver_returned")
                return StopReason.DRIVER_RETURNED
            failed = [m for m in self._groups if m.supervisor.state is GroupState.FAILED]
            if failed:
                self._error = "; ".join(str(m.supervisor.failure) for m in failed)
                return StopReason.GROUP_FAILED

    def _start_heartbeat(self) -> None:
        self._heartbeat = threading.Thread(target=self._beat, name="supervisor-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        assert self._store is not None
        interval = self.spec.supervisor.heartbeat_interval_s
        next_cpu_check = time.monotonic() + OVERSUBSCRIPTION_RECHECK_S
        while not self._heartbeat_stop.wait(interval):
            try:
                current = self._store.get(self.spec.name)
                if current is not None and current.owner != self.owner:
                    # Another daemon took over (this one was paused past its grace period): it owns
                    # everything now, so stop supervising and touch nothing.
                    log.error("superseded", supervisor=self.spec.name, by_pid=current.pid, by_host=current.host)
                    self.request_stop(StopReason.SUPERSEDED)
                    return
                self._write_record()
                self._publish_pool_bundles()
                if self._phase is DaemonState.RUNNING and time.monotonic() >= next_cpu_check:
                    self._warn_cpu_oversubscription()
                    next_cpu_check = time.monotonic() + OVERSUBSCRIPTION_RECHECK_S
                how = self._store.stop_requested(self.spec.name, self.owner) if self._stop_reason is None else None
                if how is not None:
                    log.info("stop_requested", by="supervisor stop", detach=how == "detach")
                    self.request_stop(StopReason.DETACH_COMMAND if how == "detach" else StopReason.STOP_COMMAND)
            except Exception as exc:  # a GCS hiccup must not end the heartbeat; the next beat retries
                log.warning("heartbeat_failed", error=first_line(exc))

    def _publish_pool_bundles(self) -> None:
        # Bundles go pending when a node is lost and Ray re-places them: refreshed every beat.
        for pool in list(self._pools.values()):
            if pool.pgs is not None:
                self.hooks.on_pool_bundles(pool.name_prefix, *pool.bundle_counts())

    def _write_record(self) -> None:
        if self._store is None or self._record is None:
            return
        with self._lock:
            self._record.heartbeat_at = time.time()
            self._record.state = self._phase.value
            self._record.failures = list(self.hooks.failures)
            for m in self._groups:
                self._record.groups[m.name] = _group_record(m, self._record.groups.get(m.name))
            data = self._record.to_json()
        self._store.put(SupervisorRecord.from_json(data))

    # -- teardown -------------------------------------------------------------------------------
    def _teardown(self, reason: StopReason) -> ExitCode:
        with self._lock:
            self._stop_reason = self._stop_reason or reason
        scope = teardown_scope(reason, adopting=self._previous is not None)
        self._phase = DaemonState.STOPPING
        self._stop_event.set()
        log.info("teardown_started", supervisor=self.spec.name, reason=reason.value, scope=scope.value, error=self._error)
        if scope is TeardownScope.EVERYTHING:
            self._write_record_quietly()
        if self._driver is not None and not self._driver.done.is_set():
            if not self._driver.join(self.driver_stop_grace_s):
                log.warning("driver_still_running", waited_s=self.driver_stop_grace_s)
        for m in reversed(self._groups):  # stop in reverse start order
            m.supervisor.stop()
        self._heartbeat_stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(self.spec.supervisor.heartbeat_interval_s + 5)
        if scope is TeardownScope.EVERYTHING:
            self._remove_everything()
        elif reason in (StopReason.DETACH_COMMAND, StopReason.SIGTERM_DETACH):
            self._mark_detached()
        elif reason is StopReason.START_FAILED:
            log.error(
                "adopted_resources_left_in_place",
                supervisor=self.spec.name,
                hint="fix the cause and start again to re-adopt them, or `supervisor gc` once the record is orphaned",
            )
        code = reason.exit_code
        self._linger_metrics(code)
        self._stop_metrics()
        self._disconnect()
        log.info("supervisor_stopped", supervisor=self.spec.name, reason=reason.value, exit_code=int(code), error=self._error)
        return code

    def _linger_metrics(self, code: ExitCode) -> None:
        # A failure ends this process, and its series with it: stay scrapeable a little longer so the
        # FAILED group reaches Prometheus and its alert (a further signal cuts the wait short).
        linger = self.spec.metrics.linger_s
        if code is ExitCode.OK or self._metrics_server is None or linger <= 0:
            return
        log.info("metrics_linger", seconds=linger, address=self._metrics_address())
        self._linger_cut.wait(linger)

    def _remove_everything(self) -> None:
        for m in reversed(self._groups):
            self._shutdown_workers(m)
            m.group.kill()
        for pool in reversed(list(self._pools.values())):
            pool.teardown()
        try:
            assert self._store is not None
            current = self._store.get(self.spec.name)
            if current is not None and current.owner != self.owner:
                log.error("superseded", supervisor=self.spec.name, by_pid=current.pid)
                return  # what is left belongs to the daemon that took over
            remove_owned(self.spec.name, find_owned(self.spec.name))  # what a half-finished start or an earlier run left
            with self._lock:
                self._record = None  # nothing may write the record again once it is deleted
            self._store.delete(self.spec.name)
        except Exception as exc:
            log.error("teardown_incomplete", error=first_line(exc))

    def _mark_detached(self) -> None:
        # The record stays, with its facts, for the next start; its heartbeat stops here, so that start
        # takes it over at once on this host (the pid is gone), elsewhere after orphan_grace_s.
        try:
            assert self._store is not None and self._record is not None
            with self._lock:
                self._record.state = DaemonState.DETACHED.value
                data = self._record.to_json()
            self._store.put(SupervisorRecord.from_json(data))
            self._store.clear_stop(self.spec.name)
            log.info("detached", supervisor=self.spec.name, hint="start the same spec again to re-adopt the pools and workers")
        except Exception as exc:
            log.error("detach_incomplete", error=first_line(exc))

    def _write_record_quietly(self) -> None:
        try:
            self._write_record()
        except Exception as exc:
            log.warning("record_write_failed", error=first_line(exc))

    def _shutdown_workers(self, m: _ManagedGroup) -> None:
        # Graceful stop, OTP-style: ask (bounded by shutdown_timeout_s), then kill.
        import ray

        if not m.spec.shutdown_method or not m.group.workers:
            return
        try:
            refs = m.group.execute_all_async(m.spec.shutdown_method)
            ready, pending = ray.wait(refs, num_returns=len(refs), timeout=m.spec.shutdown_timeout_s)
            if pending:
                log.warning("shutdown_method_timed_out", group=m.name, ranks_pending=len(pending), timeout_s=m.spec.shutdown_timeout_s)
        except Exception as exc:
            log.warning("shutdown_method_failed", group=m.name, error=first_line(exc))

    def _disconnect(self) -> None:
        import ray

        if self._embedded is not None:
            self._embedded.stop()
        elif ray.is_initialized():
            ray.shutdown()


def _ray_version() -> str:
    import ray

    return ray.__version__


def _pg_sizes(pool: ResourcePool) -> list[int]:
    return [len(pg.bundle_specs) for pg in pool.pgs or []]


def _may_be_alive(record: SupervisorRecord) -> bool:
    """False when the record's daemon ran on this host and its pid is gone (a crash: take over at once)."""
    if record.host != socket.gethostname():
        return True
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return record.pid != os.getpid()


def _restored_restarts(earlier: GroupRecord) -> tuple[list[RestartRecord], dict[int, int]]:
    """An earlier incarnation's restarts, moved onto this process's monotonic clock."""
    wall, mono = time.time(), time.monotonic()
    history = [RestartRecord(int(rank), FailureReason(reason), mono - (wall - float(t))) for rank, reason, t in earlier.restarts]
    return history, {r.rank: r.restarts for r in earlier.ranks}


def _group_record(m: _ManagedGroup, base: GroupRecord | None) -> GroupRecord:
    """The record of a supervised group, from its supervisor's live view."""
    wall, mono = time.time(), time.monotonic()
    sup = m.supervisor
    window = sup.config.restart.restart_window_s
    record = base or GroupRecord(m.name, m.spec.pool, m.spec.worker_class, list(m.group.worker_names))
    record.state = sup.state.value
    record.initialized = True
    record.master_addr = m.group.master_address
    record.master_port = int(m.group.master_port) if m.group.master_port else None
    record.actor_names = list(m.group.worker_names)
    record.bundles = [list(b) for b in m.group.rank_bundles]
    ready = sup.standby_nodes()
    record.standbys = [StandbyRecord(s.name, list(b), ready.get(b)) for b, s in sorted(m.group.standbys.items())]
    record.standbys_wanted = sup.config.standbys
    record.ranks = sup.ranks()
    record.restarts = [[h.rank, h.reason.value, wall - (mono - h.at)] for h in sup.restart_history() if mono - h.at <= window]
    record.failure = str(sup.failure) if sup.failure else None
    return record


def _placement(record: GroupRecord) -> GroupPlacement | None:
    """Where an earlier incarnation recorded a group's actors (None: a record from before standbys)."""
    if len(record.bundles) != len(record.actor_names):
        return None
    return GroupPlacement(
        list(record.actor_names),
        [BundleRef(*b) for b in record.bundles],
        {BundleRef(*s.bundle): s.name for s in record.standbys},
    )
