"""``supervisor events``: the event histories kept in the cluster, filtered and laid out like
``kubectl get events`` (selection and layout are pure; reading is :func:`collect_events`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..daemon.events import Event, EventType
from .table import format_duration, format_table

__all__ = [
    "EventRow",
    "EVENTS_SCHEMA_VERSION",
    "collect_events",
    "select_events",
    "render_events",
    "events_document",
]

EVENTS_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class EventRow:
    supervisor: str
    event: Event


def collect_events(names: Sequence[str] | None) -> dict[str, list[Event]]:
    """Every supervisor's history (or those of ``names``), as stored (needs a Ray connection)."""
    from ..daemon.record import RecordStore

    store = RecordStore()
    return {name: store.events(name) for name in (names or store.event_names())}


def select_events(
    histories: dict[str, list[Event]], *, now: float, since_s: float | None = None, group: str | None = None,
    warnings_only: bool = False, after: float | None = None,
) -> list[EventRow]:  # fmt: skip
    """The events that pass the filters, oldest first (``after``: only those newer than that time)."""
    rows = [
        EventRow(name, e)
        for name, events in histories.items()
        for e in events
        if (since_s is None or e.time >= now - since_s)
        and (group is None or e.group == group)
        and (not warnings_only or e.type is EventType.WARNING)
        and (after is None or e.time > after)
    ]
    return sorted(rows, key=lambda r: (r.event.time, r.supervisor))


def render_events(rows: Iterable[EventRow], now: float, with_supervisor: bool, header: bool = True) -> str:
    """kubectl's columns: LAST SEEN (age), TYPE, REASON, OBJECT, MESSAGE; SUPERVISOR first when several."""
    cells = [
        ([r.supervisor] if with_supervisor else [])
        + [
            format_duration(now - r.event.time),
            r.event.type.value,
            r.event.kind.value,
            r.event.object,
            r.event.message,
        ]
        for r in rows
    ]
    columns = (["supervisor"] if with_supervisor else []) + [
        "last seen",
        "type",
        "reason",
        "object",
        "message",
    ]
    text = format_table(columns, cells)
    return text if header else text.partition("\n")[2]


def events_document(rows: Iterable[EventRow]) -> dict[str, Any]:
    """The JSON and YAML form: versioned, one entry per event with its supervisor."""
    return {
        "schema_version": EVENTS_SCHEMA_VERSION,
        "events": [{"supervisor": r.supervisor, **r.event.to_dict()} for r in rows],
    }
