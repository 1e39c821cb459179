"""The group host of a run: where the supervision of a ``supervisor run`` command's verl groups lives.

verl builds its worker groups in one process of the program (the driver itself, or verl's
``TaskRunner`` actor). The first supervised group made there creates this process's
:class:`RunHost` (:func:`supervisor.integrations.verl.host.current_host`), which:

* claims the supervisor through the owner fence with the owner id the parent claimed it with (the
  fence grants an owner's own claim with a new generation). From then on the parent's record writes
  are refused: this process is the one that writes the record, kills and removes, because its
  GroupSupervisors decide every replacement and every in-flight call's outcome;
* takes over the parent's record (with this process's identity, so a claimer that can see this pid
  gone takes over at once) and rewrites it every ``heartbeat_interval_s`` from a thread, and at once on
  every rank state change (the job's record sink);
* names the program's pools under the supervisor (:meth:`pool_name`), so ``find_owned`` finds them
  and the parent removes them when the command ends (or leaves them, detached, for the next run);
* supervises each group with its ``[run.groups.NAME]`` settings (:meth:`settings`).

When the command ends the parent claims the supervisor back (a new generation again): if this process
still lives (a ``TaskRunner`` Ray has not reaped yet) its writes and kills are refused from then on.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from ..daemon.claim import AlreadyRunningError
from ..daemon.fence import ClaimVerdict, OwnerFence
from ..daemon.job import Job, ManagedGroup
from ..daemon.liveness import ProcessIdentity
from ..daemon.ownership import pool_prefix_of
from ..daemon.record import DaemonState, GroupRecord, PoolRecord, RecordStore, SupervisorRecord
from ..daemon.spec import GroupSpec, SupervisorSpec
from ..errors import SupersededError, SupervisorError, first_line
from ..integrations.verl.host import GroupSettings, HostedGroup
from ..observability.log import get_logger
from ..placement.layout import BundleRef
from .descriptor import RunDescriptor, run_spec

__all__ = ["RunHost", "NotInRunError"]

log = get_logger("run")

_POOL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


class NotInRunError(SupervisorError):
    """A run's group host was asked for outside ``supervisor run`` (no ``SUPERVISOR_RUN``)."""


