"""The retry/poll helper on a fake clock: backoff, deadline, attempts, the owner stopping, the long-wait
report. No Ray."""

from __future__ import annotations

import threading
import time

import pytest

from supervisor.retrying import Backoff, WaitReport, poll, retry


class FakeTime:
    """A clock that only moves when the code under test sleeps; records each sleep."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def info(self, event: str, **fields: object) -> None:
        self.lines.append((event, fields))


def test_backoff_doubles_up_to_its_maximum():
    b = Backoff(0.01, 0.2)
    assert [b.delay_s(n) for n in range(1, 8)] == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2])
    assert Backoff.fixed(0.5).delay_s(1) == Backoff.fixed(0.5).delay_s(9) == 0.5


def test_backoff_jitter_adds_at_most_its_amount():
    delays = [Backoff(1.0, 30.0, jitter_s=1.0).delay_s(3) for _ in range(50)]
    assert all(4.0 <= d <= 5.0 for d in delays) and len(set(delays)) > 1


def test_poll_returns_the_first_truthy_result_after_growing_waits():
    t = FakeTime()
    answers = iter([None, None, None, None, "ready"])
    assert poll(lambda: next(answers), Backoff(0.01, 0.2), timeout_s=10, clock=t.clock, sleep=t.sleep) == "ready"
    assert t.sleeps == pytest.approx([0.01, 0.02, 0.04, 0.08])


def test_poll_gives_up_at_its_deadline_with_the_last_result():
    t = FakeTime()
    calls = []

    def check() -> list[int]:
        calls.append(t.now)
        return []

    assert poll(check, Backoff(0.5, 4.0), timeout_s=10, clock=t.clock, sleep=t.sleep) == []
    assert t.now - 100.0 == pytest.approx(10.0), "the last wait is cut to the deadline, never past it"
    assert calls[-1] == pytest.approx(110.0) and len(calls) == 6  # 0, .5, 1.5, 3.5, 7.5, 10


def test_poll_stops_after_its_attempts():
    t = FakeTime()
    assert poll(lambda: 0, Backoff.fixed(1.0), attempts=3, clock=t.clock, sleep=t.sleep) == 0
    assert t.sleeps == [1.0, 1.0]


def test_poll_lets_an_exception_of_its_check_through():
    t = FakeTime()

    def check() -> bool:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        poll(check, Backoff.fixed(1.0), timeout_s=5, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == []


def test_retry_retries_accepted_exceptions_and_reraises_the_last_at_the_deadline():
    t = FakeTime()
    calls = []

    def call() -> str:
        calls.append(t.now)
        raise ConnectionError(f"try {len(calls)}")

    with pytest.raises(ConnectionError, match=r"try 4"):
        retry(call, Backoff(1.0, 8.0), (ConnectionError,), timeout_s=6, clock=t.clock, sleep=t.sleep)
    assert t.sleeps == pytest.approx([1.0, 2.0, 3.0])  # 1, 2, then cut from 4 to the 3 s left


def test_retry_returns_once_the_call_succeeds_and_rejects_other_errors_at_once():
    t = FakeTime()
    outcomes = iter([ConnectionError("a"), ConnectionError("b"), "done"])

    def call() -> str:
        out = next(outcomes)
        if isinstance(out, Exception):
            raise out
        return out

    assert retry(call, Backoff(0.1, 1.0), lambda exc: isinstance(exc, ConnectionError), clock=t.clock, sleep=t.sleep) == "done"
    assert len(t.sleeps) == 2

    def wrong() -> str:
        raise ValueError("not retried")

    with pytest.raises(ValueError):
        retry(wrong, Backoff(0.1, 1.0), (ConnectionError,), clock=t.clock, sleep=t.sleep)
    assert len(t.sleeps) == 2


def test_a_callable_owner_stop_ends_the_wait():
    t = FakeTime()
    calls = []

    def check() -> bool:
        calls.append(1)
        return False

    assert poll(check, Backoff.fixed(1.0), timeout_s=100, stopping=lambda: len(calls) >= 3, clock=t.clock, sleep=t.sleep) is False
    assert len(calls) == 3 and t.now - 100.0 == pytest.approx(2.0)


def test_an_owner_event_ends_a_long_sleep_at_once():
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    began = time.monotonic()
    assert poll(lambda: False, Backoff.fixed(30.0), timeout_s=60, stopping=stop) is False
    assert time.monotonic() - began < 5.0, "waited out the backoff instead of ending when the owner stopped"


def test_a_long_wait_says_what_it_waits_for_and_for_how_long():
    t = FakeTime()
    log = RecordingLog()
    report = WaitReport(log, "waiting_for_thing", {"group": "g"}, after_s=5.0, every_s=5.0)
    poll(lambda: False, Backoff.fixed(1.0), timeout_s=16, report=report, clock=t.clock, sleep=t.sleep)
    assert [(e, f["group"], f["waited_s"]) for e, f in log.lines] == [
        ("waiting_for_thing", "g", 5.0),
        ("waiting_for_thing", "g", 10.0),
        ("waiting_for_thing", "g", 15.0),
    ]


def test_a_short_wait_logs_nothing():
    t = FakeTime()
    log = RecordingLog()
    answers = iter([False, False, True])
    poll(lambda: next(answers), Backoff.fixed(1.0), report=WaitReport(log, "w"), clock=t.clock, sleep=t.sleep)
    assert log.lines == []
