"""What keeping a group's state costs, and what restoring it costs, against the same group without state.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 .venv/bin/python -m bench.state_cost [--blocks 12] [--block-steps 10] [--kills 6] [--pad-mb 64]

Three figures, each measured against its reference in the same run, on a two-node local cluster
(127.0.0.1, 4 declared GPUs per node), with the example's training workers (examples/rlhf/training.py):

* **snapshot cost**: a 4-rank ``state="sharded"`` ZeRO group (``ActorUpdateWorker``, Adam) of a model
  with real parameters (``STEP_MODEL``: 10.5 M, 40 MiB on every rank, plus the Adam moments of the
  rank's partition), so a step computes what a model of its state's size computes; it steps with the
  periodic snapshot a driver's ``step_boundary`` takes before every step (``snapshot_every = 1``), and
  without, in alternating blocks of steps (the order rotating). A snapshot block's time includes
  waiting for its last snapshot to reach the keepers, so no hand-off spills into the next block: the
  figure is an upper bound. Goal: <= 1.02x. On this machine every core is busy with the ranks' steps,
  so the hand-off (a digest, a put, the other node's copy) takes its CPU from them; on a GPU node
  the step runs on the device and the hand-off on otherwise idle host cores.
The other two pad the state to ``pad_mb`` MiB per rank (a non-trainable buffer):

* **restore from a peer**: a 2-rank ``state="replicated"`` DDP group (``CriticWorker``, one rank per
  node) loses a rank to SIGKILL; timed from the kill to the group serving a call with every rank at
  the step it had (the digests are checked against the ones before the kill, outside the timing).
  Reference: the same worker in a ``state="none"`` group, which only re-runs its init. Goal: <= 1.5x.
* **rollback**: the 4-rank sharded group, snapshotted at step k and one step past it, loses a rank;
  timed from the kill to every rank serving at step k (digests checked). Reference: the same worker
  in a 4-rank ``state="none"`` group. Goal: <= 2x.

Both workers join a gloo collective in their init, so any replacement re-forms the group on every
rank, stateful or not. A ``state="none"`` group re-runs every rank's init only when its rank 0 is
replaced (the rendezvous rule; a lone replacement of another rank would wait for peers that never
rejoin), so the reference kills rank 0 each time; the stateful groups lose each rank in turn. Kills
alternate between the stateful group and its reference, the order flipping every pair.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from examples.rlhf.training import ActorUpdateWorker, CriticWorker
from supervisor import Dispatch, register

from .common import Row, Stat, interleave, print_rows

PAD_MB = 64.0
# The snapshot cost's model: real parameters, no pad, so the step computes what a model of its state's
# size computes: 10.5 M parameters (40 MiB, on every rank) and the Adam moments of the rank's ZeRO
# partition (ZeRO partitions whole tensors: 0 to 80 MiB), 64 samples a step.
STEP_MODEL = {"in_dim": 1024, "hidden": 5120, "out_dim": 1024, "batch_size": 64}
STEP_MODEL_MB = 120.0  # the most a rank's state of that model takes (for the snapshots' memory bound)
SNAPSHOT_GOAL = "<= 1.02x"
PEER_GOAL = "<= 1.5x"
ROLLBACK_GOAL = "<= 2.0x"
NODE = {"num_cpus": 8, "num_gpus": 4, "object_store_memory": 2 * 2**30}


class TimedActorUpdate(ActorUpdateWorker):
    """The example's ZeRO worker with a call that does nothing but answer (what "serving" is timed by:
    ``state_info`` would add a digest of the whole state to both sides of the comparison)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def ping(self) -> int:
        return self.step


class TimedCritic(CriticWorker):
    """The example's DDP worker with the same cheap call."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, idempotent=True)
    def ping(self) -> int:
        return self.step


@dataclass
class Supervised:
    """A created, initialised and supervised group, and what tears it down."""

    pool: Any
    group: Any
    sup: Any
    next_step: int = 0

    def train(self, steps: int) -> None:
        for _ in range(steps):
            self.group.train_step(self.next_step)
            self.next_step += 1

    def close(self) -> None:
        try:
            self.sup.stop()
        finally:
            self.group.kill()
            self.pool.teardown()


@dataclass(frozen=True)
class Recovery:
    """One kill's outcome: seconds from SIGKILL to the group serving, and whether its state was right."""

    seconds: float
    state_ok: bool


