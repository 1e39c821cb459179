"""Liveness and fencing rules without Ray: heartbeats judged by sequence numbers on the reader's own
clock, pids only where they mean something, the owner fence's claim rule, and the progress check."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.daemon.fence import ClaimRequest, ClaimVerdict, FenceState, decide_claim
from supervisor.daemon.job import ProgressNotSerializableError, check_progress
from supervisor.daemon.liveness import HeartbeatWatch, Liveness, ProcessIdentity, judge, pid_alive


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_heartbeat_is_judged_by_its_sequence_number_on_the_readers_clock():
    clock, watch = Clock(), HeartbeatWatch()
    watch.observe(7, clock())
    clock.now += 4.0
    watch.observe(7, clock())  # the same beat seen again: no news
    assert watch.silent_for(clock()) == 4.0
    watch.observe(8, clock())
    assert watch.silent_for(clock()) == 0.0
    clock.now += 31.0
    assert judge(watch.silent_for(clock()), interval_s=1.0, grace_s=30.0) is Liveness.ORPHANED


@given(skew=st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), beats=st.integers(min_value=1, max_value=50))
def test_the_writers_wall_clock_never_enters(skew, beats):
    """A daemon whose wall clock is off by ``skew`` seconds looks the same: only its sequence numbers
    and the reader's monotonic clock count."""
    clock, watch = Clock(), HeartbeatWatch()
    writer_wall = 1.7e9 + skew
    for seq in range(beats):
        writer_wall += 1.0  # what the record's heartbeat_at would say: never read
        watch.observe(seq, clock())
        clock.now += 1.0
    assert judge(watch.silent_for(clock()), 1.0, 30.0) is Liveness.ALIVE
    clock.now += 30.5  # the daemon stops beating
    assert judge(watch.silent_for(clock()), 1.0, 30.0) is Liveness.ORPHANED


def test_liveness_thresholds_and_detached():
    assert judge(0.5, 1.0, 30.0) is Liveness.ALIVE
    assert judge(3.5, 1.0, 30.0) is Liveness.STALE  # three beats missed
    assert judge(30.5, 1.0, 30.0) is Liveness.ORPHANED
    assert judge(10**9, 1.0, 30.0, detached=True) is Liveness.DETACHED  # gone on purpose: never an orphan


def test_a_pid_is_checked_only_in_its_own_pid_namespace_and_boot():
    me = ProcessIdentity.current()
    assert me.boot_id and me.pid_namespace  # Linux: both known
    gone_pid = _unused_pid()
    assert ProcessIdentity(me.host, me.boot_id, me.pid_namespace, gone_pid).provably_gone(me)
    # The same hostname in another container (another pid namespace), or after a reboot: that pid
    # says nothing here, so the daemon is never judged gone from it.
    assert not ProcessIdentity(me.host, me.boot_id, "pid:[4026531999]", gone_pid).provably_gone(me)
    assert not ProcessIdentity(me.host, "another-boot", me.pid_namespace, gone_pid).provably_gone(me)
    assert not ProcessIdentity("other-host", me.boot_id, me.pid_namespace, gone_pid).provably_gone(me)
    assert not ProcessIdentity(me.host, "", "", gone_pid).provably_gone(me)  # a record from before these fields
    assert not ProcessIdentity(me.host, me.boot_id, me.pid_namespace, os.getpid()).provably_gone(me)  # itself
    assert not ProcessIdentity(me.host, me.boot_id, me.pid_namespace, os.getppid()).provably_gone(me)  # alive


def _unused_pid() -> int:
    pid = 4_000_000
    while pid_alive(pid):
        pid -= 1
    return pid


def _request(judged_owner: str | None = "a", gone: bool = False, override: float | None = None) -> ClaimRequest:
    return ClaimRequest("b", judged_owner, gone, grace_s=30.0, interval_s=1.0, grace_override_s=override)


def test_claims_take_over_only_an_owner_that_is_gone():
    owned = FenceState(generation=3, owner="a", grace_s=5.0, interval_s=0.5)
    assert decide_claim(FenceState(), _request(None), 0.0) is ClaimVerdict.GRANTED  # nobody owns it
    assert decide_claim(owned, _request(), 4.9) is ClaimVerdict.ALIVE  # heard from within its grace
    assert decide_claim(owned, _request(), 5.1) is ClaimVerdict.GRANTED  # silent past its own grace
    assert decide_claim(owned, _request(gone=True), 0.0) is ClaimVerdict.GRANTED  # its process is proven gone
    # Proof about another owner than the fence's (a claim won meanwhile) proves nothing.
    assert decide_claim(owned, _request("x", gone=True), 0.0) is ClaimVerdict.ALIVE
    detached = FenceState(generation=3, owner="a", grace_s=5.0, detached=True)
    assert decide_claim(detached, _request(), 0.0) is ClaimVerdict.GRANTED
    retired = FenceState(generation=3, owner="a", retired=True)
    assert decide_claim(retired, _request(gone=True), 10**6) is ClaimVerdict.RETIRED


