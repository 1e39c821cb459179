"""A supervisor's event history, like ``kubectl get events``: failures, replacements, recoveries,
drift, group and daemon state changes, takeovers, collection.

The daemon keeps the last :data:`MAX_EVENTS` in memory (:class:`EventLog`) and writes them to the
cluster's key-value store beside its record, through the owner fence and only when new ones arrived.
They outlive the record: ``supervisor events NAME`` still answers after the job was stopped, failed
or collected, and the next start of the same name continues the history. ``supervisor gc`` removes
histories whose supervisor has had no record for :data:`EVENTS_KEPT_S`.

Everything here is pure but the lock; reading and writing the store is :class:`~.record.RecordStore`'s.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Event",
    "EventKind",
    "EventType",
    "EventLog",
    "MAX_EVENTS",
    "MAX_MESSAGE_CHARS",
    "EVENTS_KEPT_S",
    "parse_duration",
    "events_to_json",
    "events_from_json",
    "history_ending_with",
    "json_text",
]

MAX_EVENTS = 1000  # per supervisor: at ~300 bytes each, a write stays well under a megabyte
MAX_MESSAGE_CHARS = 300  # a traceback's first line is enough; the daemon's log has the rest
EVENTS_KEPT_S = 24 * 3600.0  # how long gc keeps the history of a supervisor that has no record


class EventType(StrEnum):
    """kubectl's two: what went as planned, and what an operator may want to look at."""

    NORMAL = "Normal"
    WARNING = "Warning"


class EventKind(StrEnum):
    """What happened (the REASON column)."""

    DAEMON_STATE = "DaemonState"  # the daemon's phase: starting, running, stopping, detached
    TAKEN_OVER = "TakenOver"  # a new daemon claimed the supervisor from an earlier one
    STOPPED = "Stopped"  # the daemon tore the job down (its last event)
    COLLECTED = "Collected"  # `supervisor gc` removed an orphaned supervisor's job
    RESOURCE_WAIT = "ResourceWait"  # a pool's wait for its placement groups ended
    INIT_FAILED = "InitFailed"
    WORKER_FAILED = "WorkerFailed"
    WORKER_REPLACED = "WorkerReplaced"
    WORKER_RECOVERED = "WorkerRecovered"
    PLACEMENT_DRIFT = "PlacementDrift"
    RENDEZVOUS_CHANGED = "RendezvousChanged"
    GROUP_STATE = "GroupState"
    GROUP_FAILED = "GroupFailed"
    STANDBY_FAILED = "StandbyFailed"
    STATE_RESTORED = "StateRestored"  # a stateful group's replacement got its state (from a peer)
    ROLLED_BACK = "RolledBack"  # every stateful group went back to a snapshot
    REPLAYED = "Replayed"  # one group went back to its own snapshot and ran its logged calls again
    SNAPSHOT_SKIPPED = "SnapshotSkipped"  # a snapshot would have passed its memory bound
    GCS_OUTAGE = "GcsOutage"  # the cluster's GCS was unreachable for a while (a restart); the job ran on
    NODE_DRAINING = "NodeDraining"  # a node of the job's ranks got a drain (preemption) notice
    RANK_HANDED_OVER = "RankHandedOver"  # a rank left a draining node for its successor
    DRAIN_NOT_HANDED_OVER = "DrainNotHandedOver"  # a rank on a draining node stays until the node goes: why


