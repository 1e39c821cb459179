"""What one daemon runs and owns: the job's pools, groups, driver and KV store, and its state record.

The daemon's parts (:mod:`.claim`, :mod:`.startup`, :mod:`.heartbeat`, :mod:`.teardown`) share one
:class:`Job`; its lock guards the record, which the heartbeat, the supervisors (at every rank state
change), the driver's ``save_progress`` and the teardown all write, each write through the owner
fence (:mod:`.fence`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..core.group import gcs_outages
from ..core.group.group import WorkerGroup
from ..core.worker.zygote import NodeZygotes
from ..errors import SupersededError, SupervisorError, first_line
from ..failure import FailureReason
from ..observability.hooks import ObservingHooks
from ..observability.log import get_logger
from ..placement.pool import ResourcePool
from ..state.domain import GroupStateStatus, Rollback, StateDomain
from ..supervision import GroupSupervisor
from ..supervision.drain import DrainOutcome
from ..supervision.init_policy import RankAttempt
from ..supervision.restart_policy import within_window
from ..supervision.states import GroupState
from .driver import DriverRun
from .events import EventKind, EventLog, EventType, events_to_json
from .fence import OwnerFence
from .kv import KVStore
from .record import (
    DaemonState,
    DrainRecord,
    FailureEvent,
    GroupRecord,
    RecordStore,
    StandbyRecord,
    StateRecord,
    SupervisorRecord,
)
from .spec import GroupSpec, SupervisorSpec

__all__ = ["Job", "ManagedGroup", "DaemonHooks", "RECENT_FAILURES", "PROGRESS_WRITE_WAIT_S", "ProgressNotSerializableError", "check_progress"]

# How long the driver's save_progress waits for the record write (a GCS restarting answers later).
PROGRESS_WRITE_WAIT_S = 1.0

log = get_logger("daemon")

RECENT_FAILURES = 20  # failure events kept in the record for `supervisor status`


class ProgressNotSerializableError(SupervisorError, TypeError):
    """``save_progress`` got something JSON cannot hold; the message names the key."""


class DaemonHooks(ObservingHooks):
    """Metrics and logs, plus the recent failures the state record shows and the event history."""

    def __init__(self) -> None:
        self.failures: deque[FailureEvent] = deque(maxlen=RECENT_FAILURES)
        self.drains: dict[tuple[str, int], DrainRecord] = {}  # ranks on draining nodes not handed over yet
        self.events = EventLog()

    def event(self, kind: EventKind, message: str, type: EventType = EventType.NORMAL, group: str | None = None, rank: int | None = None) -> None:
        self.events.add(kind, message, time=time.time(), type=type, group=group, rank=rank)

    def on_worker_failed(self, group: str, rank: int, reason: FailureReason, detail: str, detection_s: float | None) -> None:
        super().on_worker_failed(group, rank, reason, detail, detection_s)
        self.failures.append(FailureEvent(time.time(), group, rank, reason, detail))
        self.event(EventKind.WORKER_FAILED, f"{reason}: {detail}", EventType.WARNING, group, rank)

    def on_init_attempt(self, group: str, attempt: RankAttempt) -> None:
        super().on_init_attempt(group, attempt)
        if not attempt.outcome.ok:
            reason = f"init_{attempt.outcome.value}"
            self.failures.append(FailureEvent(time.time(), group, attempt.rank, reason, attempt.error or ""))
            self.event(EventKind.INIT_FAILED, f"{reason} (attempt {attempt.attempt}): {attempt.error or ''}", EventType.WARNING, group, attempt.rank)

    def on_worker_replaced(self, group: str, rank: int, reason: FailureReason) -> None:
        super().on_worker_replaced(group, rank, reason)
        self.event(EventKind.WORKER_REPLACED, f"a fresh actor into the same bundle ({reason})", group=group, rank=rank)

    def on_worker_recovered(self, group: str, rank: int, recovery_s: float | None) -> None:
        super().on_worker_recovered(group, rank, recovery_s)
        self.drains.pop((group, rank), None)  # its node went before a hand-over: recovered like any loss
        after = f" {recovery_s:.1f}s after the failure" if recovery_s is not None else ""
        self.event(EventKind.WORKER_RECOVERED, f"serving again{after}", group=group, rank=rank)

    def on_placement_drift(self, group: str, rank: int, original_node: str, current_node: str) -> None:
        super().on_placement_drift(group, rank, original_node, current_node)
        message = f"runs on node {current_node[:12]}; its bundle was placed on {original_node[:12]}"
        self.event(EventKind.PLACEMENT_DRIFT, message, EventType.WARNING, group, rank)

    def on_rendezvous_changed(self, group: str, master_addr: str, master_port: int) -> None:
        super().on_rendezvous_changed(group, master_addr, master_port)
        self.event(EventKind.RENDEZVOUS_CHANGED, f"rank 0 replaced: MASTER_ADDR={master_addr} MASTER_PORT={master_port}", group=group)

    def on_group_state(self, group: str, source: GroupState, target: GroupState) -> None:  # type: ignore[override]
        super().on_group_state(group, source, target)
        self.event(EventKind.GROUP_STATE, f"{source} -> {target}", EventType.WARNING if target is GroupState.FAILED else EventType.NORMAL, group)

    def on_group_failed(self, group: str, message: str) -> None:
        super().on_group_failed(group, message)
        self.event(EventKind.GROUP_FAILED, message, EventType.WARNING, group)

    def on_standby_failed(self, group: str, actor: str, detail: str) -> None:
        super().on_standby_failed(group, actor, detail)
        self.event(EventKind.STANDBY_FAILED, f"{actor}: {detail}", EventType.WARNING, group)

    def on_state_restored(self, group: str, kind: str, seconds: float, ranks: tuple[int, ...]) -> None:
        super().on_state_restored(group, kind, seconds, ranks)
        source = "their own live state across a hand-over" if kind == "live" else "the state of a live peer"
        self.event(EventKind.STATE_RESTORED, f"rank(s) {list(ranks)} loaded {source} in {seconds:.2f}s", group=group)

    def on_node_draining(self, group: str, node: str, deadline_in_s: float | None, ranks: list[int]) -> None:
        super().on_node_draining(group, node, deadline_in_s, ranks)
        for rank in ranks:
            at = time.time()
            self.drains[(group, rank)] = DrainRecord(at, group, rank, node, None if deadline_in_s is None else at + deadline_in_s)
        deadline = "no deadline" if deadline_in_s is None else f"deadline in {deadline_in_s:.0f}s"
        self.event(EventKind.NODE_DRAINING, f"node {node[:12]} is being drained ({deadline}); rank(s) {ranks} run there", EventType.WARNING, group)

    def on_drain_outcome(self, group: str, rank: int, node: str | None, outcome: DrainOutcome, detail: str) -> None:  # type: ignore[override]
        super().on_drain_outcome(group, rank, node, outcome, detail)
        known = self.drains.get((group, rank))
        if known is not None:
            known.outcome, known.detail = outcome, detail
        self.event(EventKind.DRAIN_NOT_HANDED_OVER, f"{outcome}: {detail}", EventType.WARNING, group, rank)

    def on_rank_handed_over(self, group: str, rank: int, seconds: float, source_node: str | None, target_node: str | None) -> None:
        super().on_rank_handed_over(group, rank, seconds, source_node, target_node)
        self.drains.pop((group, rank), None)
        moved = f" from node {(source_node or '?')[:12]} to {(target_node or '?')[:12]}"
        self.event(EventKind.RANK_HANDED_OVER, f"handed over{moved} in {seconds:.2f}s (not a failure: nothing charged)", group=group, rank=rank)

    def on_state_replayed(self, group: str, step: int, calls: int, seconds: float) -> None:
        super().on_state_replayed(group, step, calls, seconds)
        message = f"back to its own snapshot of step {step}, {calls} call(s) replayed in {seconds:.2f}s: the driver saw nothing"
        self.event(EventKind.REPLAYED, message, EventType.WARNING, group)

    def on_rolled_back(self, group: str, groups: tuple[str, ...], step: int, medium: str, seconds: float, cause: str) -> None:
        super().on_rolled_back(group, groups, step, medium, seconds, cause)
        message = f"every stateful group ({', '.join(groups)}) back to the {medium} snapshot of step {step} in {seconds:.2f}s: {cause}"
        self.event(EventKind.ROLLED_BACK, message, EventType.WARNING, group)

    def on_state_snapshot_skipped(self, group: str, step: int, reason: str) -> None:
        super().on_state_snapshot_skipped(group, step, reason)
        self.event(EventKind.SNAPSHOT_SKIPPED, reason, EventType.WARNING, group)

    def on_resource_wait_done(self, pool: str, waited_s: float, outcome: str) -> None:
        super().on_resource_wait_done(pool, waited_s, outcome)
        type_ = EventType.NORMAL if outcome == "ready" else EventType.WARNING
        self.event(EventKind.RESOURCE_WAIT, f"pool {pool}: {outcome} after {waited_s:.1f}s", type_)


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
        fence: this incarnation's hold on the supervisor (set by the claim); every record write and
            destructive action goes through it.
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
    state_domain: StateDomain | None = None  # the stateful groups' snapshots and rollbacks (None: no stateful group)
    zygotes: dict[tuple[str, ...], NodeZygotes] = field(default_factory=dict)  # per preload: the groups' shared zygotes
    fence: OwnerFence | None = None
    last_written: float | None = None  # time.monotonic() of the last record write that succeeded
    # Once the record is claimed, every change a supervisor writes through reaches it at once (the
    # supervisors' record sink; before that there is no record of this incarnation to write).
    write_through_armed: bool = False
    _events_written: int = -1  # EventLog.added when the event history was last written
    _announced_state: str | None = None  # the daemon state the last DaemonState event named
    # Serialises record writes, so they reach the fence in the order their contents were taken.
    write_lock: threading.Lock = field(default_factory=threading.Lock)
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

    def write_record(self, state: DaemonState | None = None) -> None:
        """Write the record with the live state of every supervised group and a fresh heartbeat.

        Raises:
            SupersededError: another daemon owns the supervisor now; nothing was written.
            Exception: the write failed (a GCS hiccup); it is counted, logged and shown by status.
        """
        if self.store is None or self.record is None or self.fence is None:
            return
        with self.write_lock:
            with self.lock:
                if self.record is None:  # deleted by the teardown meanwhile
                    return
                record = self.record
                record.heartbeat_at = time.time()
                record.heartbeat_seq += 1
                record.state = (state or self.phase).value
                if record.state != self._announced_state:
                    self.hooks.event(EventKind.DAEMON_STATE, f"{record.state} (pid {record.pid} on {record.host})")
                    self._announced_state = record.state
                record.failures = list(self.hooks.failures)
                record.drains = list(self.hooks.drains.values())
                states = {s.group: s for s in self.state_domain.cached_status()} if self.state_domain is not None else {}
                rollback = self.state_domain.last_rollback if self.state_domain is not None else None
                for m in self.groups:
                    record.groups[m.name] = group_record(m, record.groups.get(m.name))
                    if m.name in states:
                        record.groups[m.name].training_state = state_record(states[m.name], rollback)
                data, seq = record.to_json(), record.heartbeat_seq
                events, added = self.hooks.events.snapshot()
                events_data = events_to_json(events) if added != self._events_written else None
            try:
                self.fence.write_record(
                    data, seq, detached=record.state == DaemonState.DETACHED.value, events=events_data
                )
                self.last_written = time.monotonic()
                self._events_written = added
            except SupersededError:
                raise
            except Exception as exc:
                with self.lock:
                    record.record_write_failures += 1
                    record.last_record_write_error = first_line(exc)
                log.warning("record_write_failed", failures=record.record_write_failures, error=first_line(exc))
                raise

    def write_through(self, group: str) -> None:
        """The supervisors' record sink (:class:`~supervisor.supervision.record_sink.RecordSink`): a
        rank state or rendezvous of ``group`` changed; written now once the record is claimed."""
        if self.write_through_armed:
            self.persist()

    def persist(self) -> None:
        """Write the record now because a rank's state or the rendezvous changed (called before the
        change is visible to any actor): a crash right after must find it recorded. A failed write is
        logged and counted; the heartbeat writes again."""
        try:
            self.write_record()
        except SupersededError:
            pass  # the fence told the daemon to stop; the supervisor's next destructive call fails too
        except Exception:
            pass  # counted and logged by write_record

    def save_progress(self, progress: dict[str, Any]) -> None:
        """The driver's ``ctx.save_progress``: kept in the record for a restarted daemon's driver.

        The record is written at once, and waited for at most :data:`PROGRESS_WRITE_WAIT_S`; while the
        GCS is away (a restart under GCS fault tolerance) not at all: the heartbeat writes it once the
        GCS is back, and the driver's steps go on meanwhile. A daemon that dies before then resumes
        from the progress written last (a stateful group's rollback step wins over it anyway).

        Raises:
            ProgressNotSerializableError: a value JSON cannot hold (named by its key).
            SupersededError: another daemon took the supervisor over; the progress is not saved.
        """
        check_progress(progress)
        with self.lock:
            if self.record is None:  # torn down already
                return
            self.record.driver_progress = json.loads(json.dumps(progress))
        if gcs_outages.state()[1]:
            return  # the GCS is away (a restart): the heartbeat writes it once it is back; the driver goes on
        # Written through, but waited for at most PROGRESS_WRITE_WAIT_S: a write that waits for a GCS
        # going away as it started must not hold the driver's steps (the heartbeat writes again).
        outcome: list[BaseException | None] = []
        done = threading.Event()

        def write() -> None:
            try:
                self.write_record()
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=write, name="supervisor-progress-write", daemon=True).start()
        if done.wait(PROGRESS_WRITE_WAIT_S) and isinstance(outcome[0], SupersededError):
            raise outcome[0]


def check_progress(progress: Any) -> None:
    """Raise :class:`ProgressNotSerializableError` naming the first value JSON cannot hold (pure)."""
    if not isinstance(progress, dict):
        raise ProgressNotSerializableError(f"save_progress takes a dict, got {type(progress).__name__}")
    problem = _json_problem(progress, "progress")
    if problem is not None:
        raise ProgressNotSerializableError(f"save_progress: {problem}")


def _json_problem(value: Any, path: str) -> str | None:
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int | float):  # numpy's float64 is a float; its int64 is not an int
        return None if value == value and abs(value) != float("inf") else f"{path} is {value!r}, which JSON cannot hold"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has the key {key!r} ({type(key).__name__}); JSON keys are strings"
            problem = _json_problem(item, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{i}]")
            if problem is not None:
                return problem
        return None
    kind = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
    return f"{path} is a {kind} ({value!r}), which JSON cannot hold: convert it (e.g. int(...), float(...), str(...))"


def state_record(status: GroupStateStatus, rollback: Rollback | None) -> StateRecord:
    """The record of a stateful group's snapshots (ages become wall times: readers are elsewhere)."""
    at = None if status.last_snapshot_age_s is None else time.time() - status.last_snapshot_age_s
    return StateRecord(
        status.kind.value, status.snapshot_every, status.last_complete_step, at, status.held_bytes, status.bound_bytes,
        list(status.steps_in_memory), list(status.steps_on_disk), status.digest_step,
        {str(r): d for r, d in sorted(status.replica_digests.items())}, status.diverged_ranks,
        None if rollback is None else rollback.step, None if rollback is None else rollback.medium.value,
        status.replay_log_calls, status.replay_log_bytes, status.replay_log_bound_bytes,
    )  # fmt: skip


def group_record(m: ManagedGroup, base: GroupRecord | None) -> GroupRecord:
    """The record of a supervised group, from its supervisor's live view."""
    wall, mono = time.time(), time.monotonic()
    sup = m.supervisor
    window = sup.config.restart.restart_window_s
    record = base or GroupRecord(m.name, m.spec.pool, m.spec.worker_class, list(m.group.worker_names))
    record.state = sup.state.value
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
