"""The owner fence against real Ray (one single-node cluster for the module): a superseded owner's
record writes, actor kills, placement-group removals and retire are refused and change nothing; a
fence re-created over a record keeps its generation; a crashed start blocks later ones only for its
grace period; a retired fence gives way to the next claim; concurrent claims have one winner; a
"you still own it" that arrives after a pause long enough for a takeover is not acted upon."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from supervisor.daemon.fence import FENCE_ACTOR_NAME, ClaimVerdict, OwnerFence, answer_is_fresh, fence_status
from supervisor.daemon.ownership import namespace_of
from supervisor.daemon.record import RecordStore, SupervisorRecord
from supervisor.errors import SupersededError

GRACE_S = 1.5
INTERVAL_S = 0.2


@pytest.fixture
def name(one_node_cluster):
    """A fresh supervisor name; whatever a test leaves of it is removed afterwards."""
    import ray

    from supervisor.daemon.ownership import find_owned, remove_owned

    supervisor = f"fence-{uuid.uuid4().hex[:8]}"
    yield supervisor
    remove_owned(supervisor, find_owned(supervisor))  # the fence too
    RecordStore().delete(supervisor)
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == namespace_of(supervisor)]


def _record(name: str, fence: OwnerFence, owner: str, seq: int = 1) -> bytes:
    record = SupervisorRecord(
        name=name, namespace=namespace_of(name), owner=owner, generation=fence.generation or 0, pid=1, host="h",
        started_at=0.0, heartbeat_at=0.0, heartbeat_interval_s=INTERVAL_S, orphan_grace_s=GRACE_S, heartbeat_seq=seq,
    )  # fmt: skip
    return record.to_json()


def _claim(name: str, owner: str, **kwargs) -> tuple[OwnerFence, ClaimVerdict]:
    fence = OwnerFence(name)
    verdict, _ = fence.claim(owner, GRACE_S, INTERVAL_S, **kwargs)
    return fence, verdict


def _victims(name: str) -> tuple[object, object]:
    """A detached actor and a placement group, in the supervisor's namespace and name prefix."""
    import ray
    from ray.util import placement_group

    @ray.remote(num_cpus=0)
    class Victim:
        def ping(self) -> str:
            return "alive"

    actor = Victim.options(name="victim", namespace=namespace_of(name), lifetime="detached").remote()
    pg = placement_group([{"CPU": 0.01}], name=f"{name}.p:pg1:0", lifetime="detached")
    ray.get([actor.ping.remote(), pg.ready()], timeout=60)
    return actor, pg


def test_a_superseded_owner_is_refused_everything_and_changes_nothing(name):
    import ray
    from ray.util import placement_group_table

    old, verdict = _claim(name, "old")
    assert verdict is ClaimVerdict.GRANTED and old.generation == 1
    old.write_record(_record(name, old, "old"), seq=1)
    assert _claim(name, "new")[1] is ClaimVerdict.ALIVE  # heard from within its grace period
    actor, pg = _victims(name)

    time.sleep(GRACE_S + 0.3)  # the old owner is silent (paused) past its grace period
    new, verdict = _claim(name, "new")
    assert verdict is ClaimVerdict.GRANTED and new.generation == 2
    new.write_record(_record(name, new, "new"), seq=1)

    told: list[SupersededError] = []
    old.on_superseded = told.append
    with pytest.raises(SupersededError, match="taken over by another daemon"):
        old.write_record(_record(name, old, "old", seq=2), seq=2)
    for destroy in (lambda: old.kill_actors([actor]), lambda: old.remove_placement_groups([pg]), old.retire, old.check):
        with pytest.raises(SupersededError):
            destroy()
    assert len(told) == 1  # told once, however many calls it makes
    assert RecordStore().get(name).owner == "new"
    assert ray.get(actor.ping.remote(), timeout=30) == "alive"
    assert placement_group_table(pg)["state"] == "CREATED"

    new.kill_actors([actor])  # the owner may
    new.remove_placement_groups([pg])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ping.remote(), timeout=30)
    assert placement_group_table(pg)["state"] == "REMOVED"
    new.retire()
    assert RecordStore().get(name) is None
    assert fence_status(name) is None  # retired and ended


