"""What one daemon runs and owns: the job's pools, groups, driver and KV store, and its state record.

The daemon's parts (:mod:`.claim`, :mod:`.startup`, :mod:`.heartbeat`, :mod:`.teardown`) share one
:class:`Job`; its lock guards the record, which the heartbeat, the driver's ``save_progress`` and the
teardown all write.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..core.group import WorkerGroup
from ..observability.hooks import ObservingHooks
from ..placement.pool import ResourcePool
from ..supervision import GroupSupervisor
from ..supervision.init_policy import RankAttempt
from ..supervision.restart_policy import within_window
from .driver import DriverRun
from .kv import KVStore
from .record import DaemonState, FailureEvent, GroupRecord, RecordStore, StandbyRecord, SupervisorRecord
from .spec import GroupSpec, SupervisorSpec

__all__ = ["Job", "ManagedGroup", "DaemonHooks", "RECENT_FAILURES"]

RECENT_FAILURES = 20  # failure events kept in the record for `supervisor status`


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
class ManagedGroup:
    name: str
    spec: GroupSpec
    group: WorkerGroup
    supervisor: GroupSupervisor


@dataclass
class Job:
    """The shared state of one daemon incarnation.

    Attributes:
        spec: the validated spec.
        owner: this incarnation's id (a new start claims the record with a new one).
        store: the record store (set once connected).
        record: this incarnation's record (None before the claim and once deleted at teardown).
        previous: the record an earlier incarnation left (its job is re-adopted).
        phase: where the daemon's life is (the record's ``state``).
    """

    spec: SupervisorSpec
    owner: str
    hooks: DaemonHooks = field(default_factory=DaemonHooks)
    store: RecordStore | None = None
    record: SupervisorRecord | None = None
    previous: SupervisorRecord | None = None
    phase: DaemonState = DaemonState.CONNECTING
    pools: dict[str, ResourcePool] = field(default_factory=dict)
    groups: list[ManagedGroup] = field(default_factory=list)
    driver: DriverRun | None = None
    kv: KVStore | None = None
    # Re-entrant: a signal handler runs on the main thread, possibly while it holds the lock.
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def adopting(self) -> bool:
        """This incarnation took over an earlier one's record (and re-adopts its job)."""
        return self.previous is not None

    def set_group_record(self, record: GroupRecord) -> None:
        with self.lock:
            assert self.record is not None
            self.record.groups[record.name] = record

    def write_record(self) -> None:
        """Write the record with the live state of every supervised group and a fresh heartbeat."""
        if self.store is None or self.record is None:
            return
        with self.lock:
            self.record.heartbeat_at = time.time()
            self.record.state = self.phase.value
            self.record.failures = list(self.hooks.failures)
            for m in self.groups:
                self.record.groups[m.name] = group_record(m, self.record.groups.get(m.name))
            data = self.record.to_json()
        self.store.put(SupervisorRecord.from_json(data))

    def save_progress(self, progress: dict[str, Any]) -> None:
        """The driver's ``ctx.save_progress``: kept in the record for a restarted daemon's driver."""
        with self.lock:
            if self.record is None:  # torn down already
                return
            self.record.driver_progress = dict(progress)
        self.write_record()

    def superseded_by(self) -> SupervisorRecord | None:
        """The record of the daemon that took this one's over, if one did."""
        assert self.store is not None
        current = self.store.get(self.spec.name)
        return current if current is not None and current.owner != self.owner else None


def group_record(m: ManagedGroup, base: GroupRecord | None) -> GroupRecord:
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
    record.restarts = [[h.rank, h.reason.value, wall - (mono - h.at)] for h in sup.restart_history() if within_window(h.at, window, mono)]
    record.failure = str(sup.failure) if sup.failure else None
    return record