def supervised(
    cls: type, kind: str, ranks_per_node: list[int], prefix: str, pad_mb: float, snapshot_every: int = 0,
    recovery: str = "rollback", **model: Any,
) -> Supervised:  # fmt: skip
    """A group of ``cls`` (its constructor's ``model`` arguments) with ``state=kind``, snapshotting at
    every ``snapshot_every``-th step boundary (0: only when asked), its lost state recovered by ``recovery``."""
    from supervisor import ClassWithInitArgs, ResourcePool, SupervisionConfig, create_group, init_group
    from supervisor.state import StateConfig, StateKind, StateRecovery
    from supervisor.supervision import GroupSupervisor
    from supervisor.supervision.init_policy import InitPolicy
    from supervisor.supervision.restart_policy import RestartPolicy

    pool = ResourcePool(ranks_per_node, use_gpu=True, max_colocate_count=1, name_prefix=prefix)
    group = create_group(pool, ClassWithInitArgs(cls, pad_mb=pad_mb, **model), name_prefix=prefix)
    policy = InitPolicy(timeout_s=120, attempts=3, backoff_initial_s=0.05, backoff_max_s=0.5, backoff_jitter_s=0.0)
    init_group(group, "init_model", policy=policy)
    # Two kept snapshots of every shard, two copies each, with room to spare: the bound must not skip one.
    memory_mb = 8 * (pad_mb + STEP_MODEL_MB + 1) * sum(ranks_per_node)
    config = SupervisionConfig(
        init_method="init_model", init_policy=policy, probe_period_s=1.0,
        restart=RestartPolicy(max_restarts=10_000, backoff_initial_s=0.0),
        state=StateConfig(kind=StateKind(kind), snapshot_memory_mb=memory_mb, snapshot_every=snapshot_every, recovery=StateRecovery(recovery)),
    )  # fmt: skip
    return Supervised(pool, group, GroupSupervisor(group, config).start())


def kill_and_time(target: Supervised, rank: int, expect_step: int) -> float:
    """SIGKILL ``rank`` and return the seconds until every rank answers at ``expect_step``.

    The first call after the kill fails on the dead rank and is re-run once the group is back (it is
    idempotent); a rollback is announced once, by a :class:`RolledBack` from the next call.
    """
    from supervisor.core.worker.actor_heartbeat import wait_for_beat
    from supervisor.errors import RolledBack

    group, sup = target.group, target.sup
    generation = sup.generation(rank)
    pid = wait_for_beat(group.workers[rank], timeout_s=30).pid
    started = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    while True:
        try:
            steps = group.ping()
        except RolledBack:
            continue
        if sup.generation(rank) != generation and all(s == expect_step for s in steps):
            return time.perf_counter() - started
        time.sleep(0.005)  # an answer from before the death was noticed: ask again


def digests(target: Supervised) -> list[str]:
    return [info["digest"] for info in target.group.state_info()]


def peer_kill(target: Supervised, rank: int) -> Recovery:
    """Train two steps, then kill ``rank`` of a replicated group: back at the same step, same digests."""
    target.train(2)
    before = digests(target)
    seconds = kill_and_time(target, rank, target.next_step)
    return Recovery(seconds, digests(target) == before)


def rollback_kill(target: Supervised, rank: int) -> Recovery:
    """Snapshot a sharded group at step k, train one step, kill ``rank``: every rank back at k, k's digests."""
    k = target.next_step
    target.group.snapshot(k)
    target.sup.state_domain.wait_snapshots(target.group)
    at_k = digests(target)
    target.train(1)
    seconds = kill_and_time(target, rank, k)
    target.next_step = k
    return Recovery(seconds, digests(target) == at_k)


def fresh_kill(target: Supervised) -> Recovery:
    """Train two steps, then kill rank 0 of a ``state="none"`` group: every rank back at step 0."""
    target.train(2)
    seconds = kill_and_time(target, 0, 0)
    target.next_step = 0
    return Recovery(seconds, True)


def alternate(
    kills: int, ours: Callable[[int], Recovery], reference: Callable[[], Recovery], world: int, settle_s: float = 1.0
) -> tuple[list[Recovery], list[Recovery]]:  # fmt: skip
    """``kills`` of each, alternating, the order flipping every pair (ABBA) so drift hits both alike.
    Ours kills rank ``i % world`` the i-th time."""
    mine: list[Recovery] = []
    theirs: list[Recovery] = []
    for i in range(kills):
        pair = [lambda rank=i % world: mine.append(ours(rank)), lambda: theirs.append(reference())]
        for run in pair if i % 2 == 0 else pair[::-1]:
            run()
            time.sleep(settle_s)  # let the last replacement's after-effects (a new process settling) pass
    return mine, theirs


def snapshot_cost(target: Supervised, blocks: int, block_steps: int) -> tuple[Stat, Stat, Stat]:
    """Seconds per step with a snapshot at every step boundary and without, in alternating blocks;
    and the boundaries alone (what the driver waits for). The snapshots are the periodic ones a
    driver's ``ctx.step_boundary(step)`` takes (``snapshot_every = 1``): each rank copies its state
    before its next step and hands it off beside it."""
    domain = target.sup.state_domain
    calls: list[float] = []

    def with_snapshots() -> None:
        for _ in range(block_steps):
            started = time.perf_counter()
            domain.step_boundary(target.next_step)
            calls.append(time.perf_counter() - started)
            target.group.train_step(target.next_step)
            target.next_step += 1
        domain.wait_snapshots(target.group)  # the last hand-off counts in this block, not the next

    def without() -> None:
        target.train(block_steps)

    stats = interleave({"with": with_snapshots, "without": without}, reps=blocks, warmup=1, block=1)
    per_step = {name: Stat(s.median / block_steps, s.p95 / block_steps, s.n) for name, s in stats.items()}
    return per_step["with"], per_step["without"], Stat.of(calls)


