"""A rank killed inside an update: what that one call costs the driver, replayed in the group or rolled back.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.replay_cost [--kills 6] [--hold-s 1.0]

A 4-rank sharded ZeRO group (the example's ``ActorUpdateWorker``, Adam, a gloo collective in every step;
2 ranks on each of 2 of 3 nodes) takes a snapshot at every step boundary and steps; each step first holds
``hold_s`` (so a kill lands inside the call), then trains. Timed from the driver's side, for one call:

* **fault-free**: the call alone (the reference);
* **replay** (``recovery = "replay"``): a rank is SIGKILLed ``hold_s / 2`` into the call; the call
  returns its results once the group has re-formed, restored its own snapshot, replayed the calls since
  (none: the snapshot is of this step) and run the call again. The driver catches nothing;
* **rollback** (``recovery = "rollback"``, the other way): the same kill; the call raises
  ``RolledBack``, and the driver takes the step boundary and runs the step again, as a driver written
  for rollbacks does. Timed until that second call returns.

Both report the state's digests after the faulty call against the fault-free group's at the same step.
Goal for the replay: at most one recovery plus one call, i.e. its latency <= the rollback's (which is a
recovery plus the driver's own retry of the step); the ratio is replay / fault-free.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from supervisor import Dispatch, register

from .common import Row, Stat, print_rows
from .state_cost import NODE, TimedActorUpdate, supervised

MODEL = {"in_dim": 64, "hidden": 256, "out_dim": 64, "batch_size": 32}


class HeldActorUpdate(TimedActorUpdate):
    """The example's ZeRO worker whose step first holds ``hold_s``: a kill lands inside the call."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, mutates_state=True)
    def held_step(self, step: int, hold_s: float) -> dict[str, Any]:
        time.sleep(hold_s)
        return self.train_step(step)


def _pid(group: Any, rank: int) -> int:
    from supervisor.core.worker.actor_heartbeat import wait_for_beat

    return wait_for_beat(group.workers[rank], timeout_s=30).pid


def _snapshot_before(target: Any, step: int) -> None:
    """The driver's step boundary, its snapshot complete before the step (so a kill inside it has one)."""
    target.sup.state_domain.step_boundary(step)
    target.sup.state_domain.wait_snapshots(target.group)


def faulty_call(target: Any, rank: int, hold_s: float) -> tuple[float, list[str]]:
    """Step ``target`` once with ``rank`` killed half-way through the hold; seconds until the driver has
    that step's results (re-driving it after a rollback), and the digests after it."""
    from supervisor.errors import RolledBack

    domain, group = target.sup.state_domain, target.group
    step = target.next_step
    _snapshot_before(target, step)
    pid = _pid(group, rank)
    started = time.perf_counter()
    threading.Timer(hold_s / 2, os.kill, args=(pid, signal.SIGKILL)).start()
    while True:
        try:
            group.held_step(step, hold_s)
            break
        except RolledBack as rolled_back:  # the driver of a rollback re-drives from the step it names
            step = rolled_back.step
            domain.step_boundary(step)
    seconds = time.perf_counter() - started
    target.next_step = step + 1
    return seconds, [i["digest"] for i in group.state_info()]


def clean_call(target: Any, hold_s: float) -> tuple[float, list[str]]:
    group = target.group
    _snapshot_before(target, target.next_step)
    started = time.perf_counter()
    group.held_step(target.next_step, hold_s)
    seconds = time.perf_counter() - started
    target.next_step += 1
    return seconds, [i["digest"] for i in group.state_info()]


def run(kills: int = 6, hold_s: float = 1.0) -> list[Row]:
    import ray

    from .common import local_cluster

    cluster = local_cluster([NODE, NODE, NODE])  # three 4-rank groups, one GPU each
    times: dict[str, list[float]] = {"replay": [], "rollback": [], "clean": []}
    mismatches = {"replay": 0, "rollback": 0}
    try:
        recovery = {"replay": "replay", "rollback": "rollback", "clean": "rollback"}
        groups = {
            name: supervised(HeldActorUpdate, "sharded", [2, 2], f"replay-{name}-", 0.0, snapshot_every=1, recovery=how, **MODEL)
            for name, how in recovery.items()
        }
        try:
            for i in range(kills):
                order = ["replay", "rollback"] if i % 2 == 0 else ["rollback", "replay"]
                reference_s, reference = clean_call(groups["clean"], hold_s)
                times["clean"].append(reference_s)
                for name in order:
                    seconds, digests = faulty_call(groups[name], i % 4, hold_s)
                    times[name].append(seconds)
                    mismatches[name] += digests != reference
                print(f"replay_cost kill {i}: replay {times['replay'][-1]:.2f} s, rollback {times['rollback'][-1]:.2f} s, "
                      f"fault-free {reference_s:.2f} s", flush=True)  # fmt: skip
        finally:
            for target in groups.values():
                target.close()
    finally:
        ray.shutdown()
        cluster.shutdown()

    def exact(name: str) -> str:
        return "state equal to the fault-free group's after every kill" if not mismatches[name] else f"**{mismatches[name]} kills left a different state**"

    what = f"4-rank sharded ZeRO group (Adam), 2 ranks per node, snapshot every step, a step held {hold_s:g} s, {kills} kills inside it"
    return [
        Row("state: a call with a rank killed inside it, replayed (driver sees nothing) / fault-free call",
            f"{what}; {exact('replay')}", Stat.of(times["replay"]), "the same call, no fault", Stat.of(times["clean"]), unit="s"),
        Row("state: the same, replayed / rolled back and re-driven by the driver",
            f"{what}; rollback: {exact('rollback')}", Stat.of(times["replay"]), "recovery = rollback (RolledBack caught, step re-run)",
            Stat.of(times["rollback"]), "<= 1.0x", unit="s"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--hold-s", type=float, default=1.0)
    args = parser.parse_args()
    print_rows(run(args.kills, args.hold_s))


if __name__ == "__main__":
    main()
