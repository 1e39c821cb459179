"""The replay log's pure rules (no Ray): what a restore replays, what a complete snapshot drops, and
that a restore the log cannot bring forward is refused, never replayed with a gap."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.state.replay_log import ReplayGap, ReplayLog, arguments_nbytes

# A run: snapshots requested (("snap", step)), completed (("done", step)) and calls (("call", name)).
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("snap"), st.integers(0, 6)),
        st.tuples(st.just("done"), st.integers(0, 6)),
        st.tuples(st.just("call"), st.sampled_from("abc")),
    ),
    max_size=30,
)


def _play(events):
    """The log after ``events``, and every call made with the epoch it was made in (in order)."""
    log, made, epoch, requested, completed = ReplayLog(), [], None, [], []
    for kind, value in events:
        if kind == "snap":
            step = max([value, *requested])  # steps only grow, as the driver's do
            log.snapshot_requested(step)
            epoch = step
            requested.append(step)
        elif kind == "done" and requested:
            step = requested[value % len(requested)]  # only a requested snapshot completes
            log.snapshot_complete(step)
            completed.append(step)
        elif kind == "call":
            if log.append(value, {0: ((value,), {})}) is not None:
                made.append((epoch, value))
    return log, made, requested, completed


@given(EVENTS)
def test_a_restore_replays_exactly_the_calls_made_since_its_snapshot_in_order(events):
    log, made, requested, completed = _play(events)
    newest = max(completed, default=None)
    for step in set(requested):
        if newest is not None and step < newest:
            with pytest.raises(ReplayGap):  # dropped once a newer snapshot completed
                log.since(step)
            continue
        assert [c.method for c in log.since(step)] == [name for epoch, name in made if epoch >= step]


@given(EVENTS)
def test_the_log_holds_nothing_older_than_the_newest_complete_snapshot(events):
    log, made, _, completed = _play(events)
    newest = max(completed, default=None)
    if newest is not None:
        assert all(c.epoch >= newest for c in log.calls)
        assert len(log) == len([1 for epoch, _ in made if epoch >= newest])


def test_calls_before_the_first_snapshot_are_not_logged_and_nothing_replays_without_one():
    log = ReplayLog()
    assert log.append("update", {0: ((), {})}) is None
    with pytest.raises(ReplayGap, match="nothing was logged"):
        log.since(0)


def test_a_job_wide_rollback_forgets_the_calls_the_driver_makes_again():
    log = ReplayLog()
    log.snapshot_requested(0)
    log.append("update", {0: ((0,), {})})
    log.snapshot_requested(1)
    log.append("update", {0: ((1,), {})})
    log.rolled_back(1)
    assert [c.per_rank[0][0] for c in log.since(0)] == [(0,)]
    log.append("update", {0: ((1,), {})})  # made again, in epoch 1
    assert [c.epoch for c in log.since(0)] == [0, 1]


def test_after_a_rollback_to_an_older_snapshot_the_log_replays_from_it():
    log = ReplayLog()
    for step in range(3):
        log.snapshot_requested(step)
        log.append("update", {0: ((step,), {})})
    log.snapshot_complete(2)  # the calls before step 2 are dropped
    log.rolled_back(1)  # the job went back to step 1 (step 2's copies lost): every rank holds step 1
    assert log.since(1) == ()
    log.append("update", {0: ((1,), {})})  # the driver re-drives step 1
    assert [c.per_rank[0][0] for c in log.since(1)] == [(1,)]


def test_a_batch_given_to_every_rank_is_counted_once():
    batch = np.zeros(1024, dtype=np.float32)
    assert arguments_nbytes({r: ((batch,), {"lr": 0.1}) for r in range(4)}) == 4096
    assert arguments_nbytes({0: ((batch,), {}), 1: ((batch.copy(),), {})}) == 8192