@dataclass(frozen=True)
class Event:
    """One thing that happened to a supervisor, its group or one of its ranks."""

    time: float  # wall clock (readers on other machines compare it with theirs)
    kind: EventKind
    type: EventType
    message: str
    group: str | None = None
    rank: int | None = None
    generation: int = 0  # the owner generation of the daemon that saw it (a takeover increments it)

    @property
    def object(self) -> str:
        """What it happened to: ``supervisor``, ``group/NAME`` or ``group/NAME/RANK``."""
        if self.group is None:
            return "supervisor"
        return f"group/{self.group}" + (f"/{self.rank}" if self.rank is not None else "")

    def to_dict(self) -> dict[str, object]:
        # By hand: dataclasses.asdict deep-copies, and a history is 1,000 of these at every write.
        return {
            "time": self.time, "kind": self.kind.value, "type": self.type.value, "message": self.message,
            "group": self.group, "rank": self.rank, "generation": self.generation,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> Event | None:
        """The event, or None when another version wrote a kind this one does not know."""
        try:
            kind, type_ = EventKind(raw["kind"]), EventType(raw["type"])
        except (KeyError, ValueError):
            return None
        rank = raw.get("rank")
        group = raw.get("group")
        return cls(
            time=float(raw.get("time", 0.0)),  # type: ignore[arg-type]
            kind=kind,
            type=type_,
            message=str(raw.get("message", "")),
            group=str(group) if group is not None else None,
            rank=int(rank) if rank is not None else None,  # type: ignore[call-overload]
            generation=int(raw.get("generation", 0)),  # type: ignore[call-overload]
        )


def events_to_json(events: list[Event]) -> bytes:
    """The stored form: zlib-compressed JSON (a full history of repetitive lines shrinks ~10x)."""
    return zlib.compress(json.dumps([e.to_dict() for e in events], separators=(",", ":")).encode(), 1)


def events_from_json(data: bytes | str) -> list[Event]:
    """Read a stored history, compressed or plain."""
    data = json_text(data)
    return [e for raw in json.loads(data) if isinstance(raw, dict) and (e := Event.from_dict(raw)) is not None]


def json_text(data: bytes | str) -> bytes | str:
    """Stored JSON as text: zlib streams (the large records, every history) decompressed."""
    if isinstance(data, bytes) and data[:1] == b"\x78":  # every zlib stream starts so, and no JSON text does
        return zlib.decompress(data)
    return data


class EventLog:
    """The newest :data:`MAX_EVENTS` events, in the order they were added; thread-safe (the
    supervisors' threads, the heartbeat and the teardown all add to it)."""

    def __init__(self, earlier: list[Event] | None = None, limit: int = MAX_EVENTS) -> None:
        self._limit = limit
        self._events: list[Event] = list(earlier or [])[-limit:]
        self._added = 0  # events added since construction: what a writer compares with what it wrote
        self._lock = threading.Lock()
        self.generation = 0  # stamped on every event added from now on (set by the daemon's claim)

    def add(
        self,
        kind: EventKind,
        message: str,
        *,
        time: float,
        type: EventType = EventType.NORMAL,
        group: str | None = None,
        rank: int | None = None,
    ) -> Event:
        event = Event(time, kind, type, _short(message), group, rank, self.generation)
        with self._lock:
            self._events.append(event)
            del self._events[: max(0, len(self._events) - self._limit)]
            self._added += 1
        return event

    def snapshot(self) -> tuple[list[Event], int]:
        """The events, and how many were added so far (a writer that wrote this count is up to date)."""
        with self._lock:
            return list(self._events), self._added

    def events(self) -> list[Event]:
        return self.snapshot()[0]

    @property
    def added(self) -> int:
        with self._lock:
            return self._added


def _short(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= MAX_MESSAGE_CHARS else line[: MAX_MESSAGE_CHARS - 1] + "…"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``90``, ``30s``, ``10m``, ``1h30m``, ``2d`` (kubectl's ``--since`` forms).

    Raises:
        ValueError: ``text`` is not such a duration (the message quotes it).
    """
    text = text.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a duration: use e.g. 30s, 10m, 1h30m or 2d")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def history_ending_with(
    earlier: list[Event], kind: EventKind, message: str, *, time: float, type: EventType, generation: int
) -> bytes:
    """``earlier`` and one last event, as stored: for those that end a supervisor they did not run
    (``supervisor gc``, the launcher of ``supervisor run``)."""
    log = EventLog(earlier)
    log.generation = generation
    log.add(kind, message, time=time, type=type)
    return events_to_json(log.events())
