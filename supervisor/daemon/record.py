"""The supervisor's state record: what a daemon owns, kept in the cluster so others can read it.

A running daemon rewrites its record every heartbeat. The record is the one source of every fact
``supervisor status`` shows about a supervisor (its pools, groups, ranks, restarts, drift, recent
failures), and what lets a daemon started again after a crash re-adopt its pools and workers instead
of creating new ones. It is deleted on a clean exit; a record whose heartbeat has gone stale belongs to
a daemon that is gone, and its pools are orphans (``supervisor gc`` removes them).

Records live in Ray's GCS key-value store (namespace ``ray_supervisor``), so anyone connected can
read them, and they survive any process but the cluster's head. Only the supervisor's owner fence
writes or deletes them (:mod:`.fence`), so a superseded daemon cannot overwrite its successor's.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..supervision.restart_policy import RestartPolicy, within_window
from ..supervision.states import RankStatus, WorkerState
from .events import Event, events_from_json, json_text
from .liveness import Liveness, ProcessIdentity, judge

__all__ = [
    "DaemonState",
    "Liveness",
    "DEFAULT_DETACHED_GRACE_S",
    "GroupRecord",
    "StandbyRecord",
    "StateRecord",
    "PoolRecord",
    "FailureEvent",
    "SupervisorRecord",
    "RecordStore",
    "liveness",
]

KV_NAMESPACE = "ray_supervisor"
_RECORD_PREFIX = "record:"
_STOP_PREFIX = "stop:"
_EVENTS_PREFIX = "events:"

DEFAULT_DETACHED_GRACE_S = 24 * 3600.0
"""How long a detached job waits for the next start before ``gc`` may collect it."""


class DaemonState(enum.Enum):
    """What the daemon is doing: CONNECTING → STARTING (creating or adopting) → RUNNING → STOPPING
    (tearing down), or DETACHED (gone, its pools and workers left for the next start). Records are
    written from STARTING on."""

    CONNECTING = "connecting"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    DETACHED = "detached"


@dataclass
class StandbyRecord:
    name: str  # the standby's actor name
    bundle: list[int]  # [placement-group index (the spare group comes after the pool's), bundle index]
    node_id: str | None = None  # once it is ready


@dataclass
class StateRecord:
    """A stateful group's snapshots, as the daemon last saw them (``status -o wide``, ``doctor``)."""

    kind: str  # a StateKind value: "replicated" or "sharded"
    snapshot_every: int = 0
    last_snapshot_step: int | None = None  # newest snapshot complete on every rank (None: none yet)
    last_snapshot_at: float | None = None  # its wall time
    held_bytes: int = 0  # what the kept snapshots take in the keepers (both copies)
    bound_bytes: int = 0  # snapshot_memory_mb
    steps_in_memory: list[int] = field(default_factory=list)
    steps_on_disk: list[int] = field(default_factory=list)
    digest_step: int | None = None  # the step of the digests below
    digests: dict[str, str] = field(default_factory=dict)  # rank (as text: JSON keys) -> state digest
    diverged_ranks: list[int] = field(default_factory=list)  # replicas whose digest differs from the others'
    last_rollback_step: int | None = None  # the job's last rollback (every stateful group took part)
    last_rollback_medium: str | None = None
    replay_log_calls: int | None = None  # a group whose recovery replays: the calls its log holds (None: it rolls back)
    replay_log_bytes: int = 0  # what their arguments take in the driver
    replay_log_bound_bytes: int = 0  # replay_log_mb


@dataclass
class GroupRecord:
    name: str
    pool: str
    worker_class: str
    actor_names: list[str]  # each rank's actor, in rank order (a standby that took a rank over keeps its name)
    state: str = "creating"  # "creating", "initializing", then a GroupState value
    initialized: bool = False
    master_addr: str | None = None
    master_port: int | None = None
    ranks: list[RankStatus] = field(default_factory=list)
    restarts: list[list[Any]] = field(default_factory=list)  # [rank, reason, wall time] within the window
    restart_window_s: float = RestartPolicy.restart_window_s
    max_restarts: int = RestartPolicy.max_restarts
    failure: str | None = None
    bundles: list[list[int]] = field(default_factory=list)  # each rank's [placement-group index, bundle index]
    standbys: list[StandbyRecord] = field(default_factory=list)
    standbys_wanted: int = 0
    training_state: StateRecord | None = None  # stateful groups only

    def restarts_in_window(self, now: float) -> int:
        return sum(1 for _, _, t in self.restarts if within_window(t, self.restart_window_s, now))



@dataclass
class PoolRecord:
    name: str
    prefix: str
    placement_groups: list[str]  # names, in rank order
    bundle_nodes: dict[str, list[str]] = field(default_factory=dict)  # name -> node of each bundle at creation
    process_on_nodes: list[int] = field(default_factory=list)
    spare_placement_group: str | None = None  # name of the spare bundles' placement group, if any