class RunHost:
    """The :class:`~supervisor.integrations.verl.host.GroupHost` of a run (one per process).

    Use :meth:`from_environment` (what the import hook installs as the host factory); :meth:`close`
    stops its heartbeat (the process's exit does too).
    """

    def __init__(self, descriptor: RunDescriptor, spec: SupervisorSpec) -> None:
        self.name = spec.name
        self.spec = spec
        self.job = Job(spec, owner=descriptor.owner)
        self.fence = OwnerFence(spec.name, on_superseded=self._superseded)
        self.job.fence = self.fence
        self.hooks = self.job.hooks
        self.record = self.job
        self._pool_names: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_environment(cls) -> RunHost:
        """The host of the run this process belongs to, its claim made and its heartbeat started.

        Raises:
            NotInRunError: not under ``supervisor run``.
            AlreadyRunningError: the supervisor belongs to somebody else now (the run's parent is gone
                and another run took the name over).
        """
        descriptor = RunDescriptor.from_environment()
        if descriptor is None:
            raise NotInRunError("not under `supervisor run` (SUPERVISOR_RUN is not set): no run to host groups")
        host = cls(descriptor, run_spec(descriptor))
        host.claim()
        return host

    # -- the claim and the record ---------------------------------------------------------------
    def claim(self) -> None:
        job, sup = self.job, self.spec.supervisor
        job.store = RecordStore()
        previous = job.store.get(self.name)
        verdict, before = self.fence.claim(job.owner, sup.orphan_grace_s, sup.heartbeat_interval_s, record=previous)
        if verdict is not ClaimVerdict.GRANTED:
            raise AlreadyRunningError(
                f"supervisor {self.name} is owned by another process now (heard from {before.silent_s:.1f}s ago): "
                "this run's parent is gone and another run took the name over"
            )
        me = ProcessIdentity.current()
        now = time.time()
        if previous is not None and previous.owner == job.owner:
            record = previous  # the parent's: its pools (adopted from a detached run) stay in it
        else:
            record = SupervisorRecord(self.name, self.spec.namespace, job.owner, me.pid, me.host, now, now, sup.heartbeat_interval_s, sup.orphan_grace_s)
        record.pid, record.host, record.boot_id, record.pid_namespace = me.pid, me.host, me.boot_id, me.pid_namespace
        record.generation = self.fence.generation or 0
        record.heartbeat_interval_s, record.orphan_grace_s, record.detached_grace_s = sup.heartbeat_interval_s, sup.orphan_grace_s, sup.detached_grace_s
        job.record = record
        job.phase = DaemonState.RUNNING
        job.write_through_armed = True
        job.write_record()
        log.info("run_host_claimed", supervisor=self.name, generation=self.fence.generation, pid=me.pid)
        self._thread = threading.Thread(target=self._beat, name="supervisor-run-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        interval = self.spec.supervisor.heartbeat_interval_s
        while not self._stop.wait(interval):
            try:
                self.job.write_record()
            except SupersededError:
                return  # the parent took the job back (the command ended): nothing here is ours now
            except Exception:  # counted and logged by write_record; the next beat retries
                continue

    def _superseded(self, error: SupersededError) -> None:
        log.info("run_host_released", supervisor=self.name, reason=str(error))
        self._stop.set()

    def close(self) -> None:
        """Stop the heartbeat (the groups' supervisors are the program's to stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.spec.supervisor.heartbeat_interval_s + 5)

    # -- GroupHost ------------------------------------------------------------------------------
    def pool_name(self, requested: str) -> str:
        base = _POOL_NAME_CHARS.sub("_", requested or "pool").strip("_") or "pool"
        name, n = base, 2
        with self.job.lock:
            while name in self._pool_names:  # verl names pools after their role; two may share one
                name, n = f"{base}-{n}", n + 1
            self._pool_names.add(name)
        return name

    def settings(self, group: str, pool: str = "") -> GroupSettings:
        run = self.spec.run
        for name in (group, pool):  # the group's own table first, then its pool's
            if run is not None and name and name in run.groups:
                return GroupSettings(run.groups[name].supervision_config(), strategy_set=name in run.strategy_set)
        return GroupSettings(GroupSpec().supervision_config())

    def register(self, hosted: HostedGroup) -> None:
        restart = hosted.supervisor.config.restart
        with self.job.lock:
            assert self.job.record is not None
            self.job.record.groups[hosted.name] = GroupRecord(
                hosted.name, hosted.pool, hosted.worker_class, list(hosted.group.worker_names),
                restart_window_s=restart.restart_window_s, max_restarts=restart.max_restarts, initialized=True,
            )  # fmt: skip
            pool = _pool_record(hosted.pool, self.name, getattr(hosted.group, "resource_pool", None))
            if pool is not None:
                self.job.record.pools[hosted.pool] = pool
            self.job.groups = [m for m in self.job.groups if m.name != hosted.name]
            self.job.groups.append(ManagedGroup(hosted.name, GroupSpec(pool=hosted.pool, worker_class=hosted.worker_class), hosted.group, hosted.supervisor))
        log.info("run_group_registered", supervisor=self.name, group=hosted.name, pool=hosted.pool, world_size=len(hosted.group.worker_names))
        self.job.persist()

    def unregister(self, name: str) -> None:
        with self.job.lock:
            self.job.groups = [m for m in self.job.groups if m.name != name]
            if self.job.record is not None:
                self.job.record.groups.pop(name, None)
        self.hooks.on_group_removed(name)
        self.job.persist()


def _pool_record(name: str, supervisor: str, pool: Any) -> PoolRecord | None:
    """What the record shows of a run's pool (None: the group has no pool of ours to describe)."""
    if pool is None or getattr(pool, "pgs", None) is None:
        return None
    try:
        names = pool.rank_order_names()
        nodes = pool.original_bundle_nodes()
        sizes = [len(pg.bundle_specs) for pg in pool.pgs]
        bundle_nodes = {n: [nodes.get(BundleRef(i, b), "") for b in range(count)] for i, (n, count) in enumerate(zip(names, sizes, strict=True))}
        return PoolRecord(name, getattr(pool, "name_prefix", pool_prefix_of(supervisor, name)), names, bundle_nodes, list(pool.store))
    except Exception as exc:  # only what status shows: never a reason to fail the group
        log.warning("run_pool_unrecorded", pool=name, error=first_line(exc))
        return None