def test_a_yes_that_arrives_after_a_pause_is_asked_again_and_refused(name):
    """The owner asks the fence whether it still owns the job, the fence says yes, and the owner is
    paused before the answer reaches it; a successor takes over meanwhile. On resuming the owner
    must not act on that old yes (a stateful call would land on its successor's ranks): the answer
    came too late to trust, so it asks again and learns it was superseded."""
    old, _ = _claim(name, "old")
    old.write_record(_record(name, old, "old"), seq=1)
    answers: list[str] = []
    real_call = old._call

    def paused_after_the_answer(method: str, *args: object) -> None:
        real_call(method, *args)  # the fence answered yes
        answers.append(method)
        if len(answers) == 1:  # SIGSTOPped right here, past the grace period: a successor takes over
            time.sleep(GRACE_S + 0.3)
            successor, verdict = _claim(name, "new")
            assert verdict is ClaimVerdict.GRANTED
            successor.write_record(_record(name, successor, "new"), seq=1)

    old._call = paused_after_the_answer
    with pytest.raises(SupersededError, match="taken over by another daemon"):
        old.check()
    assert answers == ["check"]  # asked again; the second answer was a refusal
    assert RecordStore().get(name).owner == "new"


def test_a_quick_answer_is_trusted_and_a_slow_one_is_not():
    assert answer_is_fresh(0.01, GRACE_S)
    assert answer_is_fresh(GRACE_S / 4, GRACE_S)
    assert not answer_is_fresh(GRACE_S / 4 + 0.01, GRACE_S)
    assert not answer_is_fresh(0.0, None)  # never claimed


def test_a_fence_recreated_over_a_record_keeps_its_generation(name):
    import ray

    old, _ = _claim(name, "old")
    time.sleep(GRACE_S + 0.3)
    new, _ = _claim(name, "new")
    new.write_record(_record(name, new, "new"), seq=1)
    ray.kill(ray.get_actor(FENCE_ACTOR_NAME, namespace=namespace_of(name)), no_restart=True)  # somebody kills it
    time.sleep(1.0)
    new.write_record(_record(name, new, "new", seq=2), seq=2)  # a new fence, from the record: still the owner
    with pytest.raises(SupersededError):
        old.write_record(_record(name, old, "old"), seq=3)
    status = fence_status(name)
    assert status is not None and (status.generation, status.owner) == (2, "new")
    # The re-created fence heard from the owner at its own start: no takeover before the grace period.
    assert _claim(name, "third")[1] is ClaimVerdict.ALIVE


def test_a_start_that_crashed_after_its_claim_blocks_others_only_for_its_grace_period(name):
    _claim(name, "crashed")  # claimed, then died before writing any record
    assert _claim(name, "next")[1] is ClaimVerdict.ALIVE
    time.sleep(GRACE_S + 0.3)
    assert _claim(name, "next")[1] is ClaimVerdict.GRANTED


def test_a_retired_fence_left_behind_gives_way_to_the_next_claim(name):
    import ray

    fence, _ = _claim(name, "first")
    fence.write_record(_record(name, fence, "first"), seq=1)
    ray.get(fence._handle.retire.remote(fence.generation), timeout=30)  # retired, but its daemon died before ending it
    again, verdict = _claim(name, "second")
    assert verdict is ClaimVerdict.GRANTED and again.generation == 1  # a fresh fence: the record was gone
    assert fence_status(name).owner == "second"


def test_of_concurrent_claims_exactly_one_wins(name):
    verdicts: list[ClaimVerdict] = []
    lock = threading.Lock()

    def claim(owner: str) -> None:
        verdict = _claim(name, owner)[1]
        with lock:
            verdicts.append(verdict)

    threads = [threading.Thread(target=claim, args=(f"starter-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(v.value for v in verdicts) == ["alive"] * 5 + ["granted"]


def test_killing_a_dead_actor_whose_creator_job_is_gone_is_a_no_op(name, one_node_cluster):
    """A replacement started by a daemon that died since, then killed: Ray has dropped its class with
    its creator's job, and a handle to it no longer unpickles elsewhere. The fenced kill must still
    succeed (there is nothing left to kill), not fail the recovery over and over."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    import ray

    code = textwrap.dedent(
        f"""
        import ray
        ray.init(address="{one_node_cluster.address}", namespace="{namespace_of(name)}")
        @ray.remote(num_cpus=0)
        class Replacement:
            def pid(self):
                import os
                return os.getpid()
        actor = Replacement.options(name="replacement", lifetime="detached").remote()
        ray.get(actor.pid.remote())
        import os
        os._exit(0)  # the daemon that started it dies
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    handle = ray.get_actor("replacement", namespace=namespace_of(name))
    os.kill(ray.get(handle.pid.remote(), timeout=30), signal.SIGKILL)  # then the replacement dies
    time.sleep(2.0)
    fence, _ = _claim(name, "owner")
    fence.kill_actors([handle])  # raised RaySystemError (the class is gone) when handles were call arguments
    fence.check()