@dataclass
class FailureEvent:
    time: float  # wall clock
    group: str
    rank: int
    reason: str
    detail: str


@dataclass
class DrainRecord:
    """A rank on a node being drained that has not been handed over yet: noticed (a hand-over on its
    way), or why there will be none (``outcome``, a :class:`~supervisor.supervision.drain.DrainOutcome`)."""

    time: float  # wall clock of the notice
    group: str
    rank: int
    node: str
    deadline: float | None  # wall clock; None: the notice gave none
    outcome: str = "noticed"
    detail: str = ""


@dataclass
class SupervisorRecord:
    name: str
    namespace: str
    owner: str  # this daemon incarnation's id; a new start claims the record with a new one
    pid: int
    host: str
    started_at: float
    heartbeat_at: float
    heartbeat_interval_s: float
    orphan_grace_s: float
    state: str = DaemonState.STARTING.value
    generation: int = 0  # the owner generation the daemon's claim won (see .fence)
    heartbeat_seq: int = 0  # incremented by every write: readers watch it advance on their own clock
    boot_id: str = ""  # the daemon's boot and pid namespace: where its pid means something
    pid_namespace: str = ""
    detached_grace_s: float = DEFAULT_DETACHED_GRACE_S
    record_write_failures: int = 0  # writes that failed since the daemon started (the last one's error below)
    last_record_write_error: str | None = None
    ray_address: str | None = None
    ray_version: str | None = None  # the daemon's (doctor compares it with the cluster's)
    metrics_address: str | None = None
    pools: dict[str, PoolRecord] = field(default_factory=dict)
    groups: dict[str, GroupRecord] = field(default_factory=dict)
    failures: list[FailureEvent] = field(default_factory=list)
    drains: list[DrainRecord] = field(default_factory=list)
    driver_progress: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # e.g. CPU oversubscription, found at start

    def to_json(self) -> bytes:
        """The stored form: JSON, zlib-compressed once it is larger than :data:`COMPRESS_ABOVE_BYTES`.

        The heartbeat writes it every interval, so it is built for speed: json walks the dataclasses'
        own ``__dict__`` (``dataclasses.asdict`` deep-copies every list and dict first, 20 ms for a
        1,024-rank record), and a large record, mostly node ids said again and again, shrinks to a
        tenth before it crosses the fence actor and the GCS.
        """
        text = json.dumps(self, default=_plain, sort_keys=True).encode()
        return zlib.compress(text, 1) if len(text) > COMPRESS_ABOVE_BYTES else text

    @classmethod
    def from_json(cls, data: bytes | str) -> SupervisorRecord:
        """Read a record (plain or compressed JSON); fields this version does not know (written by
        another version) are ignored."""
        raw = json.loads(json_text(data))
        raw["pools"] = {k: _known(PoolRecord, v) for k, v in raw.get("pools", {}).items()}
        raw["groups"] = {
            k: _known(
                GroupRecord,
                {
                    **v,
                    "ranks": _ranks(v.get("ranks", [])),
                    "standbys": [_known(StandbyRecord, s) for s in v.get("standbys", [])],
                    "training_state": _known(StateRecord, v["training_state"]) if v.get("training_state") else None,
                },
            )
            for k, v in raw.get("groups", {}).items()
        }
        raw["failures"] = [_known(FailureEvent, f) for f in raw.get("failures", [])]
        raw["drains"] = [_known(DrainRecord, d) for d in raw.get("drains", [])]
        return _known(cls, raw)

    def heartbeat_age(self, now: float) -> float:
        """Seconds since the last heartbeat by the daemon's wall clock (a fallback: see .liveness)."""
        return max(0.0, now - self.heartbeat_at)

    @property
    def detached(self) -> bool:
        return self.state == DaemonState.DETACHED.value

    @property
    def process(self) -> ProcessIdentity:
        return ProcessIdentity(self.host, self.boot_id, self.pid_namespace, self.pid)


COMPRESS_ABOVE_BYTES = 64 * 1024  # a record of a few hundred ranks and more; smaller ones stay plain JSON


_RANK_FIELDS = [f.name for f in dataclasses.fields(RankStatus)]


def _plain(value: Any) -> Any:
    """What json cannot write by itself: a record's dataclasses (their fields) and enums (their value).
    A group's ranks go as rows under their field names: json writes lists of scalars far faster than
    a thousand small objects, and the names are not repeated per rank."""
    if isinstance(value, GroupRecord):
        return {**value.__dict__, "ranks": {"fields": _RANK_FIELDS, "rows": [[r.__dict__[f] for f in _RANK_FIELDS] for r in value.ranks]}}
    if dataclasses.is_dataclass(value):
        return value.__dict__
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"a {type(value).__name__} in a supervisor record cannot be written as JSON")


