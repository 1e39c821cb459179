"""kill-during-recovery: SIGKILL the daemon in the middle of a rank's recovery, and start it again.
Rounds alternate the moment (while the replacement's slow constructor runs, before any init was sent;
or while its slow init runs), the rank (0, whose replacement brings a new rendezvous, or 1) and the
group (rollout, stateless; or a trained one, whose every rank re-forms and gets its state back). The
new daemon must find, from the record, which ranks were not initialised, and run their init on the
current rendezvous: every rank ends up initialised on the same, current rendezvous, the job goes on
losing no item, and the trained state ends as a fault-free run's."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from ..faults import KillMethod, kill_actor, rank_rendezvous, stop_daemon
from ..harness import JobOptions, rank_actor, wait_until
from ..report import Stats
from ..runner import Context

SLOW_S = 6.0  # a worker importing torch, a model load
# (the group, the recovery phase the daemon dies in, the rank killed), in turn: the quick profile's
# two rounds are one stateless and one trained group.
ROUNDS = (("rollout", "restarting", 0), ("actor", "initializing", 1), ("rollout", "initializing", 0), ("critic", "restarting", 1))
SLOW_GROUPS = sorted({group for group, _, _ in ROUNDS})


@dataclass(frozen=True)
class Params:
    rounds: int


def run(ctx: Context, p: Params) -> None:
    options = JobOptions()
    daemon = ctx.start(options)
    daemon.wait_running()
    daemon.wait_steps(1)
    # From now on every constructor and init of the group takes SLOW_S (not at the first start).
    for kind in ("slowstart", "slowinit"):
        for group in SLOW_GROUPS:
            (ctx.fault_dir / f"{kind}-{group}-all").write_text(str(SLOW_S))
    readoption: list[float] = []
    for i in range(p.rounds):
        if not ctx.time_left():
            break
        group, phase, rank = ROUNDS[i % len(ROUNDS)]
        record = daemon.record()
        kill_actor(rank_actor(record, group, rank)[1], KillMethod.SIGKILL)
        ctx.injected(f"{group} rank {rank} SIGKILL")
        # Kill the daemon once the rank is in that phase (the record says so: it is written as the
        # state changes, which is what this scenario is about), a third into its slow part.
        wait_until(lambda d=daemon, g=group, r=rank, s=phase: _in_state(d.record(), g, r, s), 60, f"{group} rank {rank} to be {phase}")
        time.sleep(SLOW_S / 3)
        daemon.signal(signal.SIGKILL)
        killed = time.monotonic()
        daemon.wait_exit(30)
        ctx.injected(f"daemon SIGKILL while a rank is {phase}")
        daemon = ctx.start(options)
        record = daemon.wait_running(300)
        readoption.append(time.monotonic() - killed)
        current = f"{record.groups[group].master_addr}:{record.groups[group].master_port}"
        seen = rank_rendezvous(record, group)
        if seen != [current] * len(seen):
            ctx.violation(f"round {i}: {group} ranks initialised on {seen}, the group's rendezvous is {current}")
        daemon.wait_steps(daemon.steps_done() + 1)
        ctx.report.faults_recovered += 1
    ctx.report.recovery = Stats.of(readoption)
    ctx.report.notes["recovery measures"] = "daemon SIGKILL during a rank's recovery -> a new daemon has re-adopted the job (RUNNING)"
    for kind in ("slowstart", "slowinit"):
        for group in SLOW_GROUPS:
            (ctx.fault_dir / f"{kind}-{group}-all").unlink(missing_ok=True)
    code = stop_daemon(daemon, ctx.cluster.address)
    if code != 0:
        ctx.violation(f"`supervisor stop` ended the daemon with exit code {code}, expected 0")
    ctx.check_steps_and_items(min_steps=p.rounds + 1, allow_reruns=True)
    ctx.check_state_intact()
    ctx.check_torn_down()


def _in_state(record: object, group: str, rank: int, state: str) -> bool:
    if record is None:
        return False
    ranks = record.groups[group].ranks  # type: ignore[attr-defined]
    return any(r.rank == rank and r.state == state for r in ranks)


PROFILES = {"quick": Params(rounds=2), "full": Params(rounds=10)}
TIME_LIMIT_S = {"quick": 360.0, "full": 1500.0}
