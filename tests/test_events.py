"""The event history (pure): the bounded log, its stored form, the filters and the kubectl layout."""

from __future__ import annotations

import json
import threading
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.cli.events_command import EventRow, events_document, render_events, select_events
from supervisor.daemon.events import (
    MAX_MESSAGE_CHARS,
    Event,
    EventKind,
    EventLog,
    EventType,
    events_from_json,
    events_to_json,
    history_ending_with,
    parse_duration,
)

NOW = 1_800_000_000.0


def test_the_log_keeps_the_newest_events_in_order_and_counts_every_addition():
    log = EventLog(limit=3)
    log.generation = 4
    for i in range(5):
        log.add(EventKind.WORKER_FAILED, f"died {i}", time=NOW + i, type=EventType.WARNING, group="g", rank=i)
    events, added = log.snapshot()
    assert [e.message for e in events] == ["died 2", "died 3", "died 4"]
    assert added == 5 and {e.generation for e in events} == {4}
    assert events[-1].object == "group/g/4"


@given(st.lists(st.integers(0, 9), max_size=40), st.integers(1, 12))
def test_the_log_never_holds_more_than_its_limit_and_always_the_last_ones(ranks, limit):
    log = EventLog(limit=limit)
    for i, rank in enumerate(ranks):
        log.add(EventKind.WORKER_REPLACED, str(i), time=NOW + i, group="g", rank=rank)
    events = log.events()
    assert len(events) == min(limit, len(ranks))
    assert [e.message for e in events] == [str(i) for i in range(len(ranks))][-limit:] if ranks else events == []


def test_the_log_is_safe_to_add_to_from_several_threads():
    log = EventLog(limit=10_000)

    def add(t: int) -> None:
        for i in range(500):
            log.add(EventKind.WORKER_RECOVERED, f"{t}-{i}", time=NOW)

    threads = [threading.Thread(target=add, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.added == 2000 and len({e.message for e in log.events()}) == 2000


def test_messages_are_one_line_and_bounded():
    log = EventLog()
    event = log.add(EventKind.WORKER_FAILED, "ActorDiedError: gone\n  Traceback ...\n" + "x", time=NOW)
    assert event.message == "ActorDiedError: gone"
    long = log.add(EventKind.GROUP_FAILED, "y" * 5000, time=NOW)
    assert len(long.message) == MAX_MESSAGE_CHARS and long.message.endswith("…")


def test_the_stored_form_round_trips_and_skips_kinds_a_newer_version_wrote():
    events = [
        Event(NOW, EventKind.TAKEN_OVER, EventType.WARNING, "generation 2 took over", generation=2),
        Event(NOW + 1, EventKind.PLACEMENT_DRIFT, EventType.WARNING, "runs on node b", "g", 1, 2),
    ]
    assert events_from_json(events_to_json(events)) == events
    raw = json.loads(zlib.decompress(events_to_json(events))) + [{"time": NOW, "kind": "SomethingNew", "type": "Normal", "message": "?"}]
    assert events_from_json(json.dumps(raw)) == events  # plain JSON reads too
    assert len(events_to_json(events * 500)) < len(json.dumps(raw * 500)) / 5  # a history compresses


def test_a_history_ended_by_someone_else_keeps_the_earlier_events():
    earlier = [Event(NOW, EventKind.DAEMON_STATE, EventType.NORMAL, "running (pid 1 on h)", generation=1)]
    ended = events_from_json(history_ending_with(earlier, EventKind.COLLECTED, "collected by gc", time=NOW + 60, type=EventType.WARNING, generation=2))
    assert ended[:-1] == earlier
    assert (ended[-1].kind, ended[-1].generation, ended[-1].object) == (EventKind.COLLECTED, 2, "supervisor")


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("30s", 30), ("10m", 600), ("1h30m", 5400), ("2d", 172800), ("1.5h", 5400)])
def test_durations_in_kubectl_form(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m10", "1h 30m", "-5m", "10mm"])
def test_a_bad_duration_is_named(text):
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def _histories() -> dict[str, list[Event]]:
    return {
        "a": [
            Event(NOW - 3600, EventKind.DAEMON_STATE, EventType.NORMAL, "running (pid 1 on h)"),
            Event(NOW - 30, EventKind.WORKER_FAILED, EventType.WARNING, "died: ActorDiedError", "actor", 1),
            Event(NOW - 29, EventKind.WORKER_REPLACED, EventType.NORMAL, "a fresh actor into the same bundle (died)", "actor", 1),
        ],
        "b": [Event(NOW - 60, EventKind.GROUP_STATE, EventType.NORMAL, "running -> recovering", "critic")],
    }


def test_the_filters_select_by_age_group_type_and_what_was_printed_already():
    histories = _histories()
    assert [r.supervisor for r in select_events(histories, now=NOW)] == ["a", "b", "a", "a"]  # oldest first, across supervisors
    assert [r.event.kind for r in select_events(histories, now=NOW, since_s=45)] == [EventKind.WORKER_FAILED, EventKind.WORKER_REPLACED]
    assert [r.event.kind for r in select_events(histories, now=NOW, group="critic")] == [EventKind.GROUP_STATE]
    assert [r.event.kind for r in select_events(histories, now=NOW, warnings_only=True)] == [EventKind.WORKER_FAILED]
    assert [r.event.kind for r in select_events(histories, now=NOW, after=NOW - 30)] == [EventKind.WORKER_REPLACED]


def test_the_table_has_kubectls_columns_and_the_supervisor_only_when_several():
    rows = select_events(_histories(), now=NOW, since_s=45)
    lines = render_events(rows, NOW, with_supervisor=False).splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert lines[1].split()[:4] == ["30s", "Warning", "WorkerFailed", "group/actor/1"]
    assert lines[1].endswith("died: ActorDiedError")
    several = render_events(rows, NOW, with_supervisor=True).splitlines()
    assert several[0].split()[0] == "SUPERVISOR" and several[1].split()[0] == "a"
    assert render_events(rows, NOW, with_supervisor=False, header=False).splitlines() == lines[1:]


def test_the_document_is_versioned_and_names_each_events_supervisor():
    doc = events_document([EventRow("a", _histories()["a"][1])])
    assert doc["schema_version"] == 1
    assert doc["events"] == [
        {"supervisor": "a", "time": NOW - 30, "kind": "WorkerFailed", "type": "Warning", "message": "died: ActorDiedError", "group": "actor", "rank": 1, "generation": 0}
    ]
    json.dumps(doc)