def _ranks(raw: Any) -> list[RankStatus]:
    """A group's ranks as stored: rows under field names, or (older records) one object each."""
    if isinstance(raw, dict):
        return [_rank(dict(zip(raw["fields"], row, strict=True))) for row in raw["rows"]]
    return [_rank(r) for r in raw]


def _rank(raw: dict[str, Any]) -> RankStatus:
    rank = _known(RankStatus, raw)
    rank.state = WorkerState(rank.state)
    return rank


def _known(cls: Any, raw: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in raw.items() if k in names})


def liveness(record: SupervisorRecord, silent_s: float) -> Liveness:
    """Judge a record whose heartbeat was not seen to advance for ``silent_s`` (pure)."""
    return judge(silent_s, record.heartbeat_interval_s, record.orphan_grace_s, record.detached)


class RecordStore:
    """Supervisor records and stop requests in the cluster's key-value store (needs a Ray connection)."""

    def __init__(self) -> None:
        from ray.experimental import internal_kv

        if not internal_kv._internal_kv_initialized():
            from ..errors import ClusterUnavailableError

            raise ClusterUnavailableError("Ray is not initialised: connect before reading supervisor records")
        self._kv = internal_kv

    def put_raw(self, name: str, data: bytes) -> None:
        """Write a record. Only the owner fence calls this (:mod:`.fence`): every write is fenced."""
        self._kv._internal_kv_put(_RECORD_PREFIX + name, data, overwrite=True, namespace=KV_NAMESPACE)

    def get(self, name: str) -> SupervisorRecord | None:
        data = self._kv._internal_kv_get(_RECORD_PREFIX + name, namespace=KV_NAMESPACE)
        return SupervisorRecord.from_json(data) if data else None

    def delete(self, name: str) -> None:
        """Delete a record and its stop request (the owner fence's retire; test harnesses' clean-up)."""
        self._kv._internal_kv_del(_RECORD_PREFIX + name, namespace=KV_NAMESPACE)
        self._kv._internal_kv_del(_STOP_PREFIX + name, namespace=KV_NAMESPACE)

    def names(self) -> list[str]:
        return self._names(_RECORD_PREFIX)

    def put_events_raw(self, name: str, data: bytes) -> None:
        """Write a supervisor's event history. Only the owner fence calls this, like :meth:`put_raw`."""
        self._kv._internal_kv_put(_EVENTS_PREFIX + name, data, overwrite=True, namespace=KV_NAMESPACE)

    def events(self, name: str) -> list[Event]:
        """A supervisor's event history, oldest first (empty when it has none)."""
        data = self._kv._internal_kv_get(_EVENTS_PREFIX + name, namespace=KV_NAMESPACE)
        return events_from_json(data) if data else []

    def delete_events(self, name: str) -> None:
        self._kv._internal_kv_del(_EVENTS_PREFIX + name, namespace=KV_NAMESPACE)

    def event_names(self) -> list[str]:
        """The supervisors that have an event history (some may have no record any more)."""
        return self._names(_EVENTS_PREFIX)

    def _names(self, prefix: str) -> list[str]:
        keys = self._kv._internal_kv_list(prefix, namespace=KV_NAMESPACE) or []
        return sorted(k.decode().removeprefix(prefix) for k in keys)

    def all(self) -> list[SupervisorRecord]:
        return [r for name in self.names() if (r := self.get(name)) is not None]

    def request_stop(self, name: str, owner: str, detach: bool = False) -> None:
        """Ask the daemon incarnation ``owner`` to stop (it checks every heartbeat): tear down, or with
        ``detach`` leave its pools and workers running for the next start to re-adopt."""
        value = f"{'detach' if detach else 'teardown'}:{owner}"
        self._kv._internal_kv_put(_STOP_PREFIX + name, value.encode(), overwrite=True, namespace=KV_NAMESPACE)

    def stop_requested(self, name: str, owner: str) -> str | None:
        """``"teardown"`` or ``"detach"`` when ``owner`` was asked to stop, else None."""
        data = self._kv._internal_kv_get(_STOP_PREFIX + name, namespace=KV_NAMESPACE)
        if data is None:
            return None
        how, _, who = data.decode().partition(":")
        return how if who == owner else None

    def clear_stop(self, name: str, owner: str) -> None:
        """Forget a stop request made of ``owner`` (one made of another incarnation stays)."""
        if self.stop_requested(name, owner) is not None:
            self._kv._internal_kv_del(_STOP_PREFIX + name, namespace=KV_NAMESPACE)