def recovery_stat(recoveries: list[Recovery]) -> Stat:
    return Stat.of([r.seconds for r in recoveries])


def rows(pad_mb: float, state_mb: list[float], snapshot: tuple[Stat, Stat, Stat], block_steps: int, peer: tuple[list[Recovery], list[Recovery]],
         rollback: tuple[list[Recovery], list[Recovery]]) -> list[Row]:  # fmt: skip
    """The RESULTS.md rows; a kill whose state did not come back right is named in its case."""

    def exact(recoveries: list[Recovery]) -> str:
        wrong = sum(not r.state_ok for r in recoveries)
        return "digests equal to the state before the kill after every kill" if not wrong else f"**{wrong} kills left a wrong state**"

    with_s, without_s, call_s = snapshot
    return [
        Row(
            "state: step with a snapshot every step / without",
            f"4-rank sharded ZeRO group (Adam), 2 nodes, a {STEP_MODEL['in_dim']}-{STEP_MODEL['hidden']}-{STEP_MODEL['out_dim']} MLP "
            f"and {STEP_MODEL['batch_size']} samples a step; state per rank {', '.join(f'{mb:.0f}' for mb in state_mb)} MiB "
            f"(mean {sum(state_mb) / len(state_mb):.0f}); snapshots by step_boundary (snapshot_every = 1); {with_s.n} blocks of "
            f"{block_steps} steps each way; the boundary alone {call_s.median * 1e3:.1f} ms (p95 {call_s.p95 * 1e3:.1f})",
            with_s, "the same group, no snapshots", without_s, SNAPSHOT_GOAL,
        ),
        Row(
            "state: restore from a peer (SIGKILL -> serving, state restored)",
            f"2-rank replicated DDP group, one rank per node, {pad_mb:g} MiB per rank; {len(peer[0])} kills, each rank in turn; {exact(peer[0])}",
            recovery_stat(peer[0]), "the same worker, state=none, rank 0 killed (init re-run)", recovery_stat(peer[1]), PEER_GOAL, unit="s",
        ),
        Row(
            "state: rollback of a sharded group (SIGKILL -> every rank serving at the snapshot's step)",
            f"4-rank sharded ZeRO group, 2 per node, {pad_mb:g} MiB per rank; {len(rollback[0])} kills, each rank in turn; {exact(rollback[0])}",
            recovery_stat(rollback[0]), "the same worker, state=none, 4 ranks, rank 0 killed", recovery_stat(rollback[1]), ROLLBACK_GOAL, unit="s",
        ),
    ]  # fmt: skip


def run(blocks: int = 12, block_steps: int = 10, kills: int = 6, pad_mb: float = PAD_MB) -> list[Row]:
    """The three measurements (see the module's docstring), on one cluster."""
    import ray

    from .common import local_cluster

    cluster = local_cluster([NODE, NODE])
    try:
        # The sharded group and its reference: the snapshot cost first, then the rollbacks.
        stepping = supervised(TimedActorUpdate, "sharded", [2, 2], "cost-step-", 0.0, snapshot_every=1, **STEP_MODEL)
        try:
            snapshot = snapshot_cost(stepping, blocks, block_steps)
            state_mb = [info["nbytes"] / 2**20 for info in stepping.group.state_info()]  # with Adam's moments by now
            print(f"state_cost snapshot: {snapshot[0].median * 1e3:.1f} ms/step with, {snapshot[1].median * 1e3:.1f} without", flush=True)
        finally:
            stepping.close()
        sharded = supervised(TimedActorUpdate, "sharded", [2, 2], "cost-sharded-", pad_mb)
        plain4 = supervised(TimedActorUpdate, "none", [2, 2], "cost-none4-", pad_mb)
        try:
            rollback = alternate(kills, lambda r: rollback_kill(sharded, r), lambda: fresh_kill(plain4), 4)
            print(f"state_cost rollback: {[round(r.seconds, 2) for r in rollback[0]]} against {[round(r.seconds, 2) for r in rollback[1]]}", flush=True)
        finally:
            sharded.close()
            plain4.close()
        replicated = supervised(TimedCritic, "replicated", [1, 1], "cost-replicated-", pad_mb)
        plain2 = supervised(TimedCritic, "none", [1, 1], "cost-none2-", pad_mb)
        try:
            peer = alternate(kills, lambda r: peer_kill(replicated, r), lambda: fresh_kill(plain2), 2)
            print(f"state_cost peer: {[round(r.seconds, 2) for r in peer[0]]} against {[round(r.seconds, 2) for r in peer[1]]}", flush=True)
        finally:
            replicated.close()
            plain2.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return rows(pad_mb, state_mb, snapshot, block_steps, peer, rollback)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=12, help="blocks of steps each way for the snapshot cost")
    parser.add_argument("--block-steps", type=int, default=10)
    parser.add_argument("--kills", type=int, default=6, help="kills of each group and of its reference")
    parser.add_argument("--pad-mb", type=float, default=PAD_MB)
    args = parser.parse_args()
    print_rows(run(args.blocks, args.block_steps, args.kills, args.pad_mb))


if __name__ == "__main__":
    main()
