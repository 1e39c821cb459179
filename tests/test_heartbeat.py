"""Detection without concurrency groups: the heartbeat thread, the death watch, and the beat clock.

The real-Ray tests share the module's two-node cluster (``ray_cluster``); the beat clock's are pure.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor import ClassWithInitArgs, Dispatch, ResourcePool, Worker, create_group, register
from supervisor.core.worker.actor_heartbeat import (
    HEARTBEAT_PERIOD_S,
    Beat,
    read_beats,
    stale_beats,
    wait_for_beat,
)
from supervisor.failure import ErrorKind
from supervisor.supervision import death_watch
from supervisor.supervision.detection import BeatClock


class ThreadedWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def on_main_thread(self) -> bool:
        return threading.current_thread() is threading.main_thread()

    def busy(self, seconds: float) -> None:
        time.sleep(seconds)

    def ping(self) -> int:
        return os.getpid()


# -- the beat clock (pure) ----------------------------------------------------------------------
def test_a_new_incarnation_has_the_whole_patience_for_its_first_beat():
    clock = BeatClock(patience_s=10.0)
    clock.watch("r0", now=100.0)
    assert clock.silent(now=110.0) == {}
    assert clock.silent(now=110.5) == {"r0": 10.5}


def test_only_a_new_counter_resets_the_clock():
    clock = BeatClock(patience_s=5.0)
    clock.watch("r0", now=0.0)
    assert clock.seen("r0", 1, now=1.0)
    assert not clock.seen("r0", 1, now=4.0), "the same beat read again is not a new one"
    assert not clock.seen("r0", None, now=5.0), "no beat at all is not a new one"
    assert clock.silent(now=6.5) == {"r0": 5.5}
    assert not clock.seen("unwatched", 3, now=6.5)


def test_a_gap_in_reading_judges_nobody():
    clock = BeatClock(patience_s=5.0)
    clock.watch("r0", now=0.0)
    clock.blind(now=60.0)  # the GCS was away for a minute
    assert clock.silent(now=64.0) == {}


@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.booleans()), max_size=60), st.floats(1.0, 10.0))
def test_silent_exactly_when_no_new_beat_for_longer_than_patience(reads, patience):
    """Reads at increasing times, each seeing a new beat or not: a rank is silent at a time iff its
    last new beat (or its watch) is more than ``patience`` before it."""
    clock = BeatClock(patience_s=patience)
    now, seq, last_new = 0.0, 0, 0.0
    clock.watch("r", now)
    for gap, new in reads:
        now += gap
        if new:
            seq += 1
            last_new = now
        assert clock.seen("r", seq if seq else None, now) == (new and seq > 0)
        assert ("r" in clock.silent(now)) == (now - last_new > patience)


def test_beats_round_trip():
    beat = Beat(seq=7, node_id="ab" * 28, pid=4242, rank=None)
    assert Beat.decode(beat.encode()) == beat


# -- real Ray -----------------------------------------------------------------------------------
@pytest.fixture
def group(ray_cluster, no_leaks):
    pool = ResourcePool([2], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(ThreadedWorker))
    try:
        yield group
    finally:
        group.kill()
        pool.teardown()


def test_a_supervised_rank_is_a_plain_actor_running_calls_on_its_main_thread(group):
    assert group.on_main_thread() == [True, True]


def test_the_heartbeat_goes_on_while_the_rank_is_busy_and_stops_while_it_is_stopped(group):

    handle = group.workers[1]
    actor_id = handle._actor_id.hex()
    beat = wait_for_beat(handle)
    assert (beat.rank, beat.node_id) == (1, group.placed_bundles()[group.rank_bundles[1]])  # the rank's node
    handle.busy.remote(30.0)
    first = read_beats([actor_id])[actor_id].seq
    time.sleep(3 * HEARTBEAT_PERIOD_S)
    busy = read_beats([actor_id])[actor_id].seq
    assert busy >= first + 2, f"a busy rank beats: {first} -> {busy}"
    os.kill(beat.pid, signal.SIGSTOP)
    try:
        time.sleep(HEARTBEAT_PERIOD_S + 0.2)  # a beat written just before the stop lands
        stopped = read_beats([actor_id])[actor_id].seq
        time.sleep(3 * HEARTBEAT_PERIOD_S)
        assert read_beats([actor_id])[actor_id].seq == stopped, "a stopped process does not beat"
    finally:
        os.kill(beat.pid, signal.SIGCONT)
    group.kill()
    assert read_beats([actor_id]) == {}, "a killed group leaves no beats"


def test_a_death_watch_sees_a_kill_fast_busy_or_idle_and_queues_nothing_in_the_way(group):
    import ray

    death_watch.acquire()
    try:
        idle, busy = group.workers
        watches = [death_watch.watch(idle), death_watch.watch(busy)]
        # The watch is queued by the watcher: this process's calls to the same actors still run.
        assert ray.get(idle.ping.remote(), timeout=10) == wait_for_beat(idle).pid
        busy.busy.remote(60.0)
        time.sleep(0.5)
        for handle, watch in zip((idle, busy), watches, strict=True):
            killed = time.monotonic()
            os.kill(wait_for_beat(handle).pid, signal.SIGKILL)
            ready, _ = ray.wait([watch], timeout=10)
            assert ready, "the watch resolved when its actor died"
            assert time.monotonic() - killed < 1.0
            notice = ray.get(watch)
            assert notice.kind is ErrorKind.DIED and notice.detail
    finally:
        death_watch.release()


def test_an_unwatched_rank_runs_on_and_a_lost_watcher_is_replaced(group):
    import ray

    death_watch.acquire()
    try:
        rank, other = group.workers
        watch = death_watch.watch(rank)  # the first watch: it made the object every watch waits for
        other_watch = death_watch.watch(other)
        time.sleep(0.3)
        death_watch.unwatch(watch)
        with pytest.raises(ray.exceptions.TaskCancelledError):
            ray.get(watch, timeout=10)
        assert ray.get(rank.ping.remote(), timeout=10)
        time.sleep(0.5)
        assert ray.wait([other_watch], timeout=0)[1], "the other watch still waits"
        death_watch.unwatch(other_watch)

        watch = death_watch.watch(rank)
        time.sleep(0.3)
        ray.kill(death_watch._get_watcher())
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(watch, timeout=10)  # the watcher's own death: no notice about the rank
        death_watch.replace_lost_watcher()
        watch = death_watch.watch(rank)
        os.kill(wait_for_beat(rank).pid, signal.SIGKILL)
        assert ray.get(watch, timeout=10).kind is ErrorKind.DIED
    finally:
        death_watch.release()  # the watcher ends with its last user: no_leaks checks it


def test_a_killed_group_leaves_no_beat_even_one_written_while_its_actors_were_dying(ray_cluster, no_leaks):
    """ray.kill returns before the process ends; a delete made right away lost the race to the last beat
    of about 1 in 15 actors (so 16 ranks caught it about 2 times in 3)."""
    pool = ResourcePool([8, 8], use_gpu=False, max_colocate_count=1)
    group = create_group(pool, ClassWithInitArgs(ThreadedWorker))
    try:
        ids = [w._actor_id.hex() for w in group.workers]
        for worker in group.workers:
            wait_for_beat(worker)
        time.sleep(0.4)  # off the beat the ranks started on
        group.kill()
        time.sleep(2 * HEARTBEAT_PERIOD_S)  # any beat still in flight has landed
        assert read_beats(ids) == {}, "a beat written after the group deleted it stays until gc"
    finally:
        group.kill()
        pool.teardown()


def test_gc_removes_the_beats_of_actors_that_are_gone_and_only_those(group, ray_cluster):
    import subprocess
    import sys

    import ray

    gone, alive = group.workers
    gone_id, alive_id = gone._actor_id.hex(), alive._actor_id.hex()
    wait_for_beat(gone)
    wait_for_beat(alive)
    ray.kill(gone)  # not through the group (which deletes the beats of what it kills): a beat left behind
    deadline = time.monotonic() + 30
    while gone_id not in stale_beats():
        assert time.monotonic() < deadline, "the killed actor's beat is stale once Ray has it dead"
        time.sleep(0.1)
    assert alive_id not in stale_beats()

    def gc(*options):
        command = [sys.executable, "-m", "supervisor.cli.commands", "gc", *options, "--address", ray_cluster.address]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout

    assert "would remove the heartbeats of" in gc("--dry-run")
    assert gone_id in read_beats([gone_id])
    assert "removed the heartbeats of" in gc()
    assert set(read_beats([gone_id, alive_id])) == {alive_id}, "a live actor's beat is never removed"


class _Beating:
    def __init__(self) -> None:
        from supervisor.core.worker.actor_heartbeat import start_heartbeat

        start_heartbeat(lambda: 0)


def test_killing_a_supervisors_named_actors_deletes_their_beats(ray_cluster):
    """Teardown and gc kill by name (daemon.ownership): no beat of theirs is left for a later gc."""
    import ray

    from supervisor.daemon.ownership import kill_named, namespace_of

    actor = ray.remote(_Beating).options(name="rank-0", namespace=namespace_of("sv-beats"), num_cpus=0).remote()
    actor_id = actor._actor_id.hex()
    wait_for_beat(actor)
    kill_named("sv-beats", ["rank-0", "never-started"])
    assert read_beats([actor_id]) == {}