def test_gc_grace_override_never_goes_below_three_beats():
    owned = FenceState(generation=1, owner="a", grace_s=30.0, interval_s=1.0)
    assert decide_claim(owned, _request(override=0.0), 2.0) is ClaimVerdict.ALIVE  # a live heartbeat is never collected
    assert decide_claim(owned, _request(override=0.0), 3.5) is ClaimVerdict.GRANTED
    assert decide_claim(owned, _request(override=60.0), 45.0) is ClaimVerdict.ALIVE


def test_a_crashed_start_blocks_later_starts_only_for_its_grace_period():
    # A start claimed (generation 4, owner "crashed") and died before writing its record: the next
    # start read the record of the owner before it ("a"), so its proof is about the wrong owner.
    stale = FenceState(generation=4, owner="crashed", grace_s=5.0, interval_s=0.5)
    assert decide_claim(stale, _request("a", gone=True), 1.0) is ClaimVerdict.ALIVE
    assert decide_claim(stale, _request("a", gone=True), 5.5) is ClaimVerdict.GRANTED


def test_progress_that_json_cannot_hold_is_refused_at_the_call_naming_the_key():
    check_progress({"step": 3, "loss": 0.5, "tags": ["a", {"b": None}], "np_float": np.float64(1.5)})
    with pytest.raises(ProgressNotSerializableError, match=r"progress\[.step.\] is a numpy.int64"):
        check_progress({"step": np.int64(3)})
    with pytest.raises(ProgressNotSerializableError, match=r"progress\['hist'\]\[1\] is a set"):
        check_progress({"hist": [1, {2}]})
    with pytest.raises(ProgressNotSerializableError, match=r"progress\['x'\] is nan"):
        check_progress({"x": float("nan")})
    with pytest.raises(ProgressNotSerializableError, match=r"has the key 1 \(int\); JSON keys are strings"):
        check_progress({"nested": {1: "a"}})
    with pytest.raises(ProgressNotSerializableError, match="takes a dict, got list"):
        check_progress([1])  # type: ignore[arg-type]
    assert isinstance(ProgressNotSerializableError("x"), TypeError)


class _FlakyFence:
    """Stands in for the owner fence's transport: the first write fails as a GCS stall would."""

    def __init__(self) -> None:
        self.calls = 0
        self.written: list[bytes] = []
        self.events: list[bytes | None] = []

    def write_record(self, data: bytes, seq: int, detached: bool = False, events: bytes | None = None) -> None:
        self.calls += 1
        if self.calls == 1:
            raise TimeoutError("the GCS did not answer")
        self.written.append(data)
        self.events.append(events)


def test_a_failed_record_write_is_counted_and_shown_by_the_next_one():
    from supervisor.daemon.job import Job
    from supervisor.daemon.record import SupervisorRecord

    job = Job(spec=None, owner="o")  # type: ignore[arg-type]  # write_record reads no spec field
    job.store = object()  # type: ignore[assignment]
    job.fence = _FlakyFence()  # type: ignore[assignment]
    job.record = SupervisorRecord("n", "supervisor.n", "o", 1, "h", 0.0, 0.0, 1.0, 30.0)
    with pytest.raises(TimeoutError):
        job.write_record()
    job.write_record()
    written = SupervisorRecord.from_json(job.fence.written[-1])  # type: ignore[attr-defined]
    assert written.record_write_failures == 1 and written.last_record_write_error == "TimeoutError: the GCS did not answer"
    assert written.heartbeat_seq == 2  # every attempt is a new beat
    # The event history the failed write carried is sent again, and only while it has news.
    from supervisor.daemon.events import EventKind, events_from_json

    (sent,) = job.fence.events  # type: ignore[attr-defined]
    assert [e.kind for e in events_from_json(sent)] == [EventKind.DAEMON_STATE]
    job.write_record()
    assert job.fence.events[-1] is None  # type: ignore[attr-defined]
